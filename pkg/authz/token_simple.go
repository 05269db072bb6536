package authz

import (
	"crypto/rand"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

const (
	// simpleTokenLetters and simpleTokenPrefixLen make etcd's prefix: 16
	// letters drawn uniformly with crypto/rand.
	simpleTokenLetters   = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	simpleTokenPrefixLen = 16
	// simpleTokenDefaultTTL is etcd's TTL when --auth-token-ttl is 0.
	simpleTokenDefaultTTL = 300 * time.Second
	// simpleTokenSweepEvery is how often expired tokens are dropped (etcd's
	// simpleTokenTTLResolution).
	simpleTokenSweepEvery = time.Second
)

// SimpleTokenIndex returns the raft index a simple token was assigned at
// (the number after its single "."), ok false when token is not shaped
// like a simple token (a JWT has two dots). Before resolving a simple
// token, etcd waits until its member has applied that index, so that a
// token minted through another member is known here; the API should wait
// the same way before calling Info.
func SimpleTokenIndex(token string) (index uint64, ok bool) {
	_, num, found := strings.Cut(token, ".")
	if !found || strings.Contains(num, ".") {
		return 0, false
	}
	index, err := strconv.ParseUint(num, 10, 64)
	if err != nil {
		return 0, false
	}
	return index, true
}

// simpleToken is a live simple token. Its expiry (Unix nanoseconds) moves
// on every use without the provider's write lock: resolving a token is on
// every authenticated request's path.
type simpleToken struct {
	who     Info // Revision unused: resolved at the store's current one
	expires atomic.Int64
}

func (tok *simpleToken) expired(now time.Time) bool { return now.UnixNano() > tok.expires.Load() }

// simpleTokens is etcd's "simple" provider: random tokens, the same on
// every member because Assign runs as raft applies Authenticate, kept in
// memory and dropped after ttl of disuse. As in etcd, tokens are kept only
// while enabled, and the goroutine that sweeps the expired ones runs only
// while enabled.
type simpleTokens struct {
	lg         *zap.Logger
	ttl        time.Duration
	now        func() time.Time
	sweepEvery time.Duration

	mu      sync.RWMutex
	tokens  map[string]*simpleToken
	sweeper *tokenSweeper // nil while disabled
	closed  bool
}

// tokenSweeper is the running sweep goroutine.
type tokenSweeper struct {
	stop chan struct{}
	done chan struct{}
}

func newSimpleTokens(lg *zap.Logger, ttl time.Duration, now func() time.Time, sweepEvery time.Duration) *simpleTokens {
	if ttl <= 0 {
		ttl = simpleTokenDefaultTTL
	}
	return &simpleTokens{
		lg:         lg,
		ttl:        ttl,
		now:        now,
		sweepEvery: sweepEvery,
		tokens:     make(map[string]*simpleToken),
	}
}

// Prefix draws 16 letters from crypto/rand.
func (t *simpleTokens) Prefix() (string, error) {
	const limit = 256 - 256%len(simpleTokenLetters) // unbiased: refuse bytes >= limit
	out := make([]byte, 0, simpleTokenPrefixLen)
	buf := make([]byte, 2*simpleTokenPrefixLen)
	for len(out) < simpleTokenPrefixLen {
		if _, err := rand.Read(buf); err != nil {
			return "", err
		}
		for _, b := range buf {
			if int(b) < limit && len(out) < simpleTokenPrefixLen {
				out = append(out, simpleTokenLetters[int(b)%len(simpleTokenLetters)])
			}
		}
	}
	return string(out), nil
}

// Assign makes prefix.index user's token. While disabled the token is
// returned but not kept, as in etcd (a disabled store does not
// authenticate, so this does not happen through the API). The same token
// twice means one raft entry was applied twice: etcd panics; Assign
// returns an error and keeps the first assignment.
func (t *simpleTokens) Assign(who Info, prefix string, index uint64) (string, error) {
	token := prefix + "." + strconv.FormatUint(index, 10)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sweeper == nil {
		return token, nil
	}
	if _, dup := t.tokens[token]; dup {
		t.lg.Error("failed to assign already-used simple token to a user",
			zap.String("user-name", who.User), zap.String("token-fingerprint", TokenFingerprint(token)))
		return "", fmt.Errorf("auth: simple token %s (fingerprint) is already assigned", TokenFingerprint(token))
	}
	tok := &simpleToken{who: who}
	tok.expires.Store(t.now().Add(t.ttl).UnixNano())
	t.tokens[token] = tok
	return token, nil
}

// Info resolves a live token and restarts its TTL. Revision is rev: a
// simple token carries none. etcd drops an expired token only at the next
// once-a-second sweep, so it resolves for up to a second past its TTL;
// Info also refuses a token whose TTL has run out but that is not yet swept.
func (t *simpleTokens) Info(token string, rev uint64) (Info, bool) {
	if _, ok := SimpleTokenIndex(token); !ok {
		return Info{}, false
	}
	t.mu.RLock()
	tok, ok := t.tokens[token]
	t.mu.RUnlock()
	if !ok {
		return Info{}, false
	}
	now := t.now()
	if tok.expired(now) {
		// The sweep drops it.
		return Info{}, false
	}
	tok.expires.Store(now.Add(t.ttl).UnixNano())
	who := tok.who
	who.Revision = rev
	return who, true
}

// Enable starts keeping tokens and the sweep goroutine; it does nothing if
// already enabled or closed.
func (t *simpleTokens) Enable() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sweeper != nil || t.closed {
		return
	}
	s := &tokenSweeper{stop: make(chan struct{}), done: make(chan struct{})}
	t.sweeper = s
	go t.sweepLoop(s)
}

// Disable drops every token and ends the sweep goroutine.
func (t *simpleTokens) Disable() {
	t.mu.Lock()
	s := t.sweeper
	t.sweeper = nil
	t.tokens = make(map[string]*simpleToken)
	t.mu.Unlock()
	if s != nil {
		close(s.stop)
		<-s.done // the sweep takes mu: wait outside it
	}
}

// Close disables the provider for good.
func (t *simpleTokens) Close() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.Disable()
}

// InvalidateUser drops user's tokens.
func (t *simpleTokens) InvalidateUser(user string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for token, tok := range t.tokens {
		if tok.who.Via == "" && tok.who.User == user {
			t.dropLocked(token, user)
		}
	}
}

func (t *simpleTokens) sweepLoop(s *tokenSweeper) {
	defer close(s.done)
	tick := time.NewTicker(t.sweepEvery)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			t.sweep()
		case <-s.stop:
			return
		}
	}
}

// sweep drops the tokens whose TTL has run out.
func (t *simpleTokens) sweep() {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	for token, tok := range t.tokens {
		if tok.expired(now) {
			t.dropLocked(token, tok.who.User)
		}
	}
}

// dropLocked forgets token. etcd's debug line here has the token itself;
// this one has only its fingerprint.
func (t *simpleTokens) dropLocked(token, user string) {
	delete(t.tokens, token)
	t.lg.Debug("deleted a simple token",
		zap.String("user-name", user), zap.String("token-fingerprint", TokenFingerprint(token)))
}
