// Package leasemgr keeps kvd's leases: which exist, with what TTL, which keys
// each holds, and, on the leader (the primary), when each expires. The
// applier changes leases (Grant, Revoke, Attach) while applying raft entries;
// the API renews them and reads them; the Expirer actor finds expired leases
// and proposes their revocation through raft.
//
// Semantics follow etcd v3.7's lessor: TTLs below the minimum are raised to
// it, a lease has no expiry until its member is promoted (leader), promotion
// extends every lease and spreads pile-ups so no more than 3/4 of the revoke
// rate expire in a second, and an expired lease cannot be renewed.
package leasemgr

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/encoding/protowire"
)

// MaxTTL is the largest TTL a lease may be granted with (etcd's).
const MaxTTL = 9000000000

// Errors; the API maps them to etcd's wire errors.
var (
	ErrNotFound    = errors.New("lease not found")
	ErrExists      = errors.New("lease already exists")
	ErrTTLTooLarge = errors.New("too large lease TTL")
	// ErrNotPrimary: expiries are kept only on the primary (the leader).
	ErrNotPrimary = errors.New("not a primary lessor")
)

// Defaults of Config.
const (
	DefaultRevokeRate    = 1000
	DefaultRetryInterval = 3 * time.Second
)

// Config tunes a Manager.
type Config struct {
	// MinTTL, in seconds: shorter TTLs are raised to it (etcd derives it
	// from the election timeout, see MinTTL).
	MinTTL int64
	// RevokeRate bounds how many leases expire per second. Default 1000.
	RevokeRate int
	// RetryInterval is how long an expired lease handed out by Expired
	// waits before it is handed out again, if its revocation has not been
	// applied by then. Default 3 s.
	RetryInterval time.Duration
	// Now is the clock; nil: time.Now.
	Now func() time.Time
	// OnGrant, if set, gets the TTL in seconds of each lease Grant adds,
	// raised to MinTTL (etcd_debugging_lease_ttl_total, which etcd
	// observes on every member's grant). Called with the manager locked:
	// it must not call the manager.
	OnGrant func(ttl int64)
}

// MinTTL is etcd's minimum lease TTL for a raft tick interval and an election
// timeout in ticks: 1.5 election timeouts, rounded up to whole seconds, so a
// lease outlives a leader election.
func MinTTL(heartbeat time.Duration, electionTicks int) int64 {
	d := time.Duration((3*electionTicks)/2) * heartbeat
	return int64(math.Ceil(d.Seconds()))
}

// Record is what the backend keeps of a lease.
type Record struct {
	ID  int64
	TTL int64
	// RemainingTTL is the checkpointed remaining TTL in seconds, 0 if none.
	RemainingTTL int64
}

// Marshal encodes r as etcd's leasepb.Lease (protobuf fields 1 ID, 2 TTL,
// 3 RemainingTTL, varints, zeros omitted), so kvd's lease bucket reads the
// same as etcd's.
func (r Record) Marshal() []byte {
	b := make([]byte, 0, 32)
	for _, f := range []struct {
		num protowire.Number
		v   int64
	}{{1, r.ID}, {2, r.TTL}, {3, r.RemainingTTL}} {
		if f.v != 0 {
			b = protowire.AppendTag(b, f.num, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(f.v))
		}
	}
	return b
}

// UnmarshalRecord decodes the record kept under lease id's key; unknown
// fields are skipped, as protobuf does.
func UnmarshalRecord(id int64, b []byte) (Record, error) {
	r := Record{ID: id}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return Record{}, fmt.Errorf("decode lease %d record: %w", id, protowire.ParseError(n))
		}
		b = b[n:]
		if typ != protowire.VarintType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return Record{}, fmt.Errorf("decode lease %d record: %w", id, protowire.ParseError(n))
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return Record{}, fmt.Errorf("decode lease %d record: %w", id, protowire.ParseError(n))
		}
		b = b[n:]
		switch num {
		case 1:
			if int64(v) != id {
				return Record{}, fmt.Errorf("decode lease %d record: it names lease %d", id, int64(v))
			}
		case 2:
			r.TTL = int64(v)
		case 3:
			r.RemainingTTL = int64(v)
		}
	}
	return r, nil
}

type lease struct {
	id           int64
	ttl          int64
	remainingTTL int64
	// expiry is zero (never) when the manager is not primary.
	expiry time.Time
	keys   map[string]struct{}
	// revokec is closed when the lease is revoked.
	revokec chan struct{}
	// heapIdx is the lease's index in the expiry heap, -1 if not in it.
	heapIdx int
	// due is when the expiry heap hands the lease out: its expiry, or a
	// retry time once it was handed out.
	due time.Time
}

func (l *lease) remaining(now time.Time) time.Duration {
	if l.expiry.IsZero() {
		return time.Duration(math.MaxInt64)
	}
	return l.expiry.Sub(now)
}

func (l *lease) refresh(now time.Time, extend time.Duration) {
	ttl := l.ttl
	if l.remainingTTL > 0 {
		ttl = l.remainingTTL
	}
	l.expiry = now.Add(extend + time.Duration(ttl)*time.Second)
}

// Manager holds the leases. It is safe for concurrent use.
type Manager struct {
	cfg Config

	mu     sync.Mutex
	leases map[int64]*lease
	// items maps each key attached to a lease to that lease.
	items map[string]int64
	// heap orders the leases by due time; it is kept only while primary.
	heap expiryHeap
	// demotec is non-nil while primary and closed on demotion.
	demotec chan struct{}
	// promotec is closed on promotion and replaced on demotion.
	promotec chan struct{}
	// counts are the grants, revocations, renewals and expiries so far.
	counts struct{ granted, revoked, renewed, expired atomic.Uint64 }
}

// Counts are a manager's lease operations since it was made: leases
// granted and revoked (applied), renewed (keep-alives served while
// primary) and expired (revocations the expirer proposed).
type Counts struct{ Granted, Revoked, Renewed, Expired uint64 }

// Counts returns the operation counts so far.
func (m *Manager) Counts() Counts {
	return Counts{m.counts.granted.Load(), m.counts.revoked.Load(), m.counts.renewed.Load(), m.counts.expired.Load()}
}

// New returns an empty manager, not primary.
func New(cfg Config) *Manager {
	if cfg.RevokeRate <= 0 {
		cfg.RevokeRate = DefaultRevokeRate
	}
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = DefaultRetryInterval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Manager{cfg: cfg, leases: map[int64]*lease{}, items: map[string]int64{}, promotec: make(chan struct{})}
}

// Restore adds a lease read from the backend at start-up, with no expiry
// until promotion. Its TTL is raised to the minimum as at grant.
func (m *Manager) Restore(r Record) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.newLease(r.ID, r.TTL)
	l.remainingTTL = r.RemainingTTL
	m.add(l)
}

// Grant adds lease id, applying a LeaseGrant. It returns the record to
// persist (the TTL raised to the minimum).
func (m *Manager) Grant(id, ttl int64) (Record, error) {
	if id == 0 {
		return Record{}, ErrNotFound
	}
	if ttl > MaxTTL {
		return Record{}, ErrTTLTooLarge
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.leases[id]; ok {
		return Record{}, ErrExists
	}
	l := m.newLease(id, ttl)
	m.add(l)
	m.counts.granted.Add(1)
	if m.cfg.OnGrant != nil {
		m.cfg.OnGrant(l.ttl)
	}
	return Record{ID: id, TTL: l.ttl}, nil
}

func (m *Manager) newLease(id, ttl int64) *lease {
	return &lease{id: id, ttl: max(ttl, m.cfg.MinTTL), keys: map[string]struct{}{}, revokec: make(chan struct{}), heapIdx: -1}
}

// add inserts l, with an expiry if primary. The caller holds mu.
func (m *Manager) add(l *lease) {
	m.leases[l.id] = l
	if m.demotec != nil {
		l.refresh(m.cfg.Now(), 0)
		m.schedule(l, l.expiry)
	}
}

func (m *Manager) schedule(l *lease, due time.Time) {
	l.due = due
	if l.heapIdx >= 0 {
		heap.Fix(&m.heap, l.heapIdx)
		return
	}
	heap.Push(&m.heap, l)
}

// Revoke removes lease id, applying a LeaseRevoke, and returns its keys,
// sorted: the caller deletes them in one write transaction, in this order
// (as etcd, so every member writes the same revision).
func (m *Manager) Revoke(id int64) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.leases[id]
	if l == nil {
		return nil, ErrNotFound
	}
	keys := make([]string, 0, len(l.keys))
	for k := range l.keys {
		keys = append(keys, k)
		delete(m.items, k)
	}
	slices.Sort(keys)
	delete(m.leases, id)
	if l.heapIdx >= 0 {
		heap.Remove(&m.heap, l.heapIdx)
	}
	close(l.revokec)
	m.counts.revoked.Add(1)
	return keys, nil
}

// Exists tells whether lease id is granted.
func (m *Manager) Exists(id int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.leases[id] != nil
}

// Attach follows the events of an applied write transaction: a PUT moves
// its key to the lease in its KeyValue (none: detached), a DELETE detaches.
// A key that names a lease that does not exist is left detached (the
// applier checks leases before writing).
func (m *Manager) Attach(events []*mvccpb.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, ev := range events {
		var id int64
		if ev.Type == mvccpb.PUT {
			id = ev.Kv.Lease
		}
		m.attachLocked(ev.Kv.Key, id)
	}
}

// AttachKey attaches key to lease id (0: detaches it), as at start-up
// when the store's keys are read back.
func (m *Manager) AttachKey(key []byte, id int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.attachLocked(key, id)
}

func (m *Manager) attachLocked(key []byte, id int64) {
	old, had := m.items[string(key)]
	if had && old == id {
		return
	}
	if had {
		if l := m.leases[old]; l != nil {
			delete(l.keys, string(key))
		}
		delete(m.items, string(key))
	}
	if id == 0 {
		return
	}
	l := m.leases[id]
	if l == nil {
		return
	}
	k := string(key)
	l.keys[k] = struct{}{}
	m.items[k] = id
}

// LeaseOf returns the lease key is attached to, 0 if none.
func (m *Manager) LeaseOf(key []byte) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.items[string(key)]
}

// Renew refreshes lease id's expiry to its full TTL and returns the TTL. It
// fails with ErrNotPrimary unless primary, ErrNotFound if the lease does
// not exist; a lease already expired cannot be renewed: Renew waits until
// its revocation is applied (ErrNotFound) or the manager is demoted
// (ErrNotPrimary), or ctx ends.
func (m *Manager) Renew(ctx context.Context, id int64) (int64, error) {
	m.mu.Lock()
	if m.demotec == nil {
		m.mu.Unlock()
		return -1, ErrNotPrimary
	}
	l := m.leases[id]
	if l == nil {
		m.mu.Unlock()
		return -1, ErrNotFound
	}
	now := m.cfg.Now()
	if l.remaining(now) <= 0 {
		revokec, demotec := l.revokec, m.demotec
		m.mu.Unlock()
		select {
		case <-revokec:
			return -1, ErrNotFound
		case <-demotec:
			return -1, ErrNotPrimary
		case <-ctx.Done():
			return -1, ctx.Err()
		}
	}
	// A renewal resets the lease to its full TTL: a checkpointed remaining
	// TTL no longer applies.
	l.remainingTTL = 0
	l.refresh(now, 0)
	m.schedule(l, l.expiry)
	m.mu.Unlock()
	m.counts.renewed.Add(1)
	return l.ttl, nil
}

// Status is what TimeToLive reports of a lease.
type Status struct {
	ID int64
	// TTL is the remaining time in whole seconds (truncated, as etcd);
	// math.MaxInt64 / 1e9 when not primary (no expiry).
	TTL        int64
	GrantedTTL int64
	// Keys are the attached keys, sorted, if asked for.
	Keys []string
}

// TimeToLive reports lease id.
func (m *Manager) TimeToLive(id int64, keys bool) (Status, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.leases[id]
	if l == nil {
		return Status{}, ErrNotFound
	}
	st := Status{ID: id, TTL: int64(l.remaining(m.cfg.Now()).Seconds()), GrantedTTL: l.ttl}
	if keys {
		st.Keys = sortedKeys(l.keys)
	}
	return st, nil
}

// Keys returns the keys attached to lease id, sorted; nil if it does not
// exist.
func (m *Manager) Keys(id int64) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.leases[id]
	if l == nil {
		return nil
	}
	return sortedKeys(l.keys)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Leases returns the IDs of all leases, soonest expiry first (ties by ID).
func (m *Manager) Leases() []int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	ls := make([]*lease, 0, len(m.leases))
	for _, l := range m.leases {
		ls = append(ls, l)
	}
	sortByExpiry(ls)
	ids := make([]int64, len(ls))
	for i, l := range ls {
		ids[i] = l.id
	}
	return ids
}

func sortByExpiry(ls []*lease) {
	slices.SortFunc(ls, func(a, b *lease) int {
		if c := cmpExpiry(a.expiry, b.expiry); c != 0 {
			return c
		}
		switch {
		case a.id < b.id:
			return -1
		case a.id > b.id:
			return 1
		}
		return 0
	})
}

// cmpExpiry orders expiries, zero (never) last.
func cmpExpiry(a, b time.Time) int {
	switch {
	case a.Equal(b):
		return 0
	case a.IsZero():
		return 1
	case b.IsZero():
		return -1
	}
	return a.Compare(b)
}

// Len is the number of leases.
func (m *Manager) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.leases)
}

// Primary tells whether the manager keeps expiries (its member leads).
func (m *Manager) Primary() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.demotec != nil
}

// Promoted returns a channel closed once the manager is primary.
func (m *Manager) Promoted() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.promotec
}

// Promote makes the manager primary: every lease expires its (checkpointed
// remaining or full) TTL plus extend from now. When there are at least as
// many leases as the revoke rate, expiries that pile up are spread so that
// at most 3/4 of the rate fall in any second (etcd's rule).
func (m *Manager) Promote(extend time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.demotec != nil {
		return
	}
	m.demotec = make(chan struct{})
	close(m.promotec)
	now := m.cfg.Now()
	ls := make([]*lease, 0, len(m.leases))
	for _, l := range m.leases {
		l.refresh(now, extend)
		ls = append(ls, l)
	}
	if len(ls) >= m.cfg.RevokeRate {
		sortByExpiry(ls)
		base := ls[0].remaining(now)
		next := base + time.Second
		expires := 0
		target := (3 * m.cfg.RevokeRate) / 4
		for _, l := range ls {
			rem := l.remaining(now)
			if rem > next {
				base, next, expires = rem, rem+time.Second, 1
				continue
			}
			expires++
			if expires <= target {
				continue
			}
			delay := time.Duration(float64(time.Second)*(float64(expires)/float64(target)) - float64(rem-base))
			next = base + delay
			l.refresh(now, delay+extend)
		}
	}
	m.heap = make(expiryHeap, 0, len(ls))
	for _, l := range ls {
		l.due = l.expiry
		l.heapIdx = len(m.heap)
		m.heap = append(m.heap, l)
	}
	heap.Init(&m.heap)
}

// Demote drops the expiries: the leases live until the next promotion.
func (m *Manager) Demote() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.demotec == nil {
		return
	}
	for _, l := range m.leases {
		l.expiry = time.Time{}
		l.heapIdx = -1
	}
	m.heap = nil
	close(m.demotec)
	m.demotec = nil
	m.promotec = make(chan struct{})
}

// Expired returns up to limit leases past their expiry, soonest first, to
// be revoked. Each is handed out again after RetryInterval if its
// revocation has not been applied by then (the proposal may be lost).
func (m *Manager) Expired(limit int) []int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.demotec == nil {
		return nil
	}
	now := m.cfg.Now()
	var ids []int64
	for len(ids) < limit && len(m.heap) > 0 {
		l := m.heap[0]
		if now.Before(l.due) {
			break
		}
		if l.remaining(now) > 0 {
			m.schedule(l, l.expiry)
			continue
		}
		m.schedule(l, now.Add(m.cfg.RetryInterval))
		ids = append(ids, l.id)
	}
	return ids
}

// NextDue is when the soonest lease is due for Expired; zero if none.
func (m *Manager) NextDue() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.heap) == 0 {
		return time.Time{}
	}
	return m.heap[0].due
}

// expiryHeap is a min-heap of leases by due time.
type expiryHeap []*lease

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx = i
	h[j].heapIdx = j
}

func (h *expiryHeap) Push(x any) {
	l := x.(*lease)
	l.heapIdx = len(*h)
	*h = append(*h, l)
}

func (h *expiryHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	l.heapIdx = -1
	return l
}
