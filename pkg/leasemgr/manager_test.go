package leasemgr

import (
	"context"
	"encoding/hex"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func newTestManager(cfg Config) (*Manager, *clock) {
	c := &clock{now: time.Unix(1000, 0)}
	cfg.Now = c.Now
	return New(cfg), c
}

func TestMinTTL(t *testing.T) {
	// etcd's defaults: 100 ms heartbeat, 1 s election (10 ticks): 1.5 s -> 2 s.
	if got := MinTTL(100*time.Millisecond, 10); got != 2 {
		t.Fatalf("MinTTL(100ms, 10) = %d, want 2", got)
	}
	if got := MinTTL(time.Second, 4); got != 6 {
		t.Fatalf("MinTTL(1s, 4) = %d, want 6", got)
	}
}

func TestGrant(t *testing.T) {
	m, _ := newTestManager(Config{MinTTL: 5})
	for _, tc := range []struct {
		id, ttl int64
		want    int64
		err     error
	}{
		{1, 10, 10, nil},
		{2, 1, 5, nil},
		{-3, 0, 5, nil},
		{1, 10, 0, ErrExists},
		{0, 10, 0, ErrNotFound},
		{4, MaxTTL + 1, 0, ErrTTLTooLarge},
		{5, MaxTTL, MaxTTL, nil},
	} {
		r, err := m.Grant(tc.id, tc.ttl)
		if !errors.Is(err, tc.err) || err == nil && (r.TTL != tc.want || r.ID != tc.id) {
			t.Errorf("Grant(%d, %d) = %+v, %v; want TTL %d, %v", tc.id, tc.ttl, r, err, tc.want, tc.err)
		}
	}
	if got, want := m.Len(), 4; got != want {
		t.Fatalf("Len = %d, want %d", got, want)
	}
	if !m.Exists(-3) || m.Exists(4) {
		t.Fatal("Exists disagrees with the grants")
	}
}

// Records are etcd's leasepb.Lease bytes (golden values from
// proto.Marshal(&leasepb.Lease{...}) in etcd v3.7.3).
func TestRecordEncoding(t *testing.T) {
	for _, tc := range []struct {
		r      Record
		golden string
	}{
		{Record{ID: 1, TTL: 600}, "080110d804"},
		{Record{ID: -3, TTL: 9000000000, RemainingTTL: 120}, "08fdffffffffffffffff011080b4c4c3211878"},
	} {
		b := tc.r.Marshal()
		if got := hex.EncodeToString(b); got != tc.golden {
			t.Errorf("Marshal(%+v) = %s, want %s", tc.r, got, tc.golden)
		}
		got, err := UnmarshalRecord(tc.r.ID, b)
		if err != nil || got != tc.r {
			t.Errorf("round trip: %+v, %v; want %+v", got, err, tc.r)
		}
	}
	for _, bad := range []string{"08", "0802", "ff"} {
		b, _ := hex.DecodeString(bad)
		if r, err := UnmarshalRecord(1, b); err == nil {
			t.Errorf("UnmarshalRecord(%s) = %+v, want an error", bad, r)
		}
	}
}

func put(key string, lease int64) *mvccpb.Event {
	return &mvccpb.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte(key), Lease: lease}}
}

func del(key string) *mvccpb.Event {
	return &mvccpb.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte(key)}}
}

func keysOf(t *testing.T, m *Manager, id int64) []string {
	t.Helper()
	st, err := m.TimeToLive(id, true)
	if err != nil {
		t.Fatal(err)
	}
	return st.Keys
}

func TestAttachAndRevoke(t *testing.T) {
	m, _ := newTestManager(Config{})
	m.Grant(1, 10)
	m.Grant(2, 10)
	m.Attach([]*mvccpb.Event{put("c", 1), put("a", 1), put("b", 1), put("x", 0), put("y", 99)})
	m.Attach([]*mvccpb.Event{put("b", 2)}) // moves b
	m.Attach([]*mvccpb.Event{put("c", 0)}) // detaches c
	m.Attach([]*mvccpb.Event{put("d", 2), del("d"), put("e", 2)})
	if got := keysOf(t, m, 1); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("lease 1 keys %v, want [a]", got)
	}
	if got := keysOf(t, m, 2); !slices.Equal(got, []string{"b", "e"}) {
		t.Fatalf("lease 2 keys %v, want [b e]", got)
	}
	if m.LeaseOf([]byte("y")) != 0 || m.LeaseOf([]byte("b")) != 2 {
		t.Fatal("LeaseOf disagrees with the attachments")
	}
	keys, err := m.Revoke(2)
	if err != nil || !slices.Equal(keys, []string{"b", "e"}) {
		t.Fatalf("Revoke(2) = %v, %v", keys, err)
	}
	if m.LeaseOf([]byte("b")) != 0 || m.Exists(2) {
		t.Fatal("revoked lease still holds its keys")
	}
	if _, err := m.Revoke(2); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second Revoke: %v", err)
	}
	// A key of a revoked lease that is put again without a lease is plain.
	m.Attach([]*mvccpb.Event{put("b", 1)})
	if got := keysOf(t, m, 1); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("lease 1 keys %v, want [a b]", got)
	}
}

func TestRenewAndExpiry(t *testing.T) {
	m, c := newTestManager(Config{MinTTL: 2, RetryInterval: 3 * time.Second})
	ctx := context.Background()
	m.Grant(1, 10)
	if _, err := m.Renew(ctx, 1); !errors.Is(err, ErrNotPrimary) {
		t.Fatalf("Renew before promotion: %v", err)
	}
	if st, _ := m.TimeToLive(1, false); st.TTL < MaxTTL {
		t.Fatalf("TTL before promotion %d: want no expiry", st.TTL)
	}
	m.Promote(time.Second)
	if st, _ := m.TimeToLive(1, false); st.TTL != 11 || st.GrantedTTL != 10 {
		t.Fatalf("after promotion with 1s extension: %+v, want TTL 11 of 10", st)
	}
	m.Grant(2, 5)
	c.advance(4 * time.Second)
	if ttl, err := m.Renew(ctx, 2); err != nil || ttl != 5 {
		t.Fatalf("Renew(2) = %d, %v", ttl, err)
	}
	if _, err := m.Renew(ctx, 3); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Renew of a missing lease: %v", err)
	}
	if got := m.Expired(10); len(got) != 0 {
		t.Fatalf("expired too early: %v", got)
	}
	c.advance(5 * time.Second) // t+9: 2 expired at t+9, 1 at t+11
	if got := m.Expired(10); !slices.Equal(got, []int64{2}) {
		t.Fatalf("Expired at t+9 = %v, want [2]", got)
	}
	if got := m.Expired(10); len(got) != 0 {
		t.Fatalf("handed out again before the retry interval: %v", got)
	}
	c.advance(2 * time.Second)
	if got := m.Expired(10); !slices.Equal(got, []int64{1}) {
		t.Fatalf("Expired at t+11 = %v, want [1]", got)
	}
	c.advance(time.Second)
	if got := m.Expired(10); !slices.Equal(got, []int64{2}) {
		t.Fatalf("retry at t+12 = %v, want [2]", got)
	}

	// An expired lease cannot be renewed: Renew waits for the revocation.
	done := make(chan error, 1)
	go func() {
		_, err := m.Renew(ctx, 1)
		done <- err
	}()
	if _, err := m.Revoke(1); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrNotFound) {
		t.Fatalf("Renew of an expired lease, then revoked: %v", err)
	}
	go func() {
		_, err := m.Renew(ctx, 2)
		done <- err
	}()
	m.Demote()
	if err := <-done; !errors.Is(err, ErrNotPrimary) {
		t.Fatalf("Renew of an expired lease, then demoted: %v", err)
	}
	if got := m.Expired(10); len(got) != 0 {
		t.Fatalf("demoted manager hands out %v", got)
	}
}

func TestExpiredRespectsLimit(t *testing.T) {
	m, c := newTestManager(Config{RevokeRate: 10_000})
	m.Promote(0)
	for id := int64(1); id <= 50; id++ {
		m.Grant(id, 5)
	}
	c.advance(6 * time.Second)
	var all []int64
	for range 5 {
		got := m.Expired(10)
		if len(got) != 10 {
			t.Fatalf("Expired(10) returned %d leases", len(got))
		}
		all = append(all, got...)
	}
	slices.Sort(all)
	if len(slices.Compact(all)) != 50 {
		t.Fatalf("50 expired leases not each handed out once: %v", all)
	}
}

// Promotion with many leases due together spreads them so no second holds
// more than 3/4 of the revoke rate.
func TestPromoteSpreadsPileUp(t *testing.T) {
	const rate = 100
	m, c := newTestManager(Config{RevokeRate: rate})
	for id := int64(1); id <= 1000; id++ {
		m.Grant(id, 10)
	}
	m.Promote(0)
	start := c.Now()
	perSecond := map[int64]int{}
	for _, id := range m.Leases() {
		st, _ := m.TimeToLive(id, false)
		if st.TTL < 10 {
			t.Fatalf("lease %d expires in %ds, before its TTL", id, st.TTL)
		}
		perSecond[st.TTL]++
	}
	for s, n := range perSecond {
		if n > rate*3/4+1 {
			t.Fatalf("%d leases expire in second %d after promotion at %v", n, s, start)
		}
	}
}

func TestRestoreAndPromote(t *testing.T) {
	m, _ := newTestManager(Config{MinTTL: 3})
	m.Restore(Record{ID: 1, TTL: 1})
	m.Restore(Record{ID: 2, TTL: 100, RemainingTTL: 7})
	m.Promote(0)
	for _, tc := range []struct{ id, ttl, granted int64 }{{1, 3, 3}, {2, 7, 100}} {
		st, err := m.TimeToLive(tc.id, false)
		if err != nil || st.TTL != tc.ttl || st.GrantedTTL != tc.granted {
			t.Errorf("lease %d after restore: %+v, %v; want TTL %d of %d", tc.id, st, err, tc.ttl, tc.granted)
		}
	}
	if _, err := m.Renew(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	if st, _ := m.TimeToLive(2, false); st.TTL != 100 {
		t.Fatalf("renewal keeps the checkpointed TTL: %d", st.TTL)
	}
}

func TestLeasesSoonestFirst(t *testing.T) {
	m, _ := newTestManager(Config{})
	m.Promote(0)
	m.Grant(3, 30)
	m.Grant(1, 50)
	m.Grant(2, 10)
	if got := m.Leases(); !slices.Equal(got, []int64{2, 3, 1}) {
		t.Fatalf("Leases = %v", got)
	}
}

func TestExpirerPromotesAndRevokes(t *testing.T) {
	m, c := newTestManager(Config{RevokeRate: 20})
	leader := false
	var revoked []int64
	e := NewExpirer(ExpirerConfig{
		Manager:  m,
		IsLeader: func() bool { return leader },
		Extend:   time.Second,
		Revoke: func(_ context.Context, id int64) error {
			revoked = append(revoked, id)
			return nil
		},
		Tick: 100 * time.Millisecond,
	})
	ctx := context.Background()
	for id := int64(1); id <= 5; id++ {
		m.Grant(id, 1)
	}
	e.step(ctx, 2)
	if m.Primary() {
		t.Fatal("promoted while not leader")
	}
	leader = true
	e.step(ctx, 2)
	if !m.Primary() || len(revoked) != 0 {
		t.Fatalf("after leadership: primary %v, revoked %v", m.Primary(), revoked)
	}
	c.advance(2 * time.Second)
	e.step(ctx, 2)
	if len(revoked) != 2 {
		t.Fatalf("revoked %v in one step with a limit of 2", revoked)
	}
	e.step(ctx, 2)
	e.step(ctx, 2)
	slices.Sort(revoked)
	if !slices.Equal(revoked, []int64{1, 2, 3, 4, 5}) {
		t.Fatalf("revoked %v", revoked)
	}
	leader = false
	e.step(ctx, 2)
	if m.Primary() {
		t.Fatal("still primary after losing leadership")
	}
}
