package authz

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// Info is who a request comes from: a user name and the auth revision the
// identity was established at. The API puts both in the request header; the
// applier refuses a request whose revision is older than the store's.
type Info struct {
	User     string
	Revision uint64
	// Via names the authenticator plugin that vouched for a caller kvd's
	// store need not know; such a caller's roles are Roles (the plugin's
	// groups), not a stored user's. Empty for kvd's own users.
	Via   string
	Roles []string
}

// Anonymous tells whether i is no identity: a real one was established at
// an auth revision, and revisions start at 1.
func (i Info) Anonymous() bool { return i.Revision == 0 }

// Tokens mints and resolves the tokens Authenticate hands out: etcd's
// "simple" (random, kept in memory on every member, expiring after a TTL of
// disuse) or "jwt" (signed, self-contained) providers.
//
// Authenticate reaches the state machine through raft, so every member runs
// Assign for every token; a member can then resolve any token a client got
// from any member.
type Tokens interface {
	// Prefix is called at the API before Authenticate is proposed: a fresh
	// random part for a simple token, "" for providers that need none.
	Prefix() (string, error)
	// Assign mints who's token when the Authenticate entry is applied at
	// raft index, at auth revision who.Revision, with the prefix the API
	// chose. The token resolves to who, Via and Roles included.
	Assign(who Info, prefix string, index uint64) (string, error)
	// Info resolves a token. rev is the store's current revision (a simple
	// token carries none, so it is checked at the current one); a JWT
	// carries the revision it was signed at. ok is false for an unknown,
	// expired or malformed token.
	Info(token string, rev uint64) (info Info, ok bool)
	// Enable and Disable follow the store's enabled flag: disabling drops
	// every simple token.
	Enable()
	Disable()
	// InvalidateUser drops the simple tokens of a deleted user or one whose
	// password changed.
	InvalidateUser(user string)
	// Close drops every token and ends the provider's goroutine, if it has
	// one; Enable does nothing afterwards. Close may be called more than
	// once.
	Close()
}

// DefaultTokenTTL is how long a JWT lives when its options name no ttl, as
// in etcd.
const DefaultTokenTTL = 5 * time.Minute

// TokenFingerprint is what may be logged of a token: the first 12 hex
// digits of its SHA-256, as etcd logs it, so the same token has the same
// fingerprint in etcd's logs and kvd's. Never log a token itself.
func TokenFingerprint(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])[:12]
}

// nopTokens is the provider of an empty --auth-token, as etcd's: it mints
// nothing, so Authenticate always fails, and resolves nothing.
type nopTokens struct{}

func (nopTokens) Prefix() (string, error) { return "", nil }
func (nopTokens) Assign(Info, string, uint64) (string, error) {
	return "", ErrNopTokens
}
func (nopTokens) Info(string, uint64) (Info, bool) { return Info{}, false }
func (nopTokens) Enable()                          {}
func (nopTokens) Disable()                         {}
func (nopTokens) InvalidateUser(string)            {}
func (nopTokens) Close()                           {}
