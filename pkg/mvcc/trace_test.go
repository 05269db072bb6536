package mvcc

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// The backend commit of a buffer that holds writes of traced proposals is
// a "backend.commit" span linked to each sampled one; a commit without
// them starts no span.
func TestCommitSpanLinksProposals(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	cfg := noAutoFlush
	cfg.tracer = tp.Tracer("test")
	ts := newTestStoreConfig(t, engines[0], cfg)

	sc := func(b byte, sampled bool) trace.SpanContext {
		c := trace.SpanContextConfig{TraceID: trace.TraceID{b}, SpanID: trace.SpanID{b}}
		if sampled {
			c.TraceFlags = trace.FlagsSampled
		}
		return trace.NewSpanContext(c)
	}
	put := func(k string, links ...trace.SpanContext) {
		ts.apply(func(b *Batch) {
			for _, l := range links {
				b.Link(l)
			}
			tw := b.Write()
			tw.Put([]byte(k), []byte("v"), 0)
			tw.End()
		})
	}
	put("a")
	ts.flush()
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("%d spans for a commit of untraced writes", n)
	}
	put("b", sc(1, true), sc(2, false))
	put("c", sc(3, true))
	ts.flush()
	spans := rec.Ended()
	if len(spans) != 1 || spans[0].Name() != "backend.commit" {
		t.Fatalf("spans %v, want one backend.commit", spans)
	}
	var linked []trace.SpanID
	for _, l := range spans[0].Links() {
		linked = append(linked, l.SpanContext.SpanID())
	}
	if len(linked) != 2 || linked[0] != (trace.SpanID{1}) || linked[1] != (trace.SpanID{3}) {
		t.Errorf("backend.commit links %v, want the sampled proposals 1 and 3", linked)
	}
	if spans[0].Parent().IsValid() {
		t.Errorf("backend.commit has parent %v, want a root", spans[0].Parent())
	}
	// The next commit starts with no links.
	put("d")
	ts.flush()
	if n := len(rec.Ended()); n != 1 {
		t.Errorf("%d spans after a commit of untraced writes, want still 1", n)
	}
}
