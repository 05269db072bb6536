package e2e

import (
	"context"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
)

// Clients of the auth sequence: each sends with a connection of its own.
// Index authRootClient is root; authAnonClient never authenticates.
var authClientNames = []string{"root", "alice", "bob", "carol", ""}

const (
	authRootClient = 0
	authAnonClient = 4
)

var (
	// authUserPool and authRolePool are what admin requests name: the
	// clients' users, one user no client logs in as, and root.
	authUserPool = []string{"root", "alice", "bob", "carol", "dave"}
	authRolePool = []string{"r0", "r1", "r2", "r3", "root"}
	// authPermPool are the ranges permissions are granted and revoked on,
	// over the keys opGen writes: prefixes, single keys, from-key ranges
	// (end "\x00"), plain ranges (overlapping, adjacent, at the ends of
	// the key space: many shapes of etcd's permission tree), and, from
	// authValidPerms on, invalid ones (inverted, empty).
	authPermPool = []struct{ key, end string }{
		{"a/", "a0"}, {"a/b/", "a/b0"}, {"b/", "b0"}, {"c", "d"},
		{"a/1", ""}, {"b/3", ""}, {"c2", ""}, {"4", ""},
		{"c2", "\x00"}, {"b/", "\x00"}, {"\x00", "\x00"},
		{"a/", "b/"}, {"0", "a/3"},
		{"a/2", "a/4"}, {"b/1", "b/5"}, {"c0", "c3"}, {"\x00", "a/"},
		{"\xff", ""}, {"a/b/3", "\x00"}, {"2", "3"},
		{"b/", "a/"}, {"", ""}, {"c", "c"}, {"", "\x00"},
	}
	authRootPasswords = []string{"rootpw", "rootpw2"}
	// authValidPerms are the valid ranges of authPermPool.
	authValidPerms    = authPermPool[:20]
	authUserPasswords = []string{"pw1", "pw2", "pw3"}
	// authLongPassword is over bcrypt's 72-byte limit.
	authLongPassword = strings.Repeat("p", 73)
)

// authAction is one request of the sequence and the client that sends it.
type authAction struct {
	client int
	req    proto.Message
	tok    authTokenMode // which token goes with req
	fixed  string        // the token, for authTokenFixed
	// watchCompacted marks a watch from a start revision below the
	// compaction point: the server cancels it after the create response.
	watchCompacted bool
	// watchMore are further creates sent on the same watch stream after
	// req; watchProgress asks for a progress notification once all are
	// answered.
	watchMore     []*pb.WatchCreateRequest
	watchProgress bool
	// rangeStream sends a RangeRequest as RangeStream.
	rangeStream bool
	// selfID sends the request with the member ID of the server it goes
	// to (AlarmRequest.MemberID, MoveLeaderRequest.TargetID,
	// MemberPromoteRequest.ID).
	selfID bool
}

// kind names a for counts and messages.
func (a authAction) kind() string {
	if a.rangeStream {
		return "RangeStream"
	}
	return authKind(a.req)
}

// extra describes what a sends beyond req.
func (a authAction) extra() string {
	var b strings.Builder
	for _, w := range a.watchMore {
		fmt.Fprintf(&b, "; then create %v", w)
	}
	if a.watchProgress {
		b.WriteString("; then a progress request")
	}
	if a.selfID {
		b.WriteString("; member ID: the server's own")
	}
	return b.String()
}

// authKind names a request for counts and messages.
func authKind(req proto.Message) string {
	name := strings.TrimSuffix(string(req.ProtoReflect().Descriptor().Name()), "Request")
	if a, ok := req.(*pb.AlarmRequest); ok {
		return name + " " + a.Action.String()
	}
	if name == "Authenticate" {
		return name
	}
	return strings.TrimPrefix(name, "Auth")
}

// authReadOnly reports whether req can change no state, on the servers or
// in the test's clients.
func authReadOnly(req proto.Message) bool {
	switch r := req.(type) {
	case *pb.RangeRequest, *pb.AuthUserGetRequest, *pb.AuthUserListRequest,
		*pb.AuthRoleGetRequest, *pb.AuthRoleListRequest, *pb.AuthStatusRequest,
		*pb.WatchCreateRequest, *pb.LeaseTimeToLiveRequest, *pb.LeaseLeasesRequest,
		*pb.StatusRequest, *pb.HashRequest, *pb.HashKVRequest, *pb.DefragmentRequest,
		*pb.MemberListRequest:
		return true
	case *pb.AlarmRequest:
		return r.Action == pb.AlarmRequest_GET
	case *pb.SnapshotRequest:
		return true
	}
	return false
}

// authCall sends req on s.
func authCall(ctx context.Context, s authStubs, req proto.Message) (proto.Message, error) {
	o := waitForReady
	switch r := req.(type) {
	case *pb.RangeRequest:
		return s.kv.Range(ctx, r, o)
	case *pb.PutRequest:
		return s.kv.Put(ctx, r, o)
	case *pb.DeleteRangeRequest:
		return s.kv.DeleteRange(ctx, r, o)
	case *pb.TxnRequest:
		return s.kv.Txn(ctx, r, o)
	case *pb.CompactionRequest:
		return s.kv.Compact(ctx, r, o)
	case *pb.AuthenticateRequest:
		return s.auth.Authenticate(ctx, r, o)
	case *pb.AuthEnableRequest:
		return s.auth.AuthEnable(ctx, r, o)
	case *pb.AuthDisableRequest:
		return s.auth.AuthDisable(ctx, r, o)
	case *pb.AuthStatusRequest:
		return s.auth.AuthStatus(ctx, r, o)
	case *pb.AuthUserAddRequest:
		return s.auth.UserAdd(ctx, r, o)
	case *pb.AuthUserDeleteRequest:
		return s.auth.UserDelete(ctx, r, o)
	case *pb.AuthUserChangePasswordRequest:
		return s.auth.UserChangePassword(ctx, r, o)
	case *pb.AuthUserGrantRoleRequest:
		return s.auth.UserGrantRole(ctx, r, o)
	case *pb.AuthUserRevokeRoleRequest:
		return s.auth.UserRevokeRole(ctx, r, o)
	case *pb.AuthUserGetRequest:
		return s.auth.UserGet(ctx, r, o)
	case *pb.AuthUserListRequest:
		return s.auth.UserList(ctx, r, o)
	case *pb.AuthRoleAddRequest:
		return s.auth.RoleAdd(ctx, r, o)
	case *pb.AuthRoleDeleteRequest:
		return s.auth.RoleDelete(ctx, r, o)
	case *pb.AuthRoleGetRequest:
		return s.auth.RoleGet(ctx, r, o)
	case *pb.AuthRoleListRequest:
		return s.auth.RoleList(ctx, r, o)
	case *pb.AuthRoleGrantPermissionRequest:
		return s.auth.RoleGrantPermission(ctx, r, o)
	case *pb.AuthRoleRevokePermissionRequest:
		return s.auth.RoleRevokePermission(ctx, r, o)
	}
	panic(fmt.Sprintf("authCall: unexpected request %T", req))
}

// authGen generates the auth sequence from one seeded source. What it
// learns of the servers' state (whether auth is on, each user's password)
// it learns from the reference's answers, which are themselves a function
// of the requests, so the whole sequence is a function of the seed.
type authGen struct {
	kv         *opGen // KV requests; follows the revision as in TestDifferential
	enabled    bool
	passwords  map[string]string // last password a user was given, while it exists
	noPassword map[string]bool
}

func newAuthGen(kv *opGen) *authGen {
	return &authGen{kv: kv, passwords: map[string]string{}, noPassword: map[string]bool{}}
}

func (g *authGen) chance(p float64) bool { return g.kv.chance(p) }
func (g *authGen) intn(n int) int        { return g.kv.intn(n) }

func pick[T any](g *authGen, s []T) T { return s[g.intn(len(s))] }

// bootstrap is the fixed start of every sequence, sent with auth off: root
// and the clients' users, a role that can write a/ and one that can read
// everything, then auth on.
func (g *authGen) bootstrap() []authAction {
	perm := func(role string, t authpb.Permission_Type, key, end string) proto.Message {
		return &pb.AuthRoleGrantPermissionRequest{Name: role, Perm: &authpb.Permission{PermType: t, Key: []byte(key), RangeEnd: []byte(end)}}
	}
	reqs := []proto.Message{
		&pb.AuthUserAddRequest{Name: "root", Password: "rootpw"},
		&pb.AuthUserGrantRoleRequest{User: "root", Role: "root"},
		&pb.AuthUserAddRequest{Name: "alice", Password: "pw1"},
		&pb.AuthUserAddRequest{Name: "bob", Password: "pw1"},
		&pb.AuthUserAddRequest{Name: "carol", Password: "pw1"},
		&pb.AuthRoleAddRequest{Name: "r0"},
		perm("r0", authpb.READWRITE, "a/", "a0"),
		&pb.AuthUserGrantRoleRequest{User: "alice", Role: "r0"},
		&pb.AuthRoleAddRequest{Name: "r1"},
		perm("r1", authpb.READ, "\x00", "\x00"),
		&pb.AuthUserGrantRoleRequest{User: "bob", Role: "r1"},
		&pb.AuthEnableRequest{},
	}
	out := make([]authAction, len(reqs))
	for i, r := range reqs {
		out[i] = authAction{client: authAnonClient, req: r}
	}
	return out
}

// finale reads, as root, everything the sequence may have changed.
func (g *authGen) finale() []authAction {
	reqs := []proto.Message{
		&pb.AuthStatusRequest{},
		&pb.AuthUserListRequest{},
		&pb.AuthRoleListRequest{},
		&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}},
	}
	for _, u := range authUserPool {
		reqs = append(reqs, &pb.AuthUserGetRequest{Name: u})
	}
	for _, r := range authRolePool {
		reqs = append(reqs, &pb.AuthRoleGetRequest{Role: r})
	}
	reqs = append(reqs, &pb.LeaseLeasesRequest{}, &pb.StatusRequest{}, &pb.AlarmRequest{})
	for _, id := range authLeaseIDs {
		reqs = append(reqs, &pb.LeaseTimeToLiveRequest{ID: id, Keys: true})
	}
	out := make([]authAction, len(reqs))
	for i, r := range reqs {
		out[i] = authAction{client: authRootClient, req: r}
	}
	return out
}

func (g *authGen) next() authAction {
	var a authAction
	switch n := g.intn(100); {
	case n < 30:
		a = g.admin()
	case n < 33:
		// A user logs in again though its token is good, now and then
		// with a wrong password.
		c := g.intn(authAnonClient)
		a = authAction{client: c, req: g.authenticate(authClientNames[c])}
	case n < 70:
		a = g.kvAction()
	case n < 79:
		a = g.watchAction()
	case n < 91:
		a = g.leaseAction()
	default:
		a = g.maintAction()
	}
	if g.chance(0.05) {
		g.overrideToken(&a)
	}
	return a
}

// authenticate is an Authenticate request for user, with the password it
// was last given most of the time.
func (g *authGen) authenticate(user string) *pb.AuthenticateRequest {
	pw, known := g.passwords[user]
	if !known || g.chance(0.08) {
		pw = pick(g, []string{"pw1", "pw2", "rootpw", "", "wrong"})
	}
	return &pb.AuthenticateRequest{Name: user, Password: pw}
}

func (g *authGen) newPassword(user string) string {
	if user == "root" {
		// Root never loses its password: auth on and root unable to log
		// in would end the useful part of the sequence.
		return pick(g, authRootPasswords)
	}
	switch {
	case g.chance(0.04):
		return ""
	case g.chance(0.03):
		return authLongPassword
	}
	return pick(g, authUserPasswords)
}

func (g *authGen) user() string {
	if g.chance(0.02) {
		return ""
	}
	return pick(g, authUserPool)
}

func (g *authGen) role() string {
	if g.chance(0.02) {
		return ""
	}
	return pick(g, authRolePool)
}

func (g *authGen) admin() authAction {
	client := authRootClient
	switch n := g.intn(100); {
	case n < 18:
		client = 1 + g.intn(3)
	case n < 23:
		client = authAnonClient
	}
	var req proto.Message
	switch n := g.intn(100); {
	case n < 10:
		user := g.user()
		r := &pb.AuthUserAddRequest{Name: user, Password: g.newPassword(user)}
		if user != "root" && g.chance(0.1) {
			r.Options = &authpb.UserAddOptions{NoPassword: true}
			if g.chance(0.5) {
				r.Password = ""
			}
		}
		req = r
	case n < 15:
		req = &pb.AuthUserDeleteRequest{Name: g.user()}
	case n < 20:
		user := g.user()
		req = &pb.AuthUserChangePasswordRequest{Name: user, Password: g.newPassword(user)}
	case n < 32:
		req = &pb.AuthUserGrantRoleRequest{User: g.user(), Role: g.role()}
	case n < 38:
		req = &pb.AuthUserRevokeRoleRequest{Name: g.user(), Role: g.role()}
	case n < 42:
		req = &pb.AuthUserGetRequest{Name: g.user()}
	case n < 44:
		req = &pb.AuthUserListRequest{}
	case n < 52:
		req = &pb.AuthRoleAddRequest{Name: g.role()}
	case n < 55:
		req = &pb.AuthRoleDeleteRequest{Role: g.role()}
	case n < 59:
		req = &pb.AuthRoleGetRequest{Role: g.role()}
	case n < 61:
		req = &pb.AuthRoleListRequest{}
	case n < 79:
		r := &pb.AuthRoleGrantPermissionRequest{Name: g.role()}
		if !g.chance(0.01) {
			p := pick(g, authPermPool)
			r.Perm = &authpb.Permission{
				PermType: authpb.Permission_Type(g.intn(3)),
				Key:      []byte(p.key),
				RangeEnd: []byte(p.end),
			}
		}
		req = r
	case n < 89:
		p := pick(g, authPermPool)
		req = &pb.AuthRoleRevokePermissionRequest{Role: g.role(), Key: []byte(p.key), RangeEnd: []byte(p.end)}
	case n < 95:
		req = &pb.AuthEnableRequest{}
	case n < 98:
		req = &pb.AuthDisableRequest{}
	default:
		req = &pb.AuthStatusRequest{}
	}
	return authAction{client: client, req: req}
}

func (g *authGen) kvAction() authAction {
	client := 1 + g.intn(3)
	switch n := g.intn(100); {
	case n < 20:
		client = authRootClient
	case n < 35:
		client = authAnonClient
	}
	var req proto.Message
	a := authAction{client: client}
	switch n := g.intn(100); {
	case n < 30:
		req = g.kv.rangeReq(false)
	case n < 35:
		req = g.kv.rangeReq(true)
		a.rangeStream = true
	case n < 63:
		req = g.kv.putReq()
	case n < 76:
		req = g.kv.delReq()
	case n < 97:
		r := g.kv.txnReq(0)
		if txnHas(r, isFromKeyDelete) {
			txnHas(r, clearIgnoreFlags)
		}
		req = r
	default:
		req = &pb.CompactionRequest{Revision: max(1, g.kv.compacted-1) + int64(g.intn(int(g.kv.rev-g.kv.compacted)+3))}
	}
	// Now and then the puts name one of the sequence's leases.
	if g.chance(0.15) {
		set := func(p *pb.PutRequest) {
			if !p.IgnoreLease && g.chance(0.5) {
				p.Lease = pick(g, authLeaseIDs)
			}
		}
		switch r := req.(type) {
		case *pb.PutRequest:
			set(r)
		case *pb.TxnRequest:
			txnHas(r, func(op *pb.RequestOp) bool {
				if p := op.GetRequestPut(); p != nil {
					set(p)
				}
				return false
			})
		}
	}
	a.req = req
	return a
}

// observe learns from the reference's answer to req.
func (g *authGen) observe(req, resp proto.Message, err error) {
	if err != nil {
		return
	}
	switch r := req.(type) {
	case *pb.AuthEnableRequest:
		g.enabled = true
	case *pb.AuthDisableRequest:
		g.enabled = false
	case *pb.AuthUserAddRequest:
		if r.Options.GetNoPassword() {
			g.noPassword[r.Name] = true
			delete(g.passwords, r.Name)
		} else {
			g.passwords[r.Name] = r.Password
		}
	case *pb.AuthUserChangePasswordRequest:
		if !g.noPassword[r.Name] {
			g.passwords[r.Name] = r.Password
		}
	case *pb.AuthUserDeleteRequest:
		delete(g.passwords, r.Name)
		delete(g.noPassword, r.Name)
	case *pb.CompactionRequest:
		g.kv.observe(&kvOp{compact: r}, resp, nil)
	}
	// Any answer's header carries the store's revision (LeaseRevoke
	// deletes keys, Put attaches them to leases).
	if h, ok := resp.(interface{ GetHeader() *pb.ResponseHeader }); ok && h.GetHeader() != nil {
		g.kv.rev = max(g.kv.rev, h.GetHeader().Revision)
	}
}
