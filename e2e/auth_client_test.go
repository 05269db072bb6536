package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// The differential auth test talks to each server over plain gRPC
// connections of its own, never through clientv3: clientv3 installs a
// retrying interceptor on its connection that silently re-sends a request
// that failed with "invalid auth token" or "revision of auth store is old",
// so the two servers would not see one known sequence of requests.

// authStubs are the raw stubs of one connection to one server.
type authStubs struct {
	kv      pb.KVClient
	auth    pb.AuthClient
	watch   pb.WatchClient
	lease   pb.LeaseClient
	maint   pb.MaintenanceClient
	cluster pb.ClusterClient
	// memberID is the server's member ID, for requests that name it.
	memberID uint64
}

// dialAuthStubs opens a connection of its own to p, closed in t.Cleanup.
func dialAuthStubs(t *testing.T, p *harness.Process) authStubs {
	t.Helper()
	target, ok := strings.CutPrefix(p.Endpoint(), "http://")
	if !ok {
		t.Fatalf("%s: endpoint %s: the auth tests dial plain http endpoints only", p.Label(), p.Endpoint())
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("%s: dial %s: %v", p.Label(), target, err)
	}
	t.Cleanup(func() { conn.Close() })
	return authStubs{
		kv:      pb.NewKVClient(conn),
		auth:    pb.NewAuthClient(conn),
		watch:   pb.NewWatchClient(conn),
		lease:   pb.NewLeaseClient(conn),
		maint:   pb.NewMaintenanceClient(conn),
		cluster: pb.NewClusterClient(conn),
	}
}

// tokenCtx carries token the way clientv3 sends it: gRPC metadata "token".
// An empty token sends none.
func tokenCtx(ctx context.Context, token string) context.Context {
	return tokenCtxKey(ctx, rpctypes.TokenFieldNameGRPC, token)
}

// tokenCtxKey carries token in metadata key key ("token", or
// "authorization" as grpc-gateway clients send it). An empty token sends
// none.
func tokenCtxKey(ctx context.Context, key, token string) context.Context {
	if token == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, key, token)
}

// waitForReady makes a call wait for the connection (re-established after a
// restart) instead of failing fast while it reconnects.
var waitForReady = grpc.WaitForReady(true)

// maskToken returns m, or a copy of it with the token of an
// AuthenticateResponse replaced: tokens are random, their presence is not.
func maskToken(m proto.Message) proto.Message {
	r, ok := m.(*pb.AuthenticateResponse)
	if !ok || r == nil || r.Token == "" {
		return m
	}
	c := proto.Clone(r).(*pb.AuthenticateResponse)
	c.Token = "<token>"
	return c
}

// needsReauth reports whether err is one after which clientv3 fetches a new
// token and retries: an unknown or dropped token, or a token older than the
// auth store.
func needsReauth(err error) bool {
	if err == nil {
		return false
	}
	code, msg := errCodeMsg(err)
	for _, e := range []error{rpctypes.ErrGRPCInvalidAuthToken, rpctypes.ErrGRPCAuthOldRevision} {
		var ee rpctypes.EtcdError
		if errors.As(rpctypes.Error(e), &ee) && code == ee.Code() && msg == ee.Error() {
			return true
		}
	}
	return false
}

// noAnswer reports whether err says the server did not answer at all.
func noAnswer(err error) bool {
	if err == nil {
		return false
	}
	code, _ := errCodeMsg(err)
	return code == codes.DeadlineExceeded || code == codes.Canceled || code == codes.Unavailable
}

// waitAuthReady waits until p, just started, answers AuthStatus through
// raft. AuthStatus needs no token even with auth enabled, which the
// harness's own readiness probe (Status and Get without credentials) does;
// a server without the Auth service counts as ready once it says so.
func waitAuthReady(t *testing.T, p *harness.Process, s authStubs) {
	t.Helper()
	deadline := time.Now().Add(harness.StartTimeout)
	var last error
	for time.Now().Before(deadline) {
		if exited, how := p.Exited(); exited {
			t.Fatalf("%s exited before becoming ready: %v", p.Label(), how)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := s.auth.AuthStatus(ctx, &pb.AuthStatusRequest{}, waitForReady)
		cancel()
		if err == nil || !noAnswer(err) {
			return
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s not ready after %v: %v", p.Label(), harness.StartTimeout, last)
}

// fmtAuthResult prints a result for a failure message.
func fmtAuthResult(m proto.Message, err error) string {
	if err != nil {
		return fmtResult(nil, err)
	}
	return fmt.Sprint(maskToken(m))
}
