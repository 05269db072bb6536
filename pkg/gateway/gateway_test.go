package gateway

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/zap"
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
		if got := dialTarget(c.addr); got != c.want {
			t.Errorf("dialTarget(%v) = %q, want %q", c.addr, got, c.want)
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
