package server

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"strings"

	"go.uber.org/zap"
	"google.golang.org/grpc/credentials"

	"github.com/kvd-dev/kvd/pkg/gateway"
	"github.com/kvd-dev/kvd/pkg/lockelection"
	"github.com/kvd-dev/kvd/pkg/tlsconf"
)

// clientGateways are the JSON gateways of the client listeners, as etcd
// registers one per listener: one dials the first plaintext listener, one
// the first https listener over TLS with the member's own certificate
// (tlsconf.LoopbackCredentials). A request is forwarded on the connection of
// its own kind, so an https caller's request never leaves TLS and
// client-cert-auth applies to the gateway's connection as to any client.
//
// le, the Lock and Election services, dials one of the same listeners
// (lockelection.Service.Use prefers a plaintext one).
type clientGateways struct {
	plain, tls *gateway.Gateway
	le         *lockelection.Service
}

// add makes the gateway for ln's kind if there is none yet. It runs before
// the listeners serve, so handler reads the fields without a lock.
func (g *clientGateways) add(ln net.Listener, info *tlsconf.Info, lg *zap.Logger) error {
	var creds credentials.TransportCredentials // nil: plaintext
	if info != nil {
		creds = info.LoopbackCredentials()
	}
	g.le.Use(ln.Addr(), creds)
	var err error
	switch {
	case info != nil && g.tls == nil:
		g.tls, err = gateway.New(context.Background(), ln.Addr(), creds, lg.Named("gateway"))
	case info == nil && g.plain == nil:
		g.plain, err = gateway.New(context.Background(), ln.Addr(), nil, lg.Named("gateway"))
	}
	return err
}

// handler serves /v3/ from the gateway of one kind and everything else from
// base, behind the checks of etcd's accessController (embed/serve.go):
//
//   - /v3beta/ is served as /v3/ (etcd keeps the old prefix working);
//   - every answer allows any origin (etcd's default --cors "*"), and an
//     OPTIONS request is answered 200 at once;
//   - with client-cert-auth and auth enabled, a gateway request over TLS
//     whose certificate has a CommonName is refused (400): the gateway
//     forwards on its own connection, so the caller's CN could not be the
//     user, and etcd says so rather than run it as someone else.
func (g *clientGateways) handler(base http.Handler, overTLS, clientCertAuth bool, authOn func() bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v3beta/") {
			r.URL.Path = "/v3/" + strings.TrimPrefix(r.URL.Path, "/v3beta/")
			r.URL.RawPath = ""
		}
		if r.TLS == nil && overTLS {
			r.TLS = tlsStateOf(r.Context())
		}
		isGateway := strings.HasPrefix(r.URL.Path, "/v3/")
		if isGateway && r.TLS != nil && clientCertAuth && authOn() && hasCommonName(r.TLS) {
			http.Error(w, "CommonName of client sending a request against gateway will be ignored and not used as expected", http.StatusBadRequest)
			return
		}
		h := w.Header()
		h.Add("Access-Control-Allow-Methods", "POST, GET, OPTIONS, PUT, DELETE")
		h.Add("Access-Control-Allow-Origin", "*")
		h.Add("Access-Control-Allow-Headers", "accept, content-type, authorization")
		if r.Method == http.MethodOptions {
			w.WriteHeader(http.StatusOK)
			return
		}
		gw := g.plain
		if overTLS {
			gw = g.tls
		}
		if gw != nil && isGateway {
			gw.ServeHTTP(w, r)
			return
		}
		base.ServeHTTP(w, r)
	})
}

func hasCommonName(st *tls.ConnectionState) bool {
	for _, chain := range st.VerifiedChains {
		if len(chain) > 0 && chain[0].Subject.CommonName != "" {
			return true
		}
	}
	return false
}

// tlsStateKey carries a connection's TLS state into its requests: the TLS
// split hands net/http an h2 connection as a plain stream (tlssplit.go), so
// net/http cannot fill Request.TLS itself.
type tlsStateKey struct{}

// withTLSState is the http.Server.ConnContext of the TLS listeners.
func withTLSState(ctx context.Context, c net.Conn) context.Context {
	for {
		switch x := c.(type) {
		case *tls.Conn:
			st := x.ConnectionState()
			return context.WithValue(ctx, tlsStateKey{}, &st)
		case *sniffedConn:
			c = x.Conn
		case *prefixConn:
			c = x.Conn
		default:
			return ctx
		}
	}
}

func tlsStateOf(ctx context.Context) *tls.ConnectionState {
	st, _ := ctx.Value(tlsStateKey{}).(*tls.ConnectionState)
	return st
}

func (g *clientGateways) Close() {
	_ = g.le.Close()
	for _, gw := range []*gateway.Gateway{g.plain, g.tls} {
		if gw != nil {
			_ = gw.Close()
		}
	}
}
