package authz

import (
	"encoding/base64"
	"errors"
	"sort"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"
)

// memBucket is a Writer that keeps the records, as the backend would.
type memBucket map[string][]byte

func (m memBucket) PutAuth(k string, v []byte) { m[k] = v }
func (m memBucket) DeleteAuth(k string)        { delete(m, k) }
func (m memBucket) each(fn func(string, []byte) error) error {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := fn(k, m[k]); err != nil {
			return err
		}
	}
	return nil
}

type harness struct {
	t  *testing.T
	s  *Store
	be memBucket
	// as is who the next requests come from.
	as Info
}

func newHarness(t *testing.T) *harness {
	return &harness{t: t, s: New(nil, nil), be: memBucket{}}
}

func (h *harness) do(r *pb.InternalRaftRequest) (proto.Message, error) {
	r.Header = &pb.RequestHeader{}
	StampHeader(r.Header, h.as)
	return h.s.Apply(h.be, r, 1, &pb.ResponseHeader{})
}

func (h *harness) must(r *pb.InternalRaftRequest) proto.Message {
	h.t.Helper()
	resp, err := h.do(r)
	if err != nil {
		h.t.Fatalf("%v: %v", r, err)
	}
	return resp
}

func (h *harness) fails(r *pb.InternalRaftRequest, want error) {
	h.t.Helper()
	before := h.s.Revision()
	if _, err := h.do(r); !errors.Is(err, want) {
		h.t.Fatalf("%v: got %v, want %v", r, err, want)
	}
	if h.s.Revision() != before {
		h.t.Fatalf("%v failed but moved the auth revision %d -> %d", r, before, h.s.Revision())
	}
}

func hashed(pw string) string { return base64.StdEncoding.EncodeToString([]byte("hash-of-" + pw)) }

func (h *harness) setupRootAndReader() {
	h.must(&pb.InternalRaftRequest{AuthUserAdd: &pb.AuthUserAddRequest{Name: "root", HashedPassword: hashed("r")}})
	h.must(&pb.InternalRaftRequest{AuthUserGrantRole: &pb.AuthUserGrantRoleRequest{User: "root", Role: "root"}})
	h.must(&pb.InternalRaftRequest{AuthRoleAdd: &pb.AuthRoleAddRequest{Name: "reader"}})
	h.must(&pb.InternalRaftRequest{AuthRoleGrantPermission: &pb.AuthRoleGrantPermissionRequest{Name: "reader",
		Perm: &authpb.Permission{PermType: authpb.Permission_READ, Key: []byte("/app/"), RangeEnd: []byte("/app0")}}})
	h.must(&pb.InternalRaftRequest{AuthUserAdd: &pb.AuthUserAddRequest{Name: "alice", HashedPassword: hashed("a")}})
	h.must(&pb.InternalRaftRequest{AuthUserGrantRole: &pb.AuthUserGrantRoleRequest{User: "alice", Role: "reader"}})
}

func TestEnableNeedsRoot(t *testing.T) {
	h := newHarness(t)
	h.fails(&pb.InternalRaftRequest{AuthEnable: &pb.AuthEnableRequest{}}, rpctypes.ErrGRPCRootUserNotExist)
	h.must(&pb.InternalRaftRequest{AuthUserAdd: &pb.AuthUserAddRequest{Name: "root", HashedPassword: hashed("r")}})
	h.fails(&pb.InternalRaftRequest{AuthEnable: &pb.AuthEnableRequest{}}, rpctypes.ErrGRPCRootRoleNotExist)
	h.must(&pb.InternalRaftRequest{AuthUserGrantRole: &pb.AuthUserGrantRoleRequest{User: "root", Role: "root"}})
	rev := h.s.Revision()
	h.must(&pb.InternalRaftRequest{AuthEnable: &pb.AuthEnableRequest{}})
	if !h.s.Enabled() || h.s.Revision() != rev {
		t.Fatalf("enabled=%v rev %d -> %d: enabling must not move the revision", h.s.Enabled(), rev, h.s.Revision())
	}
}

func TestChecksAndAdmin(t *testing.T) {
	h := newHarness(t)
	h.setupRootAndReader()
	h.must(&pb.InternalRaftRequest{AuthEnable: &pb.AuthEnableRequest{}})
	rev := h.s.Revision()
	alice := Info{User: "alice", Revision: rev}
	root := Info{User: "root", Revision: rev}

	for _, c := range []struct {
		name     string
		err      error
		want     error
		wantNone bool
	}{
		{"alice reads in prefix", h.s.CheckRead(alice, []byte("/app/x"), nil), nil, true},
		{"alice reads whole prefix", h.s.CheckRead(alice, []byte("/app/"), []byte("/app0")), nil, true},
		{"alice reads beyond prefix", h.s.CheckRead(alice, []byte("/app/"), []byte("/b")), rpctypes.ErrGRPCPermissionDenied, false},
		{"alice writes", h.s.CheckWrite(alice, []byte("/app/x"), nil), rpctypes.ErrGRPCPermissionDenied, false},
		{"root writes anything", h.s.CheckWrite(root, []byte("z"), []byte{0}), nil, true},
		{"anonymous", h.s.CheckRead(Info{}, []byte("/app/x"), nil), rpctypes.ErrGRPCUserEmpty, false},
		{"stale revision", h.s.CheckRead(Info{User: "alice", Revision: rev - 1}, []byte("/app/x"), nil), rpctypes.ErrGRPCAuthOldRevision, false},
		{"unknown user", h.s.CheckRead(Info{User: "bob", Revision: rev}, []byte("/app/x"), nil), rpctypes.ErrGRPCPermissionDenied, false},
		{"alice admin", h.s.CheckAdmin(alice), rpctypes.ErrGRPCPermissionDenied, false},
		{"anonymous admin", h.s.CheckAdmin(Info{}), rpctypes.ErrGRPCUserEmpty, false},
	} {
		if c.wantNone && c.err != nil || !c.wantNone && !errors.Is(c.err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, c.err, c.want)
		}
	}

	// Administration is root's; alice may only see herself and her roles.
	h.as = alice
	h.fails(&pb.InternalRaftRequest{AuthUserAdd: &pb.AuthUserAddRequest{Name: "x", HashedPassword: hashed("x")}}, rpctypes.ErrGRPCPermissionDenied)
	h.fails(&pb.InternalRaftRequest{AuthUserList: &pb.AuthUserListRequest{}}, rpctypes.ErrGRPCPermissionDenied)
	h.must(&pb.InternalRaftRequest{AuthUserGet: &pb.AuthUserGetRequest{Name: "alice"}})
	h.fails(&pb.InternalRaftRequest{AuthUserGet: &pb.AuthUserGetRequest{Name: "root"}}, rpctypes.ErrGRPCPermissionDenied)
	h.must(&pb.InternalRaftRequest{AuthRoleGet: &pb.AuthRoleGetRequest{Role: "reader"}})
	h.fails(&pb.InternalRaftRequest{AuthRoleGet: &pb.AuthRoleGetRequest{Role: "root"}}, rpctypes.ErrGRPCPermissionDenied)
	h.must(&pb.InternalRaftRequest{AuthStatus: &pb.AuthStatusRequest{}})

	// Root can't lose root while enabled; a revoked role stops applying at
	// once, and older identities are stale.
	h.as = root
	h.fails(&pb.InternalRaftRequest{AuthUserRevokeRole: &pb.AuthUserRevokeRoleRequest{Name: "root", Role: "root"}}, rpctypes.ErrGRPCInvalidAuthMgmt)
	h.fails(&pb.InternalRaftRequest{AuthUserDelete: &pb.AuthUserDeleteRequest{Name: "root"}}, rpctypes.ErrGRPCInvalidAuthMgmt)
	h.fails(&pb.InternalRaftRequest{AuthRoleDelete: &pb.AuthRoleDeleteRequest{Role: "root"}}, rpctypes.ErrGRPCInvalidAuthMgmt)
	h.must(&pb.InternalRaftRequest{AuthUserRevokeRole: &pb.AuthUserRevokeRoleRequest{Name: "alice", Role: "reader"}})
	if err := h.s.CheckRead(alice, []byte("/app/x"), nil); !errors.Is(err, rpctypes.ErrGRPCAuthOldRevision) {
		t.Fatalf("old identity after revoke: %v", err)
	}
	if err := h.s.CheckRead(Info{User: "alice", Revision: h.s.Revision()}, []byte("/app/x"), nil); !errors.Is(err, rpctypes.ErrGRPCPermissionDenied) {
		t.Fatalf("after revoke: %v", err)
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	h := newHarness(t)
	h.setupRootAndReader()
	for _, c := range []struct {
		r    *pb.InternalRaftRequest
		want error
	}{
		{&pb.InternalRaftRequest{AuthUserAdd: &pb.AuthUserAddRequest{Name: ""}}, rpctypes.ErrGRPCUserEmpty},
		{&pb.InternalRaftRequest{AuthUserAdd: &pb.AuthUserAddRequest{Name: "alice", HashedPassword: hashed("x")}}, rpctypes.ErrGRPCUserAlreadyExist},
		{&pb.InternalRaftRequest{AuthUserAdd: &pb.AuthUserAddRequest{Name: "bad", HashedPassword: "%%%"}}, ErrNoPasswordUser},
		{&pb.InternalRaftRequest{AuthRoleAdd: &pb.AuthRoleAddRequest{Name: ""}}, rpctypes.ErrGRPCRoleEmpty},
		{&pb.InternalRaftRequest{AuthUserAdd: &pb.AuthUserAddRequest{Name: strings.Repeat("u", MaxNameBytes+1), HashedPassword: hashed("x")}}, ErrUserNameTooLong},
		{&pb.InternalRaftRequest{AuthRoleAdd: &pb.AuthRoleAddRequest{Name: strings.Repeat("r", MaxNameBytes+1)}}, ErrRoleNameTooLong},
		{&pb.InternalRaftRequest{AuthRoleAdd: &pb.AuthRoleAddRequest{Name: "reader"}}, rpctypes.ErrGRPCRoleAlreadyExist},
		{&pb.InternalRaftRequest{AuthRoleGrantPermission: &pb.AuthRoleGrantPermissionRequest{Name: "reader"}}, rpctypes.ErrGRPCPermissionNotGiven},
		{&pb.InternalRaftRequest{AuthRoleGrantPermission: &pb.AuthRoleGrantPermissionRequest{Name: "reader",
			Perm: &authpb.Permission{Key: []byte("b"), RangeEnd: []byte("a")}}}, rpctypes.ErrGRPCInvalidAuthMgmt},
		{&pb.InternalRaftRequest{AuthRoleGrantPermission: &pb.AuthRoleGrantPermissionRequest{Name: "nope",
			Perm: &authpb.Permission{Key: []byte("a")}}}, rpctypes.ErrGRPCRoleNotFound},
		{&pb.InternalRaftRequest{AuthRoleRevokePermission: &pb.AuthRoleRevokePermissionRequest{Role: "reader", Key: []byte("zz")}}, rpctypes.ErrGRPCPermissionNotGranted},
		{&pb.InternalRaftRequest{AuthUserRevokeRole: &pb.AuthUserRevokeRoleRequest{Name: "alice", Role: "root"}}, rpctypes.ErrGRPCRoleNotGranted},
		{&pb.InternalRaftRequest{AuthUserGrantRole: &pb.AuthUserGrantRoleRequest{User: "alice", Role: "nope"}}, rpctypes.ErrGRPCRoleNotFound},
		{&pb.InternalRaftRequest{AuthUserGrantRole: &pb.AuthUserGrantRoleRequest{User: "nope", Role: "reader"}}, rpctypes.ErrGRPCUserNotFound},
		{&pb.InternalRaftRequest{AuthUserDelete: &pb.AuthUserDeleteRequest{Name: "nope"}}, rpctypes.ErrGRPCUserNotFound},
		{&pb.InternalRaftRequest{Authenticate: &pb.InternalAuthenticateRequest{Name: "alice"}}, rpctypes.ErrGRPCAuthNotEnabled},
	} {
		snapshot := memBucket{}
		for k, v := range h.be {
			snapshot[k] = v
		}
		h.fails(c.r, c.want)
		if len(snapshot) != len(h.be) {
			t.Fatalf("%v changed the stored records", c.r)
		}
	}
}

// TestPersistAndLoad: what Apply staged, Load reads back to the same state.
func TestPersistAndLoad(t *testing.T) {
	h := newHarness(t)
	h.setupRootAndReader()
	h.must(&pb.InternalRaftRequest{AuthRoleAdd: &pb.AuthRoleAddRequest{Name: "gone"}})
	h.must(&pb.InternalRaftRequest{AuthUserGrantRole: &pb.AuthUserGrantRoleRequest{User: "alice", Role: "gone"}})
	h.must(&pb.InternalRaftRequest{AuthRoleDelete: &pb.AuthRoleDeleteRequest{Role: "gone"}})
	h.must(&pb.InternalRaftRequest{AuthEnable: &pb.AuthEnableRequest{}})

	s2 := New(nil, nil)
	if err := s2.Load(h.be.each); err != nil {
		t.Fatal(err)
	}
	if !s2.Enabled() || s2.Revision() != h.s.Revision() {
		t.Fatalf("loaded enabled=%v rev=%d, want true, %d", s2.Enabled(), s2.Revision(), h.s.Revision())
	}
	if got, want := s2.RoleNames(), h.s.RoleNames(); len(got) != len(want) || len(got) != 1 || got[0] != "reader" {
		t.Fatalf("roles %v, want %v", got, want)
	}
	a := s2.User("alice")
	if a == nil || len(a.Roles) != 1 || a.Roles[0] != "reader" {
		t.Fatalf("alice loaded as %v: the deleted role must have left her", a)
	}
	who := Info{User: "alice", Revision: s2.Revision()}
	if err := s2.CheckRead(who, []byte("/app/k"), nil); err != nil {
		t.Fatalf("loaded permissions: %v", err)
	}
}
