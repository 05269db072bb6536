package e2e

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// member is one started server under test with a client to it.
type member struct {
	proc *harness.Process
	cli  *clientv3.Client
	kv   pb.KVClient // raw stub, for requests clientv3 cannot express
}

// startMember starts a fresh server under test on engine.
func startMember(t *testing.T, engine string) *member {
	t.Helper()
	p := harness.StartKVD(t, harness.Options{Engine: engine})
	c := p.Client(t)
	return &member{proc: p, cli: c, kv: pb.NewKVClient(c.ActiveConnection())}
}

// forEachEngine runs fn as one subtest per storage engine, each with a fresh
// server under test.
func forEachEngine(t *testing.T, fn func(t *testing.T, m *member)) {
	t.Helper()
	for _, e := range harness.Engines() {
		t.Run(e, func(t *testing.T) {
			fn(t, startMember(t, e))
		})
	}
}

// testCtx is a context bounded well below the go test timeout, canceled when
// the test ends.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// checkHeader asserts the fields every response header must carry.
func checkHeader(t *testing.T, what string, h *pb.ResponseHeader) {
	t.Helper()
	switch {
	case h == nil:
		t.Errorf("%s: response header is nil", what)
	case h.ClusterId == 0 || h.MemberId == 0 || h.Revision == 0 || h.RaftTerm == 0:
		t.Errorf("%s: header has a zero field: %+v", what, h)
	}
}

// wantErr asserts err is the etcd error want, by gRPC code and message.
func wantErr(t *testing.T, what string, err error, want error) {
	t.Helper()
	var we rpctypes.EtcdError
	if !errors.As(want, &we) {
		t.Fatalf("wantErr: %v is not an rpctypes.EtcdError", want)
	}
	if err == nil {
		t.Errorf("%s: got no error, want %q", what, we.Error())
		return
	}
	code, msg := errCodeMsg(err)
	if code != we.Code() || msg != we.Error() {
		t.Errorf("%s: got error (%v) %q, want (%v) %q", what, code, msg, we.Code(), we.Error())
	}
}

// errCodeMsg extracts the gRPC code and message of an error returned by
// clientv3 (an rpctypes.EtcdError) or by a raw stub (a status error).
func errCodeMsg(err error) (codes.Code, string) {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code(), ee.Error()
	}
	if s, ok := status.FromError(err); ok {
		return s.Code(), s.Message()
	}
	return codes.Unknown, err.Error()
}

// mustOK fails the test at once on err.
func mustOK(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// envSet reports whether the environment variable name is set to a non-empty value.
func envSet(name string) bool { return os.Getenv(name) != "" }
