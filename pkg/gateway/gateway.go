// Package gateway serves etcd's JSON gateway (grpc-gateway) under /v3/ on
// the client port, as etcd's embed/serve.go registerGateway does: a gRPC
// client connection to the member's own client listener (over TLS for an
// https one) and the stubs that ship with go.etcd.io/etcd/api/v3
// (etcdserverpb/gw). Requests go through
// the gRPC server, so its size limit, auth and interceptors apply as for
// any gRPC client. Streams (/v3/watch, /v3/lease/keepalive) are also served
// over websockets, as etcd wraps the gateway in tmc/grpc-websocket-proxy.
package gateway

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"strings"

	gw "github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/tmc/grpc-websocket-proxy/wsproxy"
	etcdservergw "go.etcd.io/etcd/api/v3/etcdserverpb/gw"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	v3electiongw "github.com/kvd-dev/kvd/pkg/lockelection/v3electionpb/gw"
	v3lockgw "github.com/kvd-dev/kvd/pkg/lockelection/v3lockpb/gw"
)

// Gateway is the /v3/ handler and the connection it forwards on.
type Gateway struct {
	http.Handler
	conn *grpc.ClientConn
}

// New returns the gateway forwarding to the gRPC server at addr (a
// listener's address; an unspecified host is dialed on loopback) with creds:
// nil for a plaintext listener, the member's loopback TLS credentials for an
// https one. The connection is made lazily, so the listener need not serve
// yet.
func New(ctx context.Context, addr net.Addr, creds credentials.TransportCredentials, lg *zap.Logger) (*Gateway, error) {
	target := DialTarget(addr)
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	conn, err := grpc.NewClient(target,
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32)),
		grpc.WithTransportCredentials(creds),
	)
	if err != nil {
		return nil, fmt.Errorf("grpc gateway: dial %s: %w", target, err)
	}
	// etcd's marshaler options (embed/serve.go registerGateway).
	mux := gw.NewServeMux(
		gw.WithIncomingHeaderMatcher(headerMatcher),
		gw.WithMarshalerOption(gw.MIMEWildcard,
			&gw.HTTPBodyMarshaler{
				Marshaler: &gw.JSONPb{
					MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: false},
					UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: true},
				},
			},
		),
	)
	for _, register := range []func(context.Context, *gw.ServeMux, *grpc.ClientConn) error{
		etcdservergw.RegisterKVHandler,
		etcdservergw.RegisterWatchHandler,
		etcdservergw.RegisterLeaseHandler,
		etcdservergw.RegisterClusterHandler,
		etcdservergw.RegisterMaintenanceHandler,
		etcdservergw.RegisterAuthHandler,
		v3lockgw.RegisterLockHandler,
		v3electiongw.RegisterElectionHandler,
	} {
		if err := register(ctx, mux, conn); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("grpc gateway: %w", err)
		}
	}
	h := wsproxy.WebsocketProxy(mux,
		// Streams are POSTs (etcd's request mutator).
		wsproxy.WithRequestMutator(func(_ *http.Request, out *http.Request) *http.Request {
			out.Method = http.MethodPost
			return out
		}),
		wsproxy.WithMaxRespBodyBufferSize(0x7fffffff),
		wsproxy.WithLogger(wsLogger{lg}),
	)
	return &Gateway{Handler: h, conn: conn}, nil
}

// Close closes the gateway's connection to the gRPC server.
func (g *Gateway) Close() error { return g.conn.Close() }

// headerMatcher forwards the caller's W3C trace context (traceparent,
// tracestate) as gRPC metadata, where the member's gRPC server picks it up
// like any gRPC caller's: a gateway request joins the caller's trace, its
// server span a child of the caller's span. The rest is grpc-gateway's
// default (permanent request headers as grpcgateway-*, Grpc-Metadata-*).
func headerMatcher(key string) (string, bool) {
	switch k := strings.ToLower(key); k {
	case "traceparent", "tracestate":
		return k, true
	}
	return gw.DefaultHeaderMatcher(key)
}

// DialTarget is the host:port to dial the listener at addr on: a loopback
// address for an unspecified host. The member's own loopback clients (the
// gateway, Lock and Election) dial with it.
func DialTarget(addr net.Addr) string {
	ta, ok := addr.(*net.TCPAddr)
	if !ok {
		return addr.String()
	}
	ip := ta.IP
	if ip == nil || ip.IsUnspecified() {
		if ip.To4() != nil || ip == nil {
			ip = net.IPv4(127, 0, 0, 1)
		} else {
			ip = net.IPv6loopback
		}
	}
	return net.JoinHostPort(ip.String(), fmt.Sprint(ta.Port))
}

type wsLogger struct{ lg *zap.Logger }

func (w wsLogger) Warnln(i ...any)  { w.lg.Warn(fmt.Sprint(i...)) }
func (w wsLogger) Debugln(i ...any) { w.lg.Debug(fmt.Sprint(i...)) }
