package rpcmetrics

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// serve runs the gRPC health service (unary Check, server-streaming
// Watch) behind m's interceptors, with m initialized from it.
func serve(t *testing.T, m *Metrics) healthpb.HealthClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpc.ChainUnaryInterceptor(m.Unary), grpc.ChainStreamInterceptor(m.Stream))
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(g, hs)
	m.Initialize(g)
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return healthpb.NewHealthClient(cc)
}

const healthSvc = "grpc.health.v1.Health"

// value is one child's value, waiting up to a few seconds for it to reach
// want (a stream's end is counted after the client has seen it).
func value(t *testing.T, c prometheus.Collector, want float64) float64 {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := testutil.ToFloat64(c)
		if got == want || time.Now().After(deadline) {
			return got
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The counts are go-grpc-middleware's: a unary call is started, received,
// sent (even when it fails) and handled with its code; a stream counts
// each message and ends with the handler's code.
func TestCountsCalls(t *testing.T) {
	m := New(true)
	hc := serve(t, m)
	ctx := context.Background()
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("check of an unknown service: %v", err)
	}
	sctx, cancel := context.WithCancel(ctx)
	w, err := hc.Watch(sctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()

	for _, tc := range []struct {
		name string
		c    prometheus.Collector
		want float64
	}{
		{"started Check", m.started.WithLabelValues("unary", healthSvc, "Check"), 2},
		{"received Check", m.received.WithLabelValues("unary", healthSvc, "Check"), 2},
		{"sent Check", m.sent.WithLabelValues("unary", healthSvc, "Check"), 2},
		{"handled Check OK", m.handled.WithLabelValues("unary", healthSvc, "Check", "OK"), 1},
		{"handled Check NotFound", m.handled.WithLabelValues("unary", healthSvc, "Check", "NotFound"), 1},
		{"started Watch", m.started.WithLabelValues("server_stream", healthSvc, "Watch"), 1},
		{"received Watch", m.received.WithLabelValues("server_stream", healthSvc, "Watch"), 1},
		{"sent Watch", m.sent.WithLabelValues("server_stream", healthSvc, "Watch"), 1},
		{"handled Watch Canceled", m.handled.WithLabelValues("server_stream", healthSvc, "Watch", "Canceled"), 1},
		{"handled Watch OK", m.handled.WithLabelValues("server_stream", healthSvc, "Watch", "OK"), 0},
	} {
		if got := value(t, tc.c, tc.want); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if n := testutil.CollectAndCount(m, "grpc_server_handling_seconds"); n != 3 {
		t.Errorf("%d handling time series, want one per method (3)", n)
	}
}

// Initialize makes every method's series, each code of handled included,
// before any call; the families carry the middleware's names and help.
func TestInitializeCreatesEverySeries(t *testing.T) {
	m := New(false)
	serve(t, m)
	// Check, Watch and List, and no histogram without handling time.
	for name, want := range map[string]int{
		"grpc_server_started_total": 3, "grpc_server_msg_received_total": 3, "grpc_server_msg_sent_total": 3,
		"grpc_server_handled_total": 3 * numCodes, "grpc_server_handling_seconds": 0,
	} {
		if n := testutil.CollectAndCount(m, name); n != want {
			t.Errorf("%s: %d series, want %d", name, n, want)
		}
	}
	want := `
# HELP grpc_server_started_total Total number of RPCs started on the server.
# TYPE grpc_server_started_total counter
grpc_server_started_total{grpc_method="Check",grpc_service="grpc.health.v1.Health",grpc_type="unary"} 0
grpc_server_started_total{grpc_method="List",grpc_service="grpc.health.v1.Health",grpc_type="unary"} 0
grpc_server_started_total{grpc_method="Watch",grpc_service="grpc.health.v1.Health",grpc_type="server_stream"} 0
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), "grpc_server_started_total"); err != nil {
		t.Error(err)
	}
}
