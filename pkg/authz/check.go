package authz

import (
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.uber.org/zap"
)

// CheckAdmin allows callers with the root role, and everyone while auth is
// disabled.
func (s *Store) CheckAdmin(who Info) error {
	st := s.cur.Load()
	if !st.enabled {
		return nil
	}
	if who.User == "" {
		return rpctypes.ErrGRPCUserEmpty
	}
	if who.Via != "" {
		// A plugin-vouched caller is root when its roles say so.
		if !st.holdsRole(who, RootRole) {
			return rpctypes.ErrGRPCPermissionDenied
		}
		return nil
	}
	u := st.users[who.User]
	if u == nil {
		return rpctypes.ErrGRPCUserNotFound
	}
	if !hasRootRole(u) {
		return rpctypes.ErrGRPCPermissionDenied
	}
	return nil
}

// CheckRead allows reading [key, rangeEnd) (key alone when rangeEnd is
// empty, from key on when it is "\x00").
func (s *Store) CheckRead(who Info, key, rangeEnd []byte) error {
	return s.check(who, key, rangeEnd, false)
}

// CheckWrite allows putting or deleting [key, rangeEnd).
func (s *Store) CheckWrite(who Info, key, rangeEnd []byte) error {
	return s.check(who, key, rangeEnd, true)
}

// check is etcd's isOpPermitted: a caller without a user gets "user name is
// empty"; one whose identity was established at an older auth revision
// than the store's must authenticate again.
func (s *Store) check(who Info, key, rangeEnd []byte, write bool) error {
	st := s.cur.Load()
	if !st.enabled {
		return nil
	}
	if who.Revision == 0 {
		return rpctypes.ErrGRPCUserEmpty
	}
	if who.Revision < st.rev {
		return rpctypes.ErrGRPCAuthOldRevision
	}
	p := st.permsOf(who)
	if p == nil {
		s.lg.Warn("permission check for a user that does not exist", zap.String("user-name", who.User))
		return rpctypes.ErrGRPCPermissionDenied
	}
	if p.root || p.allowed(key, rangeEnd, write) {
		return nil
	}
	return rpctypes.ErrGRPCPermissionDenied
}

// IsAdmin tells whether who may do everything (auth disabled, or the root
// role): the lease checks skip per-key checks for them.
func (s *Store) IsAdmin(who Info) bool { return s.CheckAdmin(who) == nil }
