package e2e

import (
	"bytes"
	"context"
	"encoding/hex"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// otlpReceiver is an OTLP/gRPC trace collector in the test: it keeps every
// span exported to it.
type otlpReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (r *otlpReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			r.spans = append(r.spans, ss.GetSpans()...)
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func startOTLPReceiver(t *testing.T) (string, *otlpReceiver) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpReceiver{}
	s := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(s, r)
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Stop)
	return "http://" + ln.Addr().String(), r
}

// traceSpans is one trace's spans by name (the last of each name), and the
// spans of other traces that link into it.
type traceSpans struct {
	byName map[string]*tracepb.Span
	linked map[string]*tracepb.Span
}

// waitTrace waits until the receiver holds every named span of trace id
// (a name in linkers: a span of another trace linking into it).
func (r *otlpReceiver) waitTrace(t *testing.T, id []byte, names, linkers []string) traceSpans {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ts := traceSpans{byName: map[string]*tracepb.Span{}, linked: map[string]*tracepb.Span{}}
		r.mu.Lock()
		for _, s := range r.spans {
			if bytes.Equal(s.GetTraceId(), id) {
				ts.byName[s.GetName()] = s
			}
			for _, l := range s.GetLinks() {
				if bytes.Equal(l.GetTraceId(), id) {
					ts.linked[s.GetName()] = s
				}
			}
		}
		r.mu.Unlock()
		missing := ""
		for _, n := range names {
			if ts.byName[n] == nil {
				missing = n
			}
		}
		for _, n := range linkers {
			if ts.linked[n] == nil {
				missing = n + " (linking)"
			}
		}
		if missing == "" {
			return ts
		}
		if time.Now().After(deadline) {
			var got []string
			for n := range ts.byName {
				got = append(got, n)
			}
			t.Fatalf("trace %x: no span %s; have %v", id, missing, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func attrs(s *tracepb.Span) map[string]string {
	m := map[string]string{}
	for _, kv := range s.GetAttributes() {
		m[kv.GetKey()] = kv.GetValue().GetStringValue()
	}
	return m
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTracingJoinsCallerTrace runs kvd exporting to an OTLP receiver in the
// test and sends puts that carry a caller's W3C trace context, through gRPC
// (clientv3) and the JSON gateway: kvd's server span continues the caller's
// trace under the caller's span, kvd's stage spans are under it, and the
// backend commit span links to the proposal. A malformed traceparent is
// ignored.
func TestTracingJoinsCallerTrace(t *testing.T) {
	if harness.Kind() == harness.KindEtcd {
		t.Skip("kvd's spans")
	}
	endpoint, rcv := startOTLPReceiver(t)
	p := harness.StartKVD(t, harness.Options{Engine: "bolt", Env: []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + endpoint,
		"OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
		"OTEL_BSP_SCHEDULE_DELAY=50", // ms: the test waits for the export
	}})
	cli := p.Client(t)
	ctx := testCtx(t)

	const (
		grpcTrace, grpcParent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
		gwTrace, gwParent     = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	)
	pctx := metadata.AppendToOutgoingContext(ctx, "traceparent", "00-"+grpcTrace+"-"+grpcParent+"-01")
	if _, err := cli.Put(pctx, "traced", "grpc"); err != nil {
		t.Fatalf("put with traceparent: %v", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.Endpoint()+"/v3/kv/put", strings.NewReader(`{"key":"dHJhY2Vk","value":"Z3c="}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("traceparent", "00-"+gwTrace+"-"+gwParent+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("gateway put with traceparent: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("gateway put with traceparent: %s", resp.Status)
	}
	mctx := metadata.AppendToOutgoingContext(ctx, "traceparent", "00-not-a-trace-context-01")
	if _, err := cli.Put(mctx, "traced", "malformed"); err != nil {
		t.Fatalf("put with a malformed traceparent: %v", err)
	}

	const server = "etcdserverpb.KV/Put"
	stages := []string{server, "kv.Put", "raft.propose", "raftlog.fsync", "raft.commit", "apply"}
	ts := rcv.waitTrace(t, mustHex(t, grpcTrace), stages, []string{"backend.commit"})
	srv := ts.byName[server]
	if got := hex.EncodeToString(srv.GetParentSpanId()); got != grpcParent {
		t.Errorf("server span's parent %s, want the caller's %s", got, grpcParent)
	}
	if srv.GetKind() != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("server span kind %v", srv.GetKind())
	}
	a := attrs(srv)
	for k, v := range map[string]string{"rpc.system": "grpc", "rpc.system.name": "grpc", "rpc.service": "etcdserverpb.KV", "rpc.method": server} {
		if a[k] != v {
			t.Errorf("server span %s = %q, want %q (all: %v)", k, a[k], v, a)
		}
	}
	for child, parent := range map[string]string{
		"kv.Put":        server,
		"raft.propose":  "kv.Put",
		"raft.commit":   "kv.Put",
		"raftlog.fsync": "raft.propose",
		"apply":         "raft.commit",
	} {
		if !bytes.Equal(ts.byName[child].GetParentSpanId(), ts.byName[parent].GetSpanId()) {
			t.Errorf("%s's parent is %x, want %s's %x", child, ts.byName[child].GetParentSpanId(), parent, ts.byName[parent].GetSpanId())
		}
	}
	commit := ts.linked["backend.commit"]
	if len(commit.GetParentSpanId()) != 0 {
		t.Errorf("backend.commit has parent %x, want a root", commit.GetParentSpanId())
	}
	linked := false
	for _, l := range commit.GetLinks() {
		linked = linked || bytes.Equal(l.GetSpanId(), ts.byName["raft.propose"].GetSpanId())
	}
	if !linked {
		t.Errorf("backend.commit does not link the proposal's raft.propose span %x", ts.byName["raft.propose"].GetSpanId())
	}

	gw := rcv.waitTrace(t, mustHex(t, gwTrace), []string{server, "kv.Put", "apply"}, nil)
	if got := hex.EncodeToString(gw.byName[server].GetParentSpanId()); got != gwParent {
		t.Errorf("gateway put: server span's parent %s, want the HTTP caller's %s", got, gwParent)
	}

	// The put with the malformed traceparent is a root server span: kvd's
	// readiness probes and the harness do not put.
	deadline := time.Now().Add(10 * time.Second)
	for {
		roots := 0
		rcv.mu.Lock()
		for _, s := range rcv.spans {
			if s.GetName() == server && len(s.GetParentSpanId()) == 0 {
				roots++
			}
		}
		rcv.mu.Unlock()
		if roots == 1 {
			break
		}
		if roots > 1 || time.Now().After(deadline) {
			t.Fatalf("%d root %s spans, want 1 (the put with a malformed traceparent)", roots, server)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
