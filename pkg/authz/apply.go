package authz

import (
	"bytes"
	"encoding/base64"
	"errors"
	"slices"
	"sort"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// MaxNameBytes bounds user and role names: they are backend keys, and
// bbolt takes keys up to 32 KiB (etcd v3.7.3 accepts longer names and then
// fails fatally at every start).
const MaxNameBytes = 32000

// ErrUserNameTooLong and ErrRoleNameTooLong refuse names over MaxNameBytes.
var (
	ErrUserNameTooLong = status.Errorf(codes.InvalidArgument, "etcdserver: user name is too long (over %d bytes)", MaxNameBytes)
	ErrRoleNameTooLong = status.Errorf(codes.InvalidArgument, "etcdserver: role name is too long (over %d bytes)", MaxNameBytes)
)

// ErrNoPasswordUser is what etcd answers (unmapped, so with code Unknown)
// when a no-password user is given a password, or a password hash cannot be
// decoded.
var ErrNoPasswordUser = status.Error(codes.Unknown, "auth: authentication failed, password was given for no password user")

// IsAuthRequest tells whether req is one of the Auth service's requests,
// which Apply handles.
func IsAuthRequest(r *pb.InternalRaftRequest) bool {
	return r.AuthEnable != nil || r.AuthDisable != nil || r.AuthStatus != nil || r.Authenticate != nil ||
		r.AuthUserAdd != nil || r.AuthUserDelete != nil || r.AuthUserChangePassword != nil ||
		r.AuthUserGrantRole != nil || r.AuthUserGet != nil || r.AuthUserRevokeRole != nil ||
		r.AuthUserList != nil || r.AuthRoleAdd != nil || r.AuthRoleGrantPermission != nil ||
		r.AuthRoleGet != nil || r.AuthRoleRevokePermission != nil || r.AuthRoleDelete != nil ||
		r.AuthRoleList != nil
}

// needsAdmin are the requests etcd applies only for a caller with the root
// role (once auth is enabled). UserGet and RoleGet are also allowed for
// one's own user and roles; AuthStatus and Authenticate for anyone.
func needsAdmin(r *pb.InternalRaftRequest) bool {
	return r.AuthEnable != nil || r.AuthDisable != nil || r.AuthUserAdd != nil || r.AuthUserDelete != nil ||
		r.AuthUserChangePassword != nil || r.AuthUserGrantRole != nil || r.AuthUserRevokeRole != nil ||
		r.AuthRoleAdd != nil || r.AuthRoleGrantPermission != nil || r.AuthRoleRevokePermission != nil ||
		r.AuthRoleDelete != nil || r.AuthUserList != nil || r.AuthRoleList != nil
}

// Apply applies an Auth request committed at raft index, as the caller in
// its header; hdr becomes the response's header. Changes are staged in w.
func (s *Store) Apply(w Writer, r *pb.InternalRaftRequest, index uint64, hdr *pb.ResponseHeader) (proto.Message, error) {
	caller := CallerOf(r.GetHeader())
	if needsAdmin(r) {
		if err := s.CheckAdmin(caller); err != nil {
			return nil, err
		}
	}
	old := s.cur.Load()
	switch {
	case r.AuthEnable != nil:
		return &pb.AuthEnableResponse{Header: hdr}, s.enable(w, old)
	case r.AuthDisable != nil:
		if old.enabled {
			st := old.clone()
			st.enabled = false
			if err := s.publish(w, old, st, true); err != nil {
				return nil, err
			}
			if s.tokens != nil {
				s.tokens.Disable()
			}
			s.lg.Info("disabled authentication")
		}
		return &pb.AuthDisableResponse{Header: hdr}, nil
	case r.AuthStatus != nil:
		return &pb.AuthStatusResponse{Header: hdr, Enabled: old.enabled, AuthRevision: old.rev}, nil
	case r.Authenticate != nil:
		return s.authenticate(r.Authenticate, CallerOf(r.GetHeader()), index, hdr)
	case r.AuthUserAdd != nil:
		return &pb.AuthUserAddResponse{Header: hdr}, s.userAdd(w, old, r.AuthUserAdd)
	case r.AuthUserDelete != nil:
		return &pb.AuthUserDeleteResponse{Header: hdr}, s.userDelete(w, old, r.AuthUserDelete.Name)
	case r.AuthUserChangePassword != nil:
		return &pb.AuthUserChangePasswordResponse{Header: hdr}, s.userPassword(w, old, r.AuthUserChangePassword)
	case r.AuthUserGrantRole != nil:
		return &pb.AuthUserGrantRoleResponse{Header: hdr}, s.userGrant(w, old, r.AuthUserGrantRole)
	case r.AuthUserRevokeRole != nil:
		return &pb.AuthUserRevokeRoleResponse{Header: hdr}, s.userRevoke(w, old, r.AuthUserRevokeRole)
	case r.AuthUserGet != nil:
		if err := s.CheckAdmin(caller); err != nil && r.AuthUserGet.Name != caller.User {
			return nil, err
		}
		u := old.users[r.AuthUserGet.Name]
		if u == nil {
			return nil, rpctypes.ErrGRPCUserNotFound
		}
		return &pb.AuthUserGetResponse{Header: hdr, Roles: slices.Clone(u.Roles)}, nil
	case r.AuthUserList != nil:
		return &pb.AuthUserListResponse{Header: hdr, Users: sortedKeys(old.users)}, nil
	case r.AuthRoleAdd != nil:
		return &pb.AuthRoleAddResponse{Header: hdr}, s.roleAdd(w, old, r.AuthRoleAdd.Name)
	case r.AuthRoleDelete != nil:
		return &pb.AuthRoleDeleteResponse{Header: hdr}, s.roleDelete(w, old, r.AuthRoleDelete.Role)
	case r.AuthRoleGet != nil:
		if err := s.CheckAdmin(caller); err != nil && !s.HoldsRole(caller, r.AuthRoleGet.Role) {
			return nil, err
		}
		role := old.roles[r.AuthRoleGet.Role]
		if role == nil {
			return nil, rpctypes.ErrGRPCRoleNotFound
		}
		resp := &pb.AuthRoleGetResponse{Header: hdr}
		if r.AuthRoleGet.Role == RootRole {
			// The root role shows as read-write on everything.
			resp.Perm = []*authpb.Permission{{PermType: authpb.Permission_READWRITE, Key: []byte{}, RangeEnd: []byte{0}}}
		} else {
			for _, p := range role.KeyPermission {
				resp.Perm = append(resp.Perm, proto.Clone(p).(*authpb.Permission))
			}
		}
		return resp, nil
	case r.AuthRoleList != nil:
		return &pb.AuthRoleListResponse{Header: hdr, Roles: sortedKeys(old.roles)}, nil
	case r.AuthRoleGrantPermission != nil:
		return &pb.AuthRoleGrantPermissionResponse{Header: hdr}, s.roleGrant(w, old, r.AuthRoleGrantPermission)
	case r.AuthRoleRevokePermission != nil:
		return &pb.AuthRoleRevokePermissionResponse{Header: hdr}, s.roleRevoke(w, old, r.AuthRoleRevokePermission)
	}
	return nil, status.Error(codes.Unimplemented, "kvd: not an auth request")
}

func (s *Store) enable(w Writer, old *state) error {
	if old.enabled {
		return nil
	}
	root := old.users[RootUser]
	if root == nil {
		return rpctypes.ErrGRPCRootUserNotExist
	}
	if !hasRootRole(root) {
		return rpctypes.ErrGRPCRootRoleNotExist
	}
	st := old.clone()
	st.enabled = true
	// Enabling does not move the revision, as in etcd.
	if err := s.publish(w, old, st, false); err != nil {
		return err
	}
	if s.tokens != nil {
		s.tokens.Enable()
	}
	s.lg.Info("enabled authentication")
	return nil
}

func (s *Store) authenticate(r *pb.InternalAuthenticateRequest, caller Info, index uint64, hdr *pb.ResponseHeader) (proto.Message, error) {
	st := s.cur.Load()
	if !st.enabled {
		return nil, rpctypes.ErrGRPCAuthNotEnabled
	}
	who := Info{User: r.Name, Revision: st.rev}
	if caller.Via != "" && caller.User == r.Name {
		// An authenticator plugin vouched for the user on the member that
		// proposed this: it need not exist here; its roles come along.
		who.Via, who.Roles = caller.Via, caller.Roles
	} else if u := st.users[r.Name]; u == nil || u.Options.GetNoPassword() {
		return nil, rpctypes.ErrGRPCAuthFailed
	}
	if s.tokens == nil {
		return nil, rpctypes.ErrGRPCAuthFailed
	}
	tok, err := s.tokens.Assign(who, r.SimpleToken, index)
	if errors.Is(err, ErrNopTokens) {
		return nil, rpctypes.ErrGRPCAuthFailed
	}
	if err != nil {
		return nil, err
	}
	return &pb.AuthenticateResponse{Header: hdr, Token: tok}, nil
}

func (s *Store) userAdd(w Writer, old *state, r *pb.AuthUserAddRequest) error {
	if r.Name == "" {
		return rpctypes.ErrGRPCUserEmpty
	}
	if len(r.Name) > MaxNameBytes {
		return ErrUserNameTooLong
	}
	if old.users[r.Name] != nil {
		return rpctypes.ErrGRPCUserAlreadyExist
	}
	opts := r.Options
	if opts == nil {
		opts = &authpb.UserAddOptions{}
	}
	u := &authpb.User{Name: []byte(r.Name), Options: proto.Clone(opts).(*authpb.UserAddOptions)}
	if !opts.NoPassword {
		// The API hashed the password (never the applier: bcrypt is slow).
		hash, err := base64.StdEncoding.DecodeString(r.HashedPassword)
		if err != nil {
			return ErrNoPasswordUser
		}
		u.Password = hash
	}
	st := old.clone()
	st.users[r.Name] = u
	s.lg.Info("added a user", zap.String("user-name", r.Name))
	return s.publish(w, old, st, true)
}

func (s *Store) userDelete(w Writer, old *state, name string) error {
	if old.enabled && name == RootUser {
		return rpctypes.ErrGRPCInvalidAuthMgmt
	}
	if old.users[name] == nil {
		return rpctypes.ErrGRPCUserNotFound
	}
	st := old.clone()
	delete(st.users, name)
	if err := s.publish(w, old, st, true); err != nil {
		return err
	}
	if s.tokens != nil {
		s.tokens.InvalidateUser(name)
	}
	s.lg.Info("deleted a user", zap.String("user-name", name))
	return nil
}

func (s *Store) userPassword(w Writer, old *state, r *pb.AuthUserChangePasswordRequest) error {
	u := old.users[r.Name]
	if u == nil {
		return rpctypes.ErrGRPCUserNotFound
	}
	nu := proto.Clone(u).(*authpb.User)
	nu.Password = nil
	if !u.Options.GetNoPassword() {
		hash, err := base64.StdEncoding.DecodeString(r.HashedPassword)
		if err != nil {
			return ErrNoPasswordUser
		}
		nu.Password = hash
	}
	st := old.clone()
	st.users[r.Name] = nu
	if err := s.publish(w, old, st, true); err != nil {
		return err
	}
	if s.tokens != nil {
		s.tokens.InvalidateUser(r.Name)
	}
	s.lg.Info("changed a password of a user", zap.String("user-name", r.Name))
	return nil
}

func (s *Store) userGrant(w Writer, old *state, r *pb.AuthUserGrantRoleRequest) error {
	u := old.users[r.User]
	if u == nil {
		return rpctypes.ErrGRPCUserNotFound
	}
	if r.Role != RootRole && old.roles[r.Role] == nil {
		return rpctypes.ErrGRPCRoleNotFound
	}
	i := sort.SearchStrings(u.Roles, r.Role)
	if i < len(u.Roles) && u.Roles[i] == r.Role {
		// Granting a role twice changes nothing, revision included.
		return nil
	}
	nu := proto.Clone(u).(*authpb.User)
	nu.Roles = slices.Insert(nu.Roles, i, r.Role)
	st := old.clone()
	st.users[r.User] = nu
	s.lg.Info("granted a role to a user", zap.String("user-name", r.User), zap.String("role-name", r.Role))
	return s.publish(w, old, st, true)
}

func (s *Store) userRevoke(w Writer, old *state, r *pb.AuthUserRevokeRoleRequest) error {
	if old.enabled && r.Name == RootUser && r.Role == RootRole {
		return rpctypes.ErrGRPCInvalidAuthMgmt
	}
	u := old.users[r.Name]
	if u == nil {
		return rpctypes.ErrGRPCUserNotFound
	}
	if !slices.Contains(u.Roles, r.Role) {
		return rpctypes.ErrGRPCRoleNotGranted
	}
	nu := proto.Clone(u).(*authpb.User)
	nu.Roles = slices.DeleteFunc(nu.Roles, func(x string) bool { return x == r.Role })
	st := old.clone()
	st.users[r.Name] = nu
	s.lg.Info("revoked a role from a user", zap.String("user-name", r.Name), zap.String("role-name", r.Role))
	return s.publish(w, old, st, true)
}

func (s *Store) roleAdd(w Writer, old *state, name string) error {
	if name == "" {
		return rpctypes.ErrGRPCRoleEmpty
	}
	if len(name) > MaxNameBytes {
		return ErrRoleNameTooLong
	}
	if old.roles[name] != nil {
		return rpctypes.ErrGRPCRoleAlreadyExist
	}
	st := old.clone()
	st.roles[name] = &authpb.Role{Name: []byte(name)}
	s.lg.Info("created a role", zap.String("role-name", name))
	return s.publish(w, old, st, true)
}

func (s *Store) roleDelete(w Writer, old *state, name string) error {
	if old.enabled && name == RootRole {
		return rpctypes.ErrGRPCInvalidAuthMgmt
	}
	if old.roles[name] == nil {
		return rpctypes.ErrGRPCRoleNotFound
	}
	st := old.clone()
	delete(st.roles, name)
	// The role leaves every user that held it.
	for uname, u := range old.users {
		if slices.Contains(u.Roles, name) {
			nu := proto.Clone(u).(*authpb.User)
			nu.Roles = slices.DeleteFunc(nu.Roles, func(x string) bool { return x == name })
			st.users[uname] = nu
		}
	}
	s.lg.Info("deleted a role", zap.String("role-name", name))
	return s.publish(w, old, st, true)
}

func (s *Store) roleGrant(w Writer, old *state, r *pb.AuthRoleGrantPermissionRequest) error {
	if r.Perm == nil {
		return rpctypes.ErrGRPCPermissionNotGiven
	}
	if !validPermRange(r.Perm.Key, r.Perm.RangeEnd) {
		return rpctypes.ErrGRPCInvalidAuthMgmt
	}
	role := old.roles[r.Name]
	if role == nil {
		return rpctypes.ErrGRPCRoleNotFound
	}
	nr := proto.Clone(role).(*authpb.Role)
	// Permissions are kept sorted by key; granting an existing key and
	// range again only updates its type (etcd finds the first one of the
	// key).
	i := sort.Search(len(nr.KeyPermission), func(i int) bool { return bytes.Compare(nr.KeyPermission[i].Key, r.Perm.Key) >= 0 })
	if i < len(nr.KeyPermission) && bytes.Equal(nr.KeyPermission[i].Key, r.Perm.Key) && bytes.Equal(nr.KeyPermission[i].RangeEnd, r.Perm.RangeEnd) {
		nr.KeyPermission[i].PermType = r.Perm.PermType
	} else {
		nr.KeyPermission = append(nr.KeyPermission, &authpb.Permission{Key: r.Perm.Key, RangeEnd: r.Perm.RangeEnd, PermType: r.Perm.PermType})
		sort.Sort(permsByKey(nr.KeyPermission))
	}
	st := old.clone()
	st.roles[r.Name] = nr
	s.lg.Info("granted a permission to a role", zap.String("role-name", r.Name), zap.String("permission", r.Perm.PermType.String()))
	return s.publish(w, old, st, true)
}

// permsByKey is etcd's order (sort.Sort, not stable), so that permissions
// with the same key come out in the same order as etcd's.
type permsByKey []*authpb.Permission

func (p permsByKey) Len() int           { return len(p) }
func (p permsByKey) Less(i, j int) bool { return bytes.Compare(p[i].Key, p[j].Key) < 0 }
func (p permsByKey) Swap(i, j int)      { p[i], p[j] = p[j], p[i] }

func (s *Store) roleRevoke(w Writer, old *state, r *pb.AuthRoleRevokePermissionRequest) error {
	role := old.roles[r.Role]
	if role == nil {
		return rpctypes.ErrGRPCRoleNotFound
	}
	nr := &authpb.Role{Name: role.Name}
	for _, p := range role.KeyPermission {
		if !bytes.Equal(p.Key, r.Key) || !bytes.Equal(p.RangeEnd, r.RangeEnd) {
			nr.KeyPermission = append(nr.KeyPermission, p)
		}
	}
	if len(nr.KeyPermission) == len(role.KeyPermission) {
		return rpctypes.ErrGRPCPermissionNotGranted
	}
	st := old.clone()
	st.roles[r.Role] = nr
	s.lg.Info("revoked a permission from a role", zap.String("role-name", r.Role))
	return s.publish(w, old, st, true)
}
