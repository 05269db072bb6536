package authz

import (
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
)

// tokClock is an injectable clock for the token providers.
type tokClock struct {
	mu sync.Mutex
	t  time.Time
}

func newTokClock() *tokClock { return &tokClock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *tokClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *tokClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// newTestSimple is an enabled simple provider on clock c that never sweeps
// by itself (the tests call sweep).
func newTestSimple(t *testing.T, ttl time.Duration, c *tokClock) *simpleTokens {
	t.Helper()
	s := newSimpleTokens(zap.NewNop(), ttl, c.now, time.Hour)
	s.Enable()
	t.Cleanup(s.Close)
	return s
}

func TestSimpleTokenPrefix(t *testing.T) {
	s := newSimpleTokens(zap.NewNop(), 0, time.Now, time.Hour)
	seen := make(map[string]bool)
	for range 200 {
		p, err := s.Prefix()
		if err != nil {
			t.Fatal(err)
		}
		if len(p) != simpleTokenPrefixLen {
			t.Fatalf("prefix %q: len %d, want %d", p, len(p), simpleTokenPrefixLen)
		}
		if strings.Trim(p, simpleTokenLetters) != "" {
			t.Fatalf("prefix %q has a character that is not a letter", p)
		}
		if seen[p] {
			t.Fatalf("prefix %q drawn twice", p)
		}
		seen[p] = true
	}
}

func TestSimpleTokenIndex(t *testing.T) {
	for _, tc := range []struct {
		token string
		index uint64
		ok    bool
	}{
		{"abcdefghijklmnop.42", 42, true},
		{"abcdefghijklmnop.0", 0, true},
		{".7", 7, true}, // etcd checks only the shape
		{"abcdefghijklmnop.18446744073709551615", 1<<64 - 1, true},
		{"abcdefghijklmnop.18446744073709551616", 0, false},
		{"abcdefghijklmnop", 0, false},
		{"abcdefghijklmnop.", 0, false},
		{"abcdefghijklmnop.-1", 0, false},
		{"abcdefghijklmnop.+1", 0, false},
		{"abcdefghijklmnop.0x10", 0, false},
		{"abcdefghijklmnop.1.2", 0, false},
		{"eyJhbGciOiJFZERTQSJ9.eyJ1c2VybmFtZSI6InJvb3QifQ.c2ln", 0, false}, // a JWT
		{"", 0, false},
	} {
		index, ok := SimpleTokenIndex(tc.token)
		if index != tc.index || ok != tc.ok {
			t.Errorf("SimpleTokenIndex(%q) = %d, %v; want %d, %v", tc.token, index, ok, tc.index, tc.ok)
		}
	}
}

func TestSimpleTokenAssignInfo(t *testing.T) {
	c := newTokClock()
	s := newTestSimple(t, time.Minute, c)
	tok, err := s.Assign(Info{User: "alice", Revision: 3}, "abcdefghijklmnop", 42)
	if err != nil {
		t.Fatal(err)
	}
	if tok != "abcdefghijklmnop.42" {
		t.Fatalf("Assign = %q, want prefix.index", tok)
	}
	// Revision is the store's current one, not the one at Assign.
	if info, ok := s.Info(tok, 9); !ok || !reflect.DeepEqual(info, Info{User: "alice", Revision: 9}) {
		t.Fatalf("Info = %+v, %v; want alice at 9", info, ok)
	}
	for _, bad := range []string{"", "abcdefghijklmnop", "abcdefghijklmnop.43", "bbcdefghijklmnop.42",
		"abcdefghijklmnop.42.1", "abcdefghijklmnop.x", " abcdefghijklmnop.42"} {
		if info, ok := s.Info(bad, 9); ok {
			t.Errorf("Info(%q) = %+v, resolves", bad, info)
		}
	}
	// The same token twice (one raft entry applied twice) is refused and
	// the first assignment kept.
	if _, err := s.Assign(Info{User: "bob", Revision: 3}, "abcdefghijklmnop", 42); err == nil {
		t.Fatal("a token assigned twice: no error")
	}
	if info, ok := s.Info(tok, 9); !ok || info.User != "alice" {
		t.Fatalf("after a refused reassignment Info = %+v, %v; want alice", info, ok)
	}
}

func TestSimpleTokenExpiryAndRenewal(t *testing.T) {
	const ttl = 10 * time.Second
	for _, tc := range []struct {
		name  string
		steps []time.Duration // clock advances, each followed by Info
		ok    []bool
	}{
		{"used within the TTL", []time.Duration{ttl - time.Second}, []bool{true}},
		{"exactly at the TTL", []time.Duration{ttl}, []bool{true}},
		{"past the TTL", []time.Duration{ttl + time.Nanosecond}, []bool{false}},
		{"each use renews", []time.Duration{9 * time.Second, 9 * time.Second, 9 * time.Second}, []bool{true, true, true}},
		{"expired stays expired", []time.Duration{ttl + time.Second, 0}, []bool{false, false}},
		{"renewed then idle", []time.Duration{9 * time.Second, ttl + time.Second}, []bool{true, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTokClock()
			s := newTestSimple(t, ttl, c)
			tok, err := s.Assign(Info{User: "alice", Revision: 1}, "abcdefghijklmnop", 1)
			if err != nil {
				t.Fatal(err)
			}
			for i, d := range tc.steps {
				c.add(d)
				if _, ok := s.Info(tok, 1); ok != tc.ok[i] {
					t.Fatalf("step %d (+%v): Info ok = %v, want %v", i, d, ok, tc.ok[i])
				}
			}
		})
	}
}

func TestSimpleTokenSweep(t *testing.T) {
	c := newTokClock()
	s := newTestSimple(t, 10*time.Second, c)
	idle, _ := s.Assign(Info{User: "alice", Revision: 1}, "aaaaaaaaaaaaaaaa", 1)
	used, _ := s.Assign(Info{User: "bob", Revision: 1}, "bbbbbbbbbbbbbbbb", 2)
	c.add(6 * time.Second)
	s.Info(used, 1)
	c.add(6 * time.Second)
	s.sweep()
	s.mu.Lock()
	_, idleKept := s.tokens[idle]
	_, usedKept := s.tokens[used]
	s.mu.Unlock()
	if idleKept || !usedKept {
		t.Fatalf("after the sweep: idle token kept %v (want false), used token kept %v (want true)", idleKept, usedKept)
	}
}

// TestSimpleTokenSweepGoroutine: the goroutine sweeps by itself.
func TestSimpleTokenSweepGoroutine(t *testing.T) {
	c := newTokClock()
	s := newSimpleTokens(zap.NewNop(), time.Second, c.now, time.Millisecond)
	s.Enable()
	defer s.Close()
	if _, err := s.Assign(Info{User: "alice", Revision: 1}, "abcdefghijklmnop", 1); err != nil {
		t.Fatal(err)
	}
	c.add(2 * time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		n := len(s.tokens)
		s.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the expired token was not swept")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestSimpleTokenDefaultTTL(t *testing.T) {
	c := newTokClock()
	s := newTestSimple(t, 0, c)
	tok, _ := s.Assign(Info{User: "alice", Revision: 1}, "abcdefghijklmnop", 1)
	c.add(simpleTokenDefaultTTL)
	if _, ok := s.Info(tok, 1); !ok {
		t.Fatal("refused within etcd's default 300 s")
	}
	c.add(simpleTokenDefaultTTL + time.Second)
	if _, ok := s.Info(tok, 1); ok {
		t.Fatal("resolves past etcd's default 300 s")
	}
}

func TestSimpleTokenInvalidateUser(t *testing.T) {
	c := newTokClock()
	s := newTestSimple(t, time.Minute, c)
	a1, _ := s.Assign(Info{User: "alice", Revision: 1}, "aaaaaaaaaaaaaaaa", 1)
	a2, _ := s.Assign(Info{User: "alice", Revision: 1}, "aaaaaaaaaaaaaaab", 2)
	b, _ := s.Assign(Info{User: "bob", Revision: 1}, "bbbbbbbbbbbbbbbb", 3)
	s.InvalidateUser("alice")
	s.InvalidateUser("nobody")
	for _, tc := range []struct {
		token string
		ok    bool
	}{{a1, false}, {a2, false}, {b, true}} {
		if _, ok := s.Info(tc.token, 1); ok != tc.ok {
			t.Errorf("Info(%s) ok = %v, want %v", tc.token, ok, tc.ok)
		}
	}
}

func TestSimpleTokenDisable(t *testing.T) {
	c := newTokClock()
	s := newTestSimple(t, time.Minute, c)
	tok, _ := s.Assign(Info{User: "alice", Revision: 1}, "abcdefghijklmnop", 1)
	s.Disable()
	if _, ok := s.Info(tok, 1); ok {
		t.Fatal("a token resolves after Disable")
	}
	// While disabled a token is minted, as in etcd, but not kept.
	off, err := s.Assign(Info{User: "bob", Revision: 1}, "bbbbbbbbbbbbbbbb", 2)
	if err != nil || off != "bbbbbbbbbbbbbbbb.2" {
		t.Fatalf("Assign while disabled = %q, %v", off, err)
	}
	s.InvalidateUser("bob")
	s.Enable()
	for _, old := range []string{tok, off} {
		if _, ok := s.Info(old, 1); ok {
			t.Errorf("%s resolves after Disable and Enable", old)
		}
	}
	tok2, _ := s.Assign(Info{User: "alice", Revision: 1}, "abcdefghijklmnop", 3)
	if _, ok := s.Info(tok2, 1); !ok {
		t.Fatal("a token assigned after re-enabling does not resolve")
	}
}

// TestSimpleTokenGoroutine: the sweep goroutine runs only while enabled
// and Close ends it for good.
func TestSimpleTokenGoroutine(t *testing.T) {
	before := goleak.IgnoreCurrent()
	tk := newSimpleTokens(zap.NewNop(), time.Minute, time.Now, time.Second)
	running := func() int {
		buf := make([]byte, 1<<20)
		return strings.Count(string(buf[:runtime.Stack(buf, true)]), "(*simpleTokens).sweepLoop")
	}
	if n := running(); n != 0 {
		t.Fatalf("%d goroutines before Enable", n)
	}
	tk.Enable()
	tk.Enable()
	// A new goroutine shows in the stacks once it has started.
	for deadline := time.Now().Add(5 * time.Second); running() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if n := running(); n != 1 {
		t.Fatalf("%d goroutines after Enable twice, want 1", n)
	}
	tk.Disable()
	goleak.VerifyNone(t, before)
	tk.Enable()
	tk.Close()
	goleak.VerifyNone(t, before)
	tk.Close()
	tk.Enable() // after Close: nothing starts
	goleak.VerifyNone(t, before)
	if tok, err := tk.Assign(Info{User: "alice", Revision: 1}, "abcdefghijklmnop", 1); err != nil {
		t.Fatal(err)
	} else if _, ok := tk.Info(tok, 1); ok {
		t.Fatal("a token resolves after Close")
	}
}

// TestSimpleTokenConcurrent is for -race.
func TestSimpleTokenConcurrent(t *testing.T) {
	s := newSimpleTokens(zap.NewNop(), time.Minute, time.Now, time.Millisecond)
	s.Enable()
	defer s.Close()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			user := fmt.Sprint("user", g)
			for i := range 200 {
				tok, err := s.Assign(Info{User: user, Revision: 1}, fmt.Sprintf("prefix%010d", g), uint64(i))
				if err != nil {
					t.Error(err)
					return
				}
				s.Info(tok, 1)
				if i%50 == 0 {
					s.InvalidateUser(user)
				}
				if g == 0 && i%70 == 0 {
					s.Disable()
					s.Enable()
				}
			}
		})
	}
	wg.Wait()
}
