// Package authz is kvd's auth: the replicated store of users, roles and
// key-range permissions (applied from raft entries on every member), the
// checks the applier makes against it, and the tokens that say who a caller
// is. The API asks it who is calling (Identify); the applier and the read
// path ask it whether they may (Check*).
package authz

import (
	"encoding/binary"
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"go.etcd.io/etcd/api/v3/authpb"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
)

// The root user and role, as in etcd: auth can only be enabled when user
// root exists and holds role root, which may do everything.
const (
	RootUser = "root"
	RootRole = "root"
)

// Backend record keys in bucket "auth" (etcd keeps the same records in
// its buckets auth, authUsers and authRoles). Users and roles are authpb
// messages, the enabled flag one byte (1 or 0), the revision 8 bytes
// big-endian.
const (
	KeyEnabled    = "enabled"
	KeyRevision   = "revision"
	UserKeyPrefix = "user/"
	RoleKeyPrefix = "role/"
)

// Writer stages the store's records in the batch being applied, so they are
// committed with the consistent index of the entry that changed them.
type Writer interface {
	PutAuth(key string, value []byte)
	DeleteAuth(key string)
}

// state is one immutable version of the auth store. The applier builds a new
// one for every change and publishes it; readers load it without locks.
type state struct {
	enabled bool
	rev     uint64
	users   map[string]*authpb.User
	roles   map[string]*authpb.Role
	// perms caches each user's merged permissions for this version; it is
	// built on first use and dropped with the version.
	perms sync.Map // string -> *userPerms
}

func (st *state) userPerms(name string) *userPerms {
	if p, ok := st.perms.Load(name); ok {
		return p.(*userPerms)
	}
	u := st.users[name]
	if u == nil {
		return nil
	}
	p, _ := st.perms.LoadOrStore(name, buildPerms(u, st.roles))
	return p.(*userPerms)
}

func (st *state) clone() *state {
	return &state{enabled: st.enabled, rev: st.rev, users: maps.Clone(st.users), roles: maps.Clone(st.roles)}
}

// Store is one member's auth state. Only the applier changes it (the Apply*
// methods, from committed entries); everything else reads.
type Store struct {
	cur    atomic.Pointer[state]
	tokens Tokens
	lg     *zap.Logger
	// external resolves tokens of authenticator plugins; nil without any.
	external ExternalTokens
}

// New returns an empty store (auth disabled, revision 1, as a fresh etcd).
// tokens may be nil in tests that never authenticate.
func New(tokens Tokens, lg *zap.Logger) *Store {
	if lg == nil {
		lg = zap.NewNop()
	}
	s := &Store{tokens: tokens, lg: lg}
	s.cur.Store(&state{rev: 1, users: map[string]*authpb.User{}, roles: map[string]*authpb.Role{}})
	return s
}

// Load replaces the state with the records read from the backend (start-up,
// snapshot install). each calls fn for every record of bucket "auth".
func (s *Store) Load(each func(fn func(key string, value []byte) error) error) error {
	st := &state{rev: 1, users: map[string]*authpb.User{}, roles: map[string]*authpb.Role{}}
	err := each(func(key string, value []byte) error {
		switch {
		case key == KeyEnabled:
			st.enabled = len(value) == 1 && value[0] == 1
		case key == KeyRevision:
			if len(value) != 8 {
				return fmt.Errorf("auth revision record of %d bytes", len(value))
			}
			st.rev = binary.BigEndian.Uint64(value)
		case strings.HasPrefix(key, UserKeyPrefix):
			u := &authpb.User{}
			if err := proto.Unmarshal(value, u); err != nil {
				return fmt.Errorf("auth user record %q: %w", key, err)
			}
			st.users[string(u.Name)] = u
		case strings.HasPrefix(key, RoleKeyPrefix):
			r := &authpb.Role{}
			if err := proto.Unmarshal(value, r); err != nil {
				return fmt.Errorf("auth role record %q: %w", key, err)
			}
			st.roles[string(r.Name)] = r
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("load auth store: %w", err)
	}
	s.cur.Store(st)
	if s.tokens != nil {
		if st.enabled {
			s.tokens.Enable()
		} else {
			s.tokens.Disable()
		}
	}
	return nil
}

// Enabled tells whether auth is on.
func (s *Store) Enabled() bool { return s.cur.Load().enabled }

// Revision is the auth revision: it moves with every change to users, roles
// or the enabled flag.
func (s *Store) Revision() uint64 { return s.cur.Load().rev }

// Tokens is the token provider.
func (s *Store) Tokens() Tokens { return s.tokens }

// SimpleTokens tells whether tokens are etcd's simple ones, which a member
// knows only once the Authenticate entry that minted them is applied.
func (s *Store) SimpleTokens() bool {
	_, ok := s.tokens.(*simpleTokens)
	return ok
}

// User returns a copy of a user record, or nil.
func (s *Store) User(name string) *authpb.User {
	u := s.cur.Load().users[name]
	if u == nil {
		return nil
	}
	return proto.Clone(u).(*authpb.User)
}

// HoldsRole tells whether who (a stored user or a plugin-vouched caller)
// holds role.
func (s *Store) HoldsRole(who Info, role string) bool { return s.cur.Load().holdsRole(who, role) }

// UserNames and RoleNames are sorted, as etcd lists them.
func (s *Store) UserNames() []string { return sortedKeys(s.cur.Load().users) }
func (s *Store) RoleNames() []string { return sortedKeys(s.cur.Load().roles) }

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func hasRootRole(u *authpb.User) bool {
	i := sort.SearchStrings(u.Roles, RootRole)
	return i < len(u.Roles) && u.Roles[i] == RootRole
}

// publish makes st current and stages what changed against the previous
// version in w, with the new revision when bump is set.
func (s *Store) publish(w Writer, old, st *state, bump bool) error {
	if bump {
		st.rev = old.rev + 1
		w.PutAuth(KeyRevision, binary.BigEndian.AppendUint64(nil, st.rev))
	}
	if st.enabled != old.enabled {
		v := byte(0)
		if st.enabled {
			v = 1
		}
		w.PutAuth(KeyEnabled, []byte{v})
	}
	for name, u := range st.users {
		if old.users[name] != u {
			b, err := proto.Marshal(u)
			if err != nil {
				return err
			}
			w.PutAuth(UserKeyPrefix+name, b)
		}
	}
	for name := range old.users {
		if _, ok := st.users[name]; !ok {
			w.DeleteAuth(UserKeyPrefix + name)
		}
	}
	for name, r := range st.roles {
		if old.roles[name] != r {
			b, err := proto.Marshal(r)
			if err != nil {
				return err
			}
			w.PutAuth(RoleKeyPrefix+name, b)
		}
	}
	for name := range old.roles {
		if _, ok := st.roles[name]; !ok {
			w.DeleteAuth(RoleKeyPrefix + name)
		}
	}
	s.cur.Store(st)
	return nil
}
