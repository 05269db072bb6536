package server

import (
	"context"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/fx"
	"google.golang.org/grpc/metadata"
)

func TestTracingOffInstallsNoStatsHandler(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	c := testConfig(t, "bolt", t.TempDir())
	var mt *memberTracing
	var tr trace.Tracer
	startMember(t, c, fx.Populate(&mt, &tr))
	if mt.enabled || tr != nil {
		t.Fatalf("tracing off: enabled %v, tracer %v", mt.enabled, tr)
	}
	for _, m := range []*memberTracing{nil, mt, {tp: noop.NewTracerProvider()}} {
		if opts := tracingServerOptions(m); len(opts) != 0 {
			t.Errorf("tracing off: %d server options, want none", len(opts))
		}
	}
	if opts := tracingServerOptions(&memberTracing{tp: sdktrace.NewTracerProvider(), enabled: true}); len(opts) != 1 {
		t.Errorf("tracing on: %d server options, want the stats handler", len(opts))
	}
}

// spansByName waits until the recorder holds every named span of trace id
// (root spans of other traces that link into it count too).
func spansByName(t *testing.T, rec *tracetest.SpanRecorder, id trace.TraceID, names ...string) map[string]sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := map[string]sdktrace.ReadOnlySpan{}
		for _, s := range rec.Ended() {
			in := s.SpanContext().TraceID() == id
			for _, l := range s.Links() {
				in = in || l.SpanContext.TraceID() == id
			}
			if in {
				got[s.Name()] = s
			}
		}
		missing := ""
		for _, n := range names {
			if got[n] == nil {
				missing = n
			}
		}
		if missing == "" {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s: no span %q; have %d spans", id, missing, len(got))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A Put that carries a caller's traceparent is one trace under the caller's
// span: otelgrpc's server span, then kvd's stage spans; the backend commit
// of its write links to its proposal.
func TestServerSpanJoinsCallerTrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	c := testConfig(t, "bolt", t.TempDir())
	m := startMember(t, c, fx.Decorate(func(*memberTracing) *memberTracing { return &memberTracing{tp: tp, enabled: true} }))
	put(t, m, "warm", "up") // the first put may race the election

	traceID, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	parentID, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	if _, err := m.kv.Put(ctx, &pb.PutRequest{Key: []byte("foo"), Value: []byte("bar")}); err != nil {
		t.Fatal(err)
	}
	spans := spansByName(t, rec, traceID, "etcdserverpb.KV/Put", "kv.Put", "raft.propose", "raftlog.fsync", "raft.commit", "apply", "backend.commit")

	srv := spans["etcdserverpb.KV/Put"]
	if srv.Parent().SpanID() != parentID || !srv.Parent().IsRemote() || srv.SpanKind() != trace.SpanKindServer {
		t.Errorf("server span parent %v remote %v kind %v, want the caller's %v", srv.Parent().SpanID(), srv.Parent().IsRemote(), srv.SpanKind(), parentID)
	}
	attrs := map[attribute.Key]string{}
	for _, kv := range srv.Attributes() {
		attrs[kv.Key] = kv.Value.Emit()
	}
	for k, v := range map[attribute.Key]string{"rpc.system": "grpc", "rpc.system.name": "grpc", "rpc.service": "etcdserverpb.KV", "rpc.method": "etcdserverpb.KV/Put"} {
		if attrs[k] != v {
			t.Errorf("server span %s = %q, want %q (all: %v)", k, attrs[k], v, attrs)
		}
	}
	for child, parent := range map[string]string{
		"kv.Put":        "etcdserverpb.KV/Put",
		"raft.propose":  "kv.Put",
		"raft.commit":   "kv.Put",
		"raftlog.fsync": "raft.propose",
		"apply":         "raft.commit",
	} {
		if got, want := spans[child].Parent().SpanID(), spans[parent].SpanContext().SpanID(); got != want {
			t.Errorf("%s's parent is %v, want %s (%v)", child, got, parent, want)
		}
	}
	commit := spans["backend.commit"]
	if commit.Parent().IsValid() || commit.SpanContext().TraceID() == traceID {
		t.Errorf("backend.commit is in trace %v under %v, want a root of its own", commit.SpanContext().TraceID(), commit.Parent().SpanID())
	}
	linked := false
	for _, l := range commit.Links() {
		linked = linked || l.SpanContext.SpanID() == spans["raft.propose"].SpanContext().SpanID()
	}
	if !linked {
		t.Errorf("backend.commit links %v, not the proposal %v", commit.Links(), spans["raft.propose"].SpanContext())
	}

	// A malformed traceparent is ignored: the put succeeds in a new trace.
	ctx = metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-zz-not-a-trace-01")
	if _, err := m.kv.Put(ctx, &pb.PutRequest{Key: []byte("foo"), Value: []byte("baz")}); err != nil {
		t.Fatalf("put with a malformed traceparent: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		var roots int
		for _, s := range rec.Ended() {
			if s.Name() == "etcdserverpb.KV/Put" && !s.Parent().IsValid() {
				roots++
			}
		}
		if roots >= 2 { // warm up and this one
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no root server span for the put with a malformed traceparent")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
