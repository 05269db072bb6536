package leasemgr

import (
	"math"
	"time"
)

// Checkpointing (etcd's LeaseCheckpoint feature, off by default): the
// primary periodically proposes, through raft, the remaining TTL of leases
// that have not been renewed for a while; applying it records the remaining
// TTL in the lease's backend record, so a restarted or newly promoted member
// starts such a lease from its remaining TTL instead of its full TTL. A
// renewal clears the checkpoint (through raft too) before it refreshes the
// lease.

// Checkpoint is one lease's remaining TTL, in whole seconds.
type Checkpoint struct {
	ID           int64
	RemainingTTL int64
}

// Checkpoint records lease id's remaining TTL (0 clears it), applying a
// LeaseCheckpoint entry. It returns the record to persist, false if the
// lease does not exist. The lease's expiry does not change: promotion
// applies the remaining TTL.
func (m *Manager) Checkpoint(id, remaining int64) (Record, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.leases[id]
	if l == nil {
		return Record{}, false
	}
	l.remainingTTL = remaining
	return Record{ID: id, TTL: l.ttl, RemainingTTL: remaining}, true
}

// CheckpointedTTL returns lease id's recorded remaining TTL, 0 if none.
func (m *Manager) CheckpointedTTL(id int64) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := m.leases[id]; l != nil {
		return l.remainingTTL
	}
	return 0
}

// Checkpoints returns, while primary, the remaining TTL (rounded up) of
// every lease whose TTL is longer than interval and that has run down part
// of it since its last renewal: the checkpoints to propose every interval.
func (m *Manager) Checkpoints(interval time.Duration) []Checkpoint {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.demotec == nil {
		return nil
	}
	now := m.cfg.Now()
	var cps []Checkpoint
	for _, l := range m.leases {
		if time.Duration(l.ttl)*time.Second <= interval {
			continue
		}
		rem := l.remaining(now)
		if rem <= 0 {
			continue
		}
		secs := int64(math.Ceil(rem.Seconds()))
		if secs >= l.ttl || secs == l.remainingTTL {
			continue
		}
		cps = append(cps, Checkpoint{ID: l.id, RemainingTTL: secs})
	}
	return cps
}
