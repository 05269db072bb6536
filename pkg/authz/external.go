package authz

import (
	"context"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/encoding/protowire"

	"go.etcd.io/etcd/api/v3/authpb"
)

// ExternalTokens resolves a token kvd did not mint (an identity provider's,
// say) through the authenticator plugins: the identity's User, Via and
// Roles, ok false when no plugin claims it, or the error the caller gets.
type ExternalTokens func(ctx context.Context, token string) (who Info, ok bool, err error)

// SetExternalTokens makes Identify ask fn about tokens the store's own
// provider does not know. Call it before serving.
func (s *Store) SetExternalTokens(fn ExternalTokens) {
	s.external = fn
	if q, ok := s.tokens.(interface{ expectForeign() }); ok {
		q.expectForeign()
	}
}

// The raft entry carries a plugin-vouched caller in two fields of its
// RequestHeader that etcd's message does not have (kvd's extension, kept as
// unknown fields by the protobuf runtime): who vouched, and the roles.
const (
	headerFieldVia   protowire.Number = 1000
	headerFieldRoles protowire.Number = 1001
)

// StampHeader records who in h: etcd's username and auth revision, and for
// a plugin-vouched caller kvd's two extension fields.
func StampHeader(h *pb.RequestHeader, who Info) {
	h.Username, h.AuthRevision = who.User, who.Revision
	if who.Via == "" {
		return
	}
	var b []byte
	b = protowire.AppendTag(b, headerFieldVia, protowire.BytesType)
	b = protowire.AppendString(b, who.Via)
	for _, r := range who.Roles {
		b = protowire.AppendTag(b, headerFieldRoles, protowire.BytesType)
		b = protowire.AppendString(b, r)
	}
	h.ProtoReflect().SetUnknown(b)
}

// CallerOf is who an applied entry's header says the caller is.
func CallerOf(h *pb.RequestHeader) Info {
	who := Info{User: h.GetUsername(), Revision: h.GetAuthRevision()}
	if h == nil {
		return who
	}
	b := h.ProtoReflect().GetUnknown()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return Info{User: who.User, Revision: who.Revision, Via: "?"} // unreadable: no roles
		}
		b = b[n:]
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return Info{User: who.User, Revision: who.Revision, Via: "?"}
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeString(b)
		if n < 0 {
			return Info{User: who.User, Revision: who.Revision, Via: "?"}
		}
		b = b[n:]
		switch num {
		case headerFieldVia:
			who.Via = v
		case headerFieldRoles:
			who.Roles = append(who.Roles, v)
		}
	}
	return who
}

// permsOf is the merged permissions of who: a stored user's, or for a
// plugin-vouched caller those of its roles that exist (nil for a caller
// without a user).
func (st *state) permsOf(who Info) *userPerms {
	if who.Via == "" {
		return st.userPerms(who.User)
	}
	if who.User == "" {
		return nil
	}
	key := "\x00via\x00" + string(protowire.AppendString(nil, who.User))
	for _, r := range who.Roles {
		key += string(protowire.AppendString(nil, r))
	}
	if p, ok := st.perms.Load(key); ok {
		return p.(*userPerms)
	}
	roles := slices.Clone(who.Roles)
	slices.Sort(roles)
	u := &authpb.User{Name: []byte(who.User), Roles: slices.Compact(roles)}
	p, _ := st.perms.LoadOrStore(key, buildPerms(u, st.roles))
	return p.(*userPerms)
}

// holdsRole tells whether who holds role.
func (st *state) holdsRole(who Info, role string) bool {
	if who.Via != "" {
		return slices.Contains(who.Roles, role)
	}
	u := st.users[who.User]
	return u != nil && slices.Contains(u.Roles, role)
}

// RolesOf is who's roles: a stored user's, or a plugin-vouched caller's.
func (s *Store) RolesOf(who Info) []string {
	if who.Via != "" {
		return who.Roles
	}
	if u := s.cur.Load().users[who.User]; u != nil {
		return u.Roles
	}
	return nil
}
