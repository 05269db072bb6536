// Package lockelection serves etcd's v3lock (Lock, Unlock) and v3election
// (Campaign, Proclaim, Leader, Observe, Resign) gRPC services on the client
// port, as etcd's etcdserver/api/v3lock and v3election do: thin servers over
// client/v3/concurrency sessions on a client of the member itself.
//
// etcd's client is in-process (v3client) and runs every call with the
// caller's context, so the caller's token decides what it may do. kvd's is a
// clientv3 client on the member's own client listener (plaintext when there
// is one, else TLS with the member's loopback credentials); each call made
// for a caller carries the caller's token or authorization metadata, so the
// permissions applied are the caller's.
//
// The wire types in v3lockpb and v3electionpb (and their JSON gateway stubs
// in gw/) are etcd v3.7.3's generated code, copied unchanged from
// go.etcd.io/etcd/server/v3/etcdserver/api/{v3lock,v3election} (Apache
// License 2.0) with only the gw import paths rewritten: the product must not
// import etcd's server module. Their descriptors are byte for byte etcd's,
// so a binary must not link both copies (the proto registry refuses two
// registrations of v3lock.proto).
package lockelection

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"sync"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/kvd-dev/kvd/pkg/authz"
	"github.com/kvd-dev/kvd/pkg/gateway"
	"github.com/kvd-dev/kvd/pkg/lockelection/v3electionpb"
	"github.com/kvd-dev/kvd/pkg/lockelection/v3lockpb"
)

// ErrClosed answers calls after the member began to stop.
var ErrClosed = errors.New("lockelection: member stopping")

// Service owns the loopback client the two servers share. Use names the
// listener to dial before the member serves; the client is made on the first
// call and closed by Close, which ends its sessions' goroutines and the calls
// still waiting (a Lock queued behind another holder, an Observe).
type Service struct {
	lg *zap.Logger

	mu     sync.Mutex
	target string
	creds  credentials.TransportCredentials // nil: plaintext
	cli    *clientv3.Client
	closed bool
}

// New returns a service with no listener yet.
func New(lg *zap.Logger) *Service {
	if lg == nil {
		lg = zap.NewNop()
	}
	return &Service{lg: lg}
}

// Register adds the Lock and Election services to g.
func (s *Service) Register(g *grpc.Server) {
	v3lockpb.RegisterLockServer(g, &lockServer{s: s})
	v3electionpb.RegisterElectionServer(g, &electionServer{s: s})
}

// Use offers a client listener to dial: addr is its address (an unspecified
// host is dialed on loopback), creds nil for a plaintext listener or the
// member's loopback TLS credentials for an https one. The first plaintext
// listener wins; a TLS one is used only when there is no plaintext one.
// Calls made before the client exists pick the listener in force then.
func (s *Service) Use(addr net.Addr, creds credentials.TransportCredentials) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cli != nil || (s.target != "" && (s.creds == nil || creds != nil)) {
		return
	}
	s.target, s.creds = gateway.DialTarget(addr), creds
}

// Close closes the loopback client; later calls fail with ErrClosed.
func (s *Service) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.cli == nil {
		return nil
	}
	err := s.cli.Close()
	s.cli = nil
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

func (s *Service) client() (*clientv3.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if s.cli != nil {
		return s.cli, nil
	}
	if s.target == "" {
		return nil, errors.New("lockelection: no client listener")
	}
	opts := []grpc.DialOption{}
	if s.creds != nil {
		// Appended after clientv3's own (insecure) credentials: the last wins.
		opts = append(opts, grpc.WithTransportCredentials(s.creds))
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: []string{s.target},
		// etcd's in-process client has no size limit of its own; the
		// member's gRPC server applies max-request-bytes.
		MaxCallSendMsgSize: math.MaxInt32,
		MaxCallRecvMsgSize: math.MaxInt32,
		DialOptions:        opts,
		// The caller gets each failed call's error; the client's own
		// warnings about them ("retrying of unary invoker failed") would
		// log every refused Lock, which etcd's in-process client does not.
		Logger: s.lg.Named("client").WithOptions(zap.IncreaseLevel(zap.ErrorLevel)),
	})
	if err != nil {
		return nil, fmt.Errorf("lockelection: client for %s: %w", s.target, err)
	}
	s.cli = cli
	return cli, nil
}

// asCaller is the context of a call made for the caller of ctx (an incoming
// gRPC context): its deadline and cancellation, and its token as outgoing
// metadata, as etcd's in-process client runs with the caller's context.
// Watch streams are shared per outgoing metadata (clientv3's streamKey), so
// callers with different tokens never share one.
func asCaller(ctx context.Context) context.Context {
	// Marked as relayed: over TLS the connection's certificate is the
	// member's, which must never stand in for the caller's.
	md := metadata.MD{authz.RelayedMetadataKey: []string{"1"}}
	for _, k := range []string{rpctypes.TokenFieldNameGRPC, rpctypes.TokenFieldNameSwagger} {
		if v := metadata.ValueFromIncomingContext(ctx, k); len(v) > 0 {
			md[k] = v
		}
	}
	return metadata.NewOutgoingContext(ctx, md)
}
