package api

import (
	"context"
	"encoding/base64"
	"math"
	"runtime"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.uber.org/zap"
	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/kvd-dev/kvd/pkg/authz"
	"github.com/kvd-dev/kvd/pkg/pluginhost"
)

// authServer is the Auth service. Every call goes through raft (etcd's
// shape: the answer reflects everything committed before it); passwords are
// hashed and checked here, never in the applier, so a burst of
// Authenticate or UserAdd calls costs CPU but never the applier's turn.
type authServer struct {
	pb.UnimplementedAuthServer
	s *Server
}

// bcryptSlots bounds the bcrypt work running at once to half the CPUs, so a
// burst of logins leaves the rest for the write path.
var bcryptSlots = make(chan struct{}, max(1, runtime.GOMAXPROCS(0)/2))

func bcryptDo(ctx context.Context, fn func()) error {
	select {
	case bcryptSlots <- struct{}{}:
	case <-ctx.Done():
		return rpctypes.ErrGRPCCanceled
	}
	defer func() { <-bcryptSlots }()
	fn()
	return nil
}

type withHeader interface{ GetHeader() *pb.ResponseHeader }

// authCall proposes req and returns the applied response as T.
func authCall[T withHeader](ctx context.Context, s *Server, req *pb.InternalRaftRequest) (T, error) {
	var zero T
	res, err := s.propose(ctx, req)
	if err != nil {
		return zero, err
	}
	if res.Err != nil {
		return zero, res.Err
	}
	resp := res.Resp.(T)
	s.fill(resp.GetHeader())
	return resp, nil
}

func (a *authServer) AuthEnable(ctx context.Context, r *pb.AuthEnableRequest) (*pb.AuthEnableResponse, error) {
	return authCall[*pb.AuthEnableResponse](ctx, a.s, &pb.InternalRaftRequest{AuthEnable: r})
}

func (a *authServer) AuthDisable(ctx context.Context, r *pb.AuthDisableRequest) (*pb.AuthDisableResponse, error) {
	return authCall[*pb.AuthDisableResponse](ctx, a.s, &pb.InternalRaftRequest{AuthDisable: r})
}

func (a *authServer) AuthStatus(ctx context.Context, r *pb.AuthStatusRequest) (*pb.AuthStatusResponse, error) {
	return authCall[*pb.AuthStatusResponse](ctx, a.s, &pb.InternalRaftRequest{AuthStatus: r})
}

// Authenticate checks the password here, then proposes only the user name
// and the token prefix (no password in the WAL). If the auth store moved
// while the password was checked, it checks again (etcd's optimistic loop).
func (a *authServer) Authenticate(ctx context.Context, r *pb.AuthenticateRequest) (*pb.AuthenticateResponse, error) {
	s := a.s
	if err := s.linearize(ctx); err != nil {
		return nil, err
	}
	if s.Plugins.HasAuthenticators() && s.Auth.Enabled() {
		id, ok, err := s.Plugins.Password(ctx, r.Name, r.Password)
		if err != nil {
			return nil, err
		}
		if ok {
			return a.authenticateExternal(ctx, id)
		}
	}
	for {
		checked, err := a.checkPassword(ctx, r.Name, r.Password)
		if err != nil {
			return nil, err
		}
		prefix, err := s.Auth.Tokens().Prefix()
		if err != nil {
			return nil, err
		}
		resp, err := authCall[*pb.AuthenticateResponse](ctx, s, &pb.InternalRaftRequest{
			Authenticate: &pb.InternalAuthenticateRequest{Name: r.Name, SimpleToken: prefix},
		})
		if err != nil {
			return nil, err
		}
		if checked == s.Auth.Revision() {
			return resp, nil
		}
		s.Logger.Info("auth store changed while a password was checked; checking again")
	}
}

// authenticateExternal mints a token for a user an authenticator plugin
// vouched for: the entry's header carries the plugin's name and the user's
// groups (its roles), so every member's token resolves to the same
// identity without asking a plugin.
func (a *authServer) authenticateExternal(ctx context.Context, id pluginhost.Identity) (*pb.AuthenticateResponse, error) {
	prefix, err := a.s.Auth.Tokens().Prefix()
	if err != nil {
		return nil, err
	}
	hdr := &pb.RequestHeader{}
	authz.StampHeader(hdr, authz.Info{User: id.User, Via: id.Plugin, Roles: id.Groups})
	return authCall[*pb.AuthenticateResponse](ctx, a.s, &pb.InternalRaftRequest{
		Header:       hdr,
		Authenticate: &pb.InternalAuthenticateRequest{Name: id.User, SimpleToken: prefix},
	})
}

// checkPassword returns the auth revision the password was checked at.
func (a *authServer) checkPassword(ctx context.Context, name, password string) (uint64, error) {
	az := a.s.Auth
	if !az.Enabled() {
		return 0, rpctypes.ErrGRPCAuthNotEnabled
	}
	rev := az.Revision()
	u := az.User(name)
	if u == nil {
		a.s.Logger.Warn("authentication failed: no such user", zap.String("user-name", name))
		return 0, rpctypes.ErrGRPCAuthFailed
	}
	if u.Options.GetNoPassword() {
		return 0, authz.ErrNoPasswordUser
	}
	var cmpErr error
	if err := bcryptDo(ctx, func() { cmpErr = bcrypt.CompareHashAndPassword(u.Password, []byte(password)) }); err != nil {
		return 0, err
	}
	if cmpErr != nil {
		a.s.Logger.Info("authentication failed: invalid password", zap.String("user-name", name))
		return 0, rpctypes.ErrGRPCAuthFailed
	}
	return rev, nil
}

// hash is what etcd proposes instead of a password: its bcrypt hash, in
// base64. A password bcrypt cannot take (over 72 bytes) gets bcrypt's error,
// as etcd answers it.
func (a *authServer) hash(ctx context.Context, password string) (string, error) {
	var (
		h   []byte
		err error
	)
	if cerr := bcryptDo(ctx, func() { h, err = bcrypt.GenerateFromPassword([]byte(password), a.s.cfg.BcryptCost) }); cerr != nil {
		return "", cerr
	}
	if err != nil {
		return "", status.Error(codes.Unknown, err.Error())
	}
	return base64.StdEncoding.EncodeToString(h), nil
}

func (a *authServer) UserAdd(ctx context.Context, r *pb.AuthUserAddRequest) (*pb.AuthUserAddResponse, error) {
	req := &pb.AuthUserAddRequest{Name: r.Name, Options: r.Options}
	if !r.Options.GetNoPassword() {
		h, err := a.hash(ctx, r.Password)
		if err != nil {
			return nil, err
		}
		req.HashedPassword = h
	}
	return authCall[*pb.AuthUserAddResponse](ctx, a.s, &pb.InternalRaftRequest{AuthUserAdd: req})
}

func (a *authServer) UserChangePassword(ctx context.Context, r *pb.AuthUserChangePasswordRequest) (*pb.AuthUserChangePasswordResponse, error) {
	req := &pb.AuthUserChangePasswordRequest{Name: r.Name, HashedPassword: r.HashedPassword}
	if r.Password != "" {
		h, err := a.hash(ctx, r.Password)
		if err != nil {
			return nil, err
		}
		req.HashedPassword = h
	}
	return authCall[*pb.AuthUserChangePasswordResponse](ctx, a.s, &pb.InternalRaftRequest{AuthUserChangePassword: req})
}

func (a *authServer) UserGet(ctx context.Context, r *pb.AuthUserGetRequest) (*pb.AuthUserGetResponse, error) {
	return authCall[*pb.AuthUserGetResponse](ctx, a.s, &pb.InternalRaftRequest{AuthUserGet: r})
}

func (a *authServer) UserList(ctx context.Context, r *pb.AuthUserListRequest) (*pb.AuthUserListResponse, error) {
	return authCall[*pb.AuthUserListResponse](ctx, a.s, &pb.InternalRaftRequest{AuthUserList: r})
}

func (a *authServer) UserDelete(ctx context.Context, r *pb.AuthUserDeleteRequest) (*pb.AuthUserDeleteResponse, error) {
	return authCall[*pb.AuthUserDeleteResponse](ctx, a.s, &pb.InternalRaftRequest{AuthUserDelete: r})
}

func (a *authServer) UserGrantRole(ctx context.Context, r *pb.AuthUserGrantRoleRequest) (*pb.AuthUserGrantRoleResponse, error) {
	return authCall[*pb.AuthUserGrantRoleResponse](ctx, a.s, &pb.InternalRaftRequest{AuthUserGrantRole: r})
}

func (a *authServer) UserRevokeRole(ctx context.Context, r *pb.AuthUserRevokeRoleRequest) (*pb.AuthUserRevokeRoleResponse, error) {
	return authCall[*pb.AuthUserRevokeRoleResponse](ctx, a.s, &pb.InternalRaftRequest{AuthUserRevokeRole: r})
}

func (a *authServer) RoleAdd(ctx context.Context, r *pb.AuthRoleAddRequest) (*pb.AuthRoleAddResponse, error) {
	return authCall[*pb.AuthRoleAddResponse](ctx, a.s, &pb.InternalRaftRequest{AuthRoleAdd: r})
}

func (a *authServer) RoleGet(ctx context.Context, r *pb.AuthRoleGetRequest) (*pb.AuthRoleGetResponse, error) {
	return authCall[*pb.AuthRoleGetResponse](ctx, a.s, &pb.InternalRaftRequest{AuthRoleGet: r})
}

func (a *authServer) RoleList(ctx context.Context, r *pb.AuthRoleListRequest) (*pb.AuthRoleListResponse, error) {
	return authCall[*pb.AuthRoleListResponse](ctx, a.s, &pb.InternalRaftRequest{AuthRoleList: r})
}

func (a *authServer) RoleDelete(ctx context.Context, r *pb.AuthRoleDeleteRequest) (*pb.AuthRoleDeleteResponse, error) {
	return authCall[*pb.AuthRoleDeleteResponse](ctx, a.s, &pb.InternalRaftRequest{AuthRoleDelete: r})
}

func (a *authServer) RoleGrantPermission(ctx context.Context, r *pb.AuthRoleGrantPermissionRequest) (*pb.AuthRoleGrantPermissionResponse, error) {
	return authCall[*pb.AuthRoleGrantPermissionResponse](ctx, a.s, &pb.InternalRaftRequest{AuthRoleGrantPermission: r})
}

func (a *authServer) RoleRevokePermission(ctx context.Context, r *pb.AuthRoleRevokePermissionRequest) (*pb.AuthRoleRevokePermissionResponse, error) {
	return authCall[*pb.AuthRoleRevokePermissionResponse](ctx, a.s, &pb.InternalRaftRequest{AuthRoleRevokePermission: r})
}

// caller is who sends the request in ctx; Anonymous while auth is off and
// for callers without a token or (under client-cert-auth) a certificate.
func (s *Server) caller(ctx context.Context) (authz.Info, error) {
	if s.Auth == nil || !s.Auth.Enabled() {
		return authz.Info{}, nil
	}
	if who, ok := ctx.Value(callerKey{}).(authz.Info); ok {
		return who, nil
	}
	// A simple token is known on this member once the Authenticate entry
	// that minted it (its raft index) is applied here: wait for that, as
	// etcd does, rather than call a fresh token invalid.
	tok, hasToken := authz.TokenOf(ctx)
	if hasToken {
		if idx, ok := authz.SimpleTokenIndex(tok); ok && s.Auth.SimpleTokens() && idx > s.Applied.Index() {
			wctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
			err := s.Applied.Wait(wctx, idx)
			cancel()
			if err != nil {
				return authz.Info{}, s.raftErr(ctx, err)
			}
		}
	}
	return s.Auth.Identify(ctx, tok, hasToken, s.cfg.ClientCertAuth)
}

// requireAdmin is etcd's check for the calls reserved to the root role.
func (s *Server) requireAdmin(ctx context.Context) error {
	if s.Auth == nil || !s.Auth.Enabled() {
		return nil
	}
	who, err := s.caller(ctx)
	if err != nil {
		return err
	}
	if who.Anonymous() {
		return rpctypes.ErrGRPCUserEmpty
	}
	return s.Auth.CheckAdmin(who)
}

// requireUser refuses anonymous callers while auth is on.
func (s *Server) requireUser(ctx context.Context) error {
	if s.Auth == nil || !s.Auth.Enabled() {
		return nil
	}
	who, err := s.caller(ctx)
	if err != nil {
		return err
	}
	if who.Anonymous() {
		return rpctypes.ErrGRPCUserEmpty
	}
	return nil
}

// readCheck checks a read before it is served (etcd's doSerialize): the
// caller must be allowed by check. The returned revision is what the caller
// was checked at; readStale tells after the read whether the store moved
// since, which the caller must then learn about.
func (s *Server) readCheck(ctx context.Context, check func(authz.Info) error) (uint64, error) {
	if s.Auth == nil || !s.Auth.Enabled() {
		return 0, nil
	}
	who, err := s.caller(ctx)
	if err != nil {
		return 0, err
	}
	if err := check(who); err != nil {
		return 0, err
	}
	return who.Revision, nil
}

func (s *Server) readStale(checked uint64) error {
	if checked != 0 && s.Auth != nil && checked != s.Auth.Revision() {
		return rpctypes.ErrGRPCAuthOldRevision
	}
	return nil
}

// internalHeader is the header of a proposal the member makes itself (lease
// expiry): it acts as root, as etcd's does, at a revision never stale.
func (s *Server) internalHeader() *pb.RequestHeader {
	return &pb.RequestHeader{ID: s.ids.next(), Username: authz.RootUser, AuthRevision: math.MaxUint64}
}

// checkLeaseKeys lets a caller see leases only if it may read every key
// attached to them (etcd's LeaseTimeToLive with keys and LeaseLeases);
// admins see all. It returns the revision checked at, for readStale.
func (s *Server) checkLeaseKeys(ctx context.Context, ids []int64) (uint64, error) {
	if s.Auth == nil || !s.Auth.Enabled() {
		return 0, nil
	}
	rev := s.Auth.Revision()
	who, err := s.caller(ctx)
	if err != nil {
		return 0, err
	}
	if who.Anonymous() {
		return 0, rpctypes.ErrGRPCUserEmpty
	}
	if s.Auth.IsAdmin(who) {
		return rev, nil
	}
	for _, id := range ids {
		for _, k := range s.Leases.Keys(id) {
			if err := s.Auth.CheckRead(who, []byte(k), nil); err != nil {
				return 0, err
			}
		}
	}
	if rev != s.Auth.Revision() {
		return 0, rpctypes.ErrGRPCAuthOldRevision
	}
	return rev, nil
}

// checkRenew lets a caller keep a lease alive only if it may write every
// key attached to it (etcd's checkLeaseRenew).
func (s *Server) checkRenew(ctx context.Context, id int64) error {
	if s.Auth == nil || !s.Auth.Enabled() {
		return nil
	}
	rev := s.Auth.Revision()
	who, err := s.caller(ctx)
	if err != nil {
		return err
	}
	if who.Anonymous() {
		return rpctypes.ErrGRPCUserEmpty
	}
	if s.Auth.IsAdmin(who) {
		return nil
	}
	for _, k := range s.Leases.Keys(id) {
		if err := s.Auth.CheckWrite(who, []byte(k), nil); err != nil {
			return err
		}
	}
	if rev != s.Auth.Revision() {
		return rpctypes.ErrGRPCAuthOldRevision
	}
	return nil
}

// forwardAuth carries the caller's token to the leader on a relayed call.
func forwardAuth(ctx context.Context) context.Context {
	for _, k := range []string{rpctypes.TokenFieldNameGRPC, rpctypes.TokenFieldNameSwagger} {
		if v := metadata.ValueFromIncomingContext(ctx, k); len(v) > 0 {
			return metadata.AppendToOutgoingContext(ctx, k, v[0])
		}
	}
	return ctx
}

// A methodRule is who may call a method while auth is enabled.
type methodRule int

const (
	anyUser   methodRule = iota + 1 // an authenticated caller
	adminOnly                       // a caller with the root role
)

// methodRules are the calls etcd v3.7.3 checks before serving them (beyond
// the key permissions the applier and the read path check): maintenance,
// membership changes and compaction need root; status, alarm listing and
// lease calls need a user.
var methodRules = map[string]methodRule{
	"/etcdserverpb.KV/Compact":             adminOnly,
	"/etcdserverpb.Maintenance/Defragment": adminOnly,
	"/etcdserverpb.Maintenance/Snapshot":   adminOnly,
	"/etcdserverpb.Maintenance/Hash":       adminOnly,
	"/etcdserverpb.Maintenance/HashKV":     adminOnly,
	"/etcdserverpb.Maintenance/MoveLeader": adminOnly,
	"/etcdserverpb.Maintenance/Downgrade":  adminOnly,
	"/etcdserverpb.Maintenance/Alarm":      adminOnly, // GET: anyUser, below
	"/etcdserverpb.Maintenance/Status":     anyUser,
	"/etcdserverpb.Cluster/MemberAdd":      adminOnly,
	"/etcdserverpb.Cluster/MemberRemove":   adminOnly,
	"/etcdserverpb.Cluster/MemberUpdate":   adminOnly,
	"/etcdserverpb.Cluster/MemberPromote":  adminOnly,
	"/etcdserverpb.Lease/LeaseGrant":       anyUser,
	"/etcdserverpb.Lease/LeaseRevoke":      anyUser,
	"/etcdserverpb.Lease/LeaseTimeToLive":  anyUser,
}

// checkMethod applies methodRules; req is nil for streams.
func (s *Server) checkMethod(ctx context.Context, method string, req any) error {
	rule := methodRules[method]
	if rule == 0 || s.Auth == nil || !s.Auth.Enabled() {
		return nil
	}
	if a, ok := req.(*pb.AlarmRequest); ok && a.Action == pb.AlarmRequest_GET {
		rule = anyUser
	}
	if rule == adminOnly {
		return s.requireAdmin(ctx)
	}
	return s.requireUser(ctx)
}

// watchPermitted is etcd's check of a watch create: read permission on its
// range, as a Range of the same key and range_end is checked (an empty key
// is "\x00", as etcd's watch server makes it).
func (s *Server) watchPermitted(ctx context.Context, r *pb.WatchCreateRequest) error {
	if s.Auth == nil || !s.Auth.Enabled() {
		return nil
	}
	who, err := s.caller(ctx)
	if err != nil {
		return err
	}
	key := r.Key
	if len(key) == 0 {
		key = []byte{0}
	}
	if err := s.Auth.CheckRead(who, key, r.RangeEnd); err != nil {
		return err
	}
	_, err = s.authorize(ctx, methodWatch, watchAccesses(r))
	return err
}

// watchRefusal is the cancel reason of a refused watch create: the four
// errors etcd names, permission denied for anything else.
func watchRefusal(err error) string {
	switch err {
	case rpctypes.ErrGRPCInvalidAuthToken, rpctypes.ErrGRPCAuthOldRevision, rpctypes.ErrGRPCUserEmpty:
		return err.Error()
	}
	return rpctypes.ErrGRPCPermissionDenied.Error()
}
