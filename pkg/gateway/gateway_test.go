package gateway

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

func TestDialTarget(t *testing.T) {
	for _, c := range []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 2379}, "10.0.0.1:2379"},
		{&net.TCPAddr{IP: net.IPv4zero, Port: 2379}, "127.0.0.1:2379"},
		{&net.TCPAddr{IP: net.IPv6unspecified, Port: 2379}, "[::1]:2379"},
		{&net.TCPAddr{Port: 2379}, "127.0.0.1:2379"},
	} {
		if got := DialTarget(c.addr); got != c.want {
			t.Errorf("DialTarget(%v) = %q, want %q", c.addr, got, c.want)
		}
	}
}

// Bad input is answered by grpc-gateway without reaching the gRPC server.
func TestBadInput(t *testing.T) {
	g, err := New(context.Background(), &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}, nil, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for _, c := range []struct {
		path, body string
		code       int
		msg        string
	}{
		{"/v3/kv/put", `{"key":`, http.StatusBadRequest, `"code":3`},
		{"/v3/kv/put", `{"key":"!!!"}`, http.StatusBadRequest, "invalid value for bytes field key"},
		{"/v3/kv/nope", `{}`, http.StatusNotFound, `"code":5`},
	} {
		w := httptest.NewRecorder()
		g.ServeHTTP(w, httptest.NewRequest(http.MethodPost, c.path, strings.NewReader(c.body)))
		if w.Code != c.code || !strings.Contains(strings.ReplaceAll(w.Body.String(), " ", ""), strings.ReplaceAll(c.msg, " ", "")) {
			t.Errorf("%s %s: %d %s, want %d with %s", c.path, c.body, w.Code, w.Body.String(), c.code, c.msg)
		}
	}
}

// metaKV is a KV server that keeps the metadata of the last Put.
type metaKV struct {
	pb.UnimplementedKVServer
	md chan metadata.MD
}

func (m *metaKV) Put(ctx context.Context, _ *pb.PutRequest) (*pb.PutResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	m.md <- md
	return &pb.PutResponse{Header: &pb.ResponseHeader{}}, nil
}

// The caller's traceparent and tracestate reach the gRPC server as
// metadata, so the call joins the caller's trace.
func TestForwardsTraceContext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	kv := &metaKV{md: make(chan metadata.MD, 1)}
	srv := grpc.NewServer()
	pb.RegisterKVServer(srv, kv)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	g, err := New(context.Background(), ln.Addr(), nil, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()

	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	r := httptest.NewRequest(http.MethodPost, "/v3/kv/put", strings.NewReader(`{"key":"YQ==","value":"Yg=="}`))
	r.Header.Set("Traceparent", tp)
	r.Header.Set("Tracestate", "vendor=x")
	r.Header.Set("X-Other", "y")
	w := httptest.NewRecorder()
	g.ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		t.Fatalf("put: %d %s", w.Code, w.Body)
	}
	md := <-kv.md
	if got := md.Get("traceparent"); len(got) != 1 || got[0] != tp {
		t.Errorf("traceparent metadata %q, want [%s]", got, tp)
	}
	if got := md.Get("tracestate"); len(got) != 1 || got[0] != "vendor=x" {
		t.Errorf("tracestate metadata %q, want [vendor=x]", got)
	}
	if got := md.Get("x-other"); len(got) != 0 {
		t.Errorf("x-other forwarded: %q", got)
	}
}
