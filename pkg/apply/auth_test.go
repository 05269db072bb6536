package apply

import (
	"encoding/base64"
	"errors"
	"testing"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/authz"
	"github.com/kvd-dev/kvd/pkg/backend/enginetest"
	"github.com/kvd-dev/kvd/pkg/leasemgr"
	"github.com/kvd-dev/kvd/pkg/mvcc"
)

// authEnv is an applier with auth on: root, and alice who may write /a/
// and read /r/.
type authEnv struct {
	t     *testing.T
	a     *Applier
	st    *mvcc.Store
	az    *authz.Store
	lm    *leasemgr.Manager
	alice *pb.RequestHeader
	root  *pb.RequestHeader
}

func eachAuthEnv(t *testing.T, fn func(t *testing.T, e *authEnv)) {
	for _, engine := range enginetest.Names {
		t.Run(engine, func(t *testing.T) {
			st, err := mvcc.Open(enginetest.OpenT(t, engine), zap.NewNop())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			e := &authEnv{t: t, st: st, az: authz.New(nil, nil), lm: leasemgr.New(leasemgr.Config{MinTTL: 2})}
			e.a = New(Config{Store: st, Registry: NewRegistry(), Applied: NewApplied(0), Auth: e.az, Leases: e.lm})
			pw := base64.StdEncoding.EncodeToString([]byte("h"))
			for _, r := range []*pb.InternalRaftRequest{
				{AuthUserAdd: &pb.AuthUserAddRequest{Name: "root", HashedPassword: pw}},
				{AuthUserGrantRole: &pb.AuthUserGrantRoleRequest{User: "root", Role: "root"}},
				{AuthRoleAdd: &pb.AuthRoleAddRequest{Name: "r"}},
				{AuthRoleGrantPermission: &pb.AuthRoleGrantPermissionRequest{Name: "r", Perm: &authpb.Permission{
					PermType: authpb.Permission_READWRITE, Key: []byte("/a/"), RangeEnd: []byte("/a0")}}},
				{AuthRoleGrantPermission: &pb.AuthRoleGrantPermissionRequest{Name: "r", Perm: &authpb.Permission{
					PermType: authpb.Permission_READ, Key: []byte("/r/"), RangeEnd: []byte("/r0")}}},
				{AuthUserAdd: &pb.AuthUserAddRequest{Name: "alice", HashedPassword: pw}},
				{AuthUserGrantRole: &pb.AuthUserGrantRoleRequest{User: "alice", Role: "r"}},
				{AuthEnable: &pb.AuthEnableRequest{}},
			} {
				if res := do(t, e.a, st, r); res.Err != nil {
					t.Fatalf("%v: %v", r, res.Err)
				}
			}
			rev := e.az.Revision()
			e.alice = &pb.RequestHeader{Username: "alice", AuthRevision: rev}
			e.root = &pb.RequestHeader{Username: "root", AuthRevision: rev}
			fn(t, e)
		})
	}
}

func (e *authEnv) as(h *pb.RequestHeader, r *pb.InternalRaftRequest) Result {
	e.t.Helper()
	r.Header = h
	return do(e.t, e.a, e.st, r)
}

func TestAuthChecksInApplier(t *testing.T) {
	eachAuthEnv(t, func(t *testing.T, e *authEnv) {
		for _, c := range []struct {
			name string
			who  *pb.RequestHeader
			req  *pb.InternalRaftRequest
			want error
		}{
			{"put in /a/", e.alice, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("/a/x"), Value: []byte("1")}}, nil},
			{"put in /r/", e.alice, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("/r/x")}}, rpctypes.ErrGRPCPermissionDenied},
			{"anonymous put", &pb.RequestHeader{}, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("/a/x")}}, rpctypes.ErrGRPCUserEmpty},
			{"stale put", &pb.RequestHeader{Username: "alice", AuthRevision: 1}, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("/a/x")}}, rpctypes.ErrGRPCAuthOldRevision},
			{"delete /a/ with prev_kv", e.alice, &pb.InternalRaftRequest{DeleteRange: &pb.DeleteRangeRequest{Key: []byte("/a/"), RangeEnd: []byte("/a0"), PrevKv: true}}, nil},
			{"delete /r/", e.alice, &pb.InternalRaftRequest{DeleteRange: &pb.DeleteRangeRequest{Key: []byte("/r/x")}}, rpctypes.ErrGRPCPermissionDenied},
			// The failure branch is checked even when the success branch runs.
			{"txn with a forbidden failure op", e.alice, &pb.InternalRaftRequest{Txn: &pb.TxnRequest{
				Success: []*pb.RequestOp{putReq("/a/y", "v")}, Failure: []*pb.RequestOp{putReq("/r/y", "v")}}}, rpctypes.ErrGRPCPermissionDenied},
			{"txn compare on a forbidden key", e.alice, &pb.InternalRaftRequest{Txn: &pb.TxnRequest{
				Compare: []*pb.Compare{{Key: []byte("/z"), Target: pb.Compare_VERSION}}, Success: []*pb.RequestOp{putReq("/a/y", "v")}}}, rpctypes.ErrGRPCPermissionDenied},
			{"nested txn", e.alice, &pb.InternalRaftRequest{Txn: &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestTxn{
				RequestTxn: &pb.TxnRequest{Success: []*pb.RequestOp{putReq("/q", "v")}}}}}}}, rpctypes.ErrGRPCPermissionDenied},
			{"root anywhere", e.root, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("/r/x")}}, nil},
		} {
			rev := e.st.Rev()
			res := e.as(c.who, c.req)
			if !errors.Is(res.Err, c.want) && !(c.want == nil && res.Err == nil) {
				t.Errorf("%s: got %v, want %v", c.name, res.Err, c.want)
			}
			if c.want != nil && e.st.Rev() != rev {
				t.Errorf("%s: refused but the store moved to %d", c.name, e.st.Rev())
			}
		}
	})
}

// TestAuthLeaseKeys: a lease holding a key the caller may not write can be
// neither revoked nor given new keys by that caller; the member's own
// expiry revoke (as root) goes through.
func TestAuthLeaseKeys(t *testing.T) {
	eachAuthEnv(t, func(t *testing.T, e *authEnv) {
		if res := e.as(e.root, &pb.InternalRaftRequest{LeaseGrant: &pb.LeaseGrantRequest{ID: 7, TTL: 60}}); res.Err != nil {
			t.Fatal(res.Err)
		}
		if res := e.as(e.root, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("/r/held"), Lease: 7}}); res.Err != nil {
			t.Fatal(res.Err)
		}
		if res := e.as(e.alice, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("/a/x"), Lease: 7}}); !errors.Is(res.Err, rpctypes.ErrGRPCPermissionDenied) {
			t.Fatalf("attach to a lease with unwritable keys: %v", res.Err)
		}
		if res := e.as(e.alice, &pb.InternalRaftRequest{LeaseRevoke: &pb.LeaseRevokeRequest{ID: 7}}); !errors.Is(res.Err, rpctypes.ErrGRPCPermissionDenied) {
			t.Fatalf("revoke a lease with unwritable keys: %v", res.Err)
		}
		internal := &pb.RequestHeader{Username: authz.RootUser, AuthRevision: ^uint64(0)}
		if res := e.as(internal, &pb.InternalRaftRequest{LeaseRevoke: &pb.LeaseRevokeRequest{ID: 7}}); res.Err != nil {
			t.Fatalf("internal revoke: %v", res.Err)
		}
	})
}
