package tracing

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-dev/kvd/pkg/config"
)

// clearEnv unsets, for the test, every variable Setup or the SDK reads.
func clearEnv(t *testing.T) {
	for _, k := range []string{
		"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER",
		"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
		"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
		"OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
		"OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
		"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
	} {
		t.Setenv(k, "")
	}
}

// httpReceiver is an in-test OTLP/HTTP collector.
func httpReceiver(t *testing.T) (*httptest.Server, <-chan *collectortrace.ExportTraceServiceRequest) {
	got := make(chan *collectortrace.ExportTraceServiceRequest, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		req := &collectortrace.ExportTraceServiceRequest{}
		if err := proto.Unmarshal(body, req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		got <- req
		resp, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(resp)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

type grpcReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	got chan *collectortrace.ExportTraceServiceRequest
}

func (g *grpcReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	g.got <- req
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func startGRPCReceiver(t *testing.T) (string, <-chan *collectortrace.ExportTraceServiceRequest) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &grpcReceiver{got: make(chan *collectortrace.ExportTraceServiceRequest, 16)}
	s := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(s, r)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String(), r.got
}

// emit starts and ends one span, then shuts the provider down, which flushes
// the batcher: after it returns the receiver has the span.
func emit(t *testing.T, tp trace.TracerProvider, shutdown func(context.Context) error, name string) {
	t.Helper()
	_, span := tp.Tracer("kvd/test").Start(context.Background(), name)
	if !span.SpanContext().IsSampled() {
		t.Fatalf("span %q not sampled", name)
	}
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

// received returns service.name and span names of one export request.
func received(t *testing.T, got <-chan *collectortrace.ExportTraceServiceRequest) (service string, spans []string) {
	t.Helper()
	var req *collectortrace.ExportTraceServiceRequest
	select {
	case req = <-got:
	default:
		t.Fatal("receiver got no export")
	}
	for _, rs := range req.GetResourceSpans() {
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				spans = append(spans, s.GetName())
			}
		}
	}
	return service, spans
}

func TestNoopByDefault(t *testing.T) {
	clearEnv(t)
	otel.SetTextMapPropagator(nil)
	tp, shutdown, err := Setup(context.Background(), config.Default().Tracing, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tp.(noop.TracerProvider); !ok {
		t.Fatalf("provider is %T, want noop", tp)
	}
	_, span := tp.Tracer("x").Start(context.Background(), "s")
	if span.IsRecording() || span.SpanContext().IsValid() {
		t.Error("noop provider recorded a span")
	}
	if err := shutdown(context.Background()); err != nil {
		t.Error(err)
	}
	if f := otel.GetTextMapPropagator().Fields(); !slices.Contains(f, "traceparent") {
		t.Errorf("global propagator fields %v lack traceparent", f)
	}
}

func TestDisabledByEnv(t *testing.T) {
	for _, kv := range [][2]string{{"OTEL_SDK_DISABLED", "true"}, {"OTEL_TRACES_EXPORTER", "none"}} {
		clearEnv(t)
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
		t.Setenv(kv[0], kv[1])
		c := config.Default().Tracing
		c.Enabled = true
		tp, _, err := Setup(context.Background(), c, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := tp.(noop.TracerProvider); !ok {
			t.Errorf("%s=%s: provider is %T, want noop", kv[0], kv[1], tp)
		}
	}
}

func TestEnvEndpointHTTP(t *testing.T) {
	for _, tc := range []struct {
		name, envService, wantService string
	}{
		{"default service name", "", "kvd"},
		{"OTEL_SERVICE_NAME wins", "from-env", "from-env"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearEnv(t)
			srv, got := httpReceiver(t)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
			t.Setenv("OTEL_SERVICE_NAME", tc.envService)
			// tracing.enabled is false: the variable alone turns export on.
			tp, shutdown, err := Setup(context.Background(), config.Default().Tracing, zaptest.NewLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := tp.(noop.TracerProvider); ok {
				t.Fatal("got noop provider with OTEL_EXPORTER_OTLP_ENDPOINT set")
			}
			emit(t, tp, shutdown, "kv.put")
			svc, spans := received(t, got)
			if svc != tc.wantService || !slices.Equal(spans, []string{"kv.put"}) {
				t.Errorf("got service %q spans %v, want %q [kv.put]", svc, spans, tc.wantService)
			}
		})
	}
}

func TestConfigEndpointHTTP(t *testing.T) {
	clearEnv(t)
	srv, got := httpReceiver(t)
	c := config.Default().Tracing
	c.Enabled, c.Endpoint, c.Protocol = true, srv.URL, config.ProtocolHTTPProtobuf
	tp, shutdown, err := Setup(context.Background(), c, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	emit(t, tp, shutdown, "range")
	if svc, spans := received(t, got); svc != "kvd" || !slices.Equal(spans, []string{"range"}) {
		t.Errorf("got service %q spans %v", svc, spans)
	}
}

func TestConfigEndpointGRPC(t *testing.T) {
	clearEnv(t)
	addr, got := startGRPCReceiver(t)
	c := config.Default().Tracing
	c.Enabled, c.Endpoint, c.ServiceName = true, "http://"+addr, "kvd-node1"
	tp, shutdown, err := Setup(context.Background(), c, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	emit(t, tp, shutdown, "txn")
	if svc, spans := received(t, got); svc != "kvd-node1" || !slices.Equal(spans, []string{"txn"}) {
		t.Errorf("got service %q spans %v", svc, spans)
	}
}

// The environment's endpoint and protocol win over the config's.
func TestEnvOverridesConfig(t *testing.T) {
	clearEnv(t)
	srv, got := httpReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", srv.URL+"/v1/traces")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
	c := config.Default().Tracing
	c.Enabled, c.Endpoint, c.Protocol = true, "http://127.0.0.1:1", config.ProtocolGRPC
	tp, shutdown, err := Setup(context.Background(), c, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	emit(t, tp, shutdown, "watch")
	if _, spans := received(t, got); !slices.Equal(spans, []string{"watch"}) {
		t.Errorf("spans %v", spans)
	}
}

func TestSampling(t *testing.T) {
	clearEnv(t)
	c := config.Default().Tracing
	c.Enabled, c.Endpoint, c.SamplingRatio = true, "http://127.0.0.1:1", 0
	tp, shutdown, err := Setup(context.Background(), c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = shutdown(context.Background()) }()
	_, root := tp.Tracer("x").Start(context.Background(), "root")
	if root.SpanContext().IsSampled() {
		t.Error("ratio 0 sampled a root span")
	}
	// A sampled remote parent is followed whatever the ratio.
	parent := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled, Remote: true,
	})
	_, child := tp.Tracer("x").Start(trace.ContextWithRemoteSpanContext(context.Background(), parent), "child")
	if !child.SpanContext().IsSampled() {
		t.Error("child of a sampled parent not sampled")
	}

	// OTEL_TRACES_SAMPLER replaces the config's ratio.
	t.Setenv("OTEL_TRACES_SAMPLER", "always_on")
	tp2, shutdown2, err := Setup(context.Background(), c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = shutdown2(context.Background()) }()
	if _, s := tp2.Tracer("x").Start(context.Background(), "root"); !s.SpanContext().IsSampled() {
		t.Error("OTEL_TRACES_SAMPLER=always_on ignored")
	}
}

func TestBadProtocol(t *testing.T) {
	clearEnv(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "thrift")
	if _, _, err := Setup(context.Background(), config.Default().Tracing, nil); err == nil {
		t.Fatal("Setup accepted protocol thrift")
	}
}

func TestEnabled(t *testing.T) {
	clearEnv(t)
	tp, shutdown, err := Setup(context.Background(), config.Default().Tracing, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = shutdown(context.Background()) }()
	if Enabled(tp) || Enabled(nil) {
		t.Error("Enabled true for the noop provider")
	}
	c := config.Default().Tracing
	c.Enabled, c.Endpoint = true, "http://127.0.0.1:1"
	tp, shutdown2, err := Setup(context.Background(), c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = shutdown2(context.Background()) }()
	if !Enabled(tp) {
		t.Error("Enabled false for an exporting provider")
	}
}

// A new root that links to a sampled span is sampled whatever the ratio
// (the backend commit span and its proposals); others follow the ratio.
func TestLinkedRootSampled(t *testing.T) {
	clearEnv(t)
	c := config.Default().Tracing
	c.Enabled, c.Endpoint, c.SamplingRatio = true, "http://127.0.0.1:1", 0
	tp, shutdown, err := Setup(context.Background(), c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = shutdown(context.Background()) }()
	sampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled})
	unsampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{2}, SpanID: trace.SpanID{2}})
	for _, tc := range []struct {
		links []trace.Link
		want  bool
	}{
		{nil, false},
		{[]trace.Link{{SpanContext: unsampled}}, false},
		{[]trace.Link{{SpanContext: unsampled}, {SpanContext: sampled}}, true},
	} {
		_, s := tp.Tracer("x").Start(context.Background(), "backend.commit", trace.WithNewRoot(), trace.WithLinks(tc.links...))
		if got := s.SpanContext().IsSampled(); got != tc.want {
			t.Errorf("links %v: sampled %v, want %v", tc.links, got, tc.want)
		}
		// Not ended: nothing to export to the closed port at shutdown.
	}
	// An unsampled parent still decides for its children, links or not.
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), unsampled)
	if _, s := tp.Tracer("x").Start(ctx, "child", trace.WithLinks(trace.Link{SpanContext: sampled})); s.SpanContext().IsSampled() {
		t.Error("child of an unsampled parent sampled through a link")
	}
}
