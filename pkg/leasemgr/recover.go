package leasemgr

import (
	"fmt"

	"github.com/kvd-dev/kvd/pkg/mvcc"
)

// Recover loads the leases kept in st and attaches the live keys that name
// them, as at start-up: the leases have no expiry until promotion. It is
// called before the applier runs. A key naming a lease that is not there is
// left detached (it cannot happen: a revocation deletes the lease's keys
// in the batch that removes the lease).
func (m *Manager) Recover(st *mvcc.Store) error {
	err := st.Leases(func(id int64, v []byte) error {
		r, err := UnmarshalRecord(id, v)
		if err != nil {
			return err
		}
		m.Restore(r)
		return nil
	})
	if err != nil {
		return fmt.Errorf("recover leases: %w", err)
	}
	if m.Len() == 0 {
		// No key can name a lease: the scan of every live key below,
		// values and all, would find nothing (it was 12 s of a 1 GB
		// member's restart).
		return nil
	}
	// One read view for every page, so the pages are one consistent
	// state; pages bound the memory the values take meanwhile.
	rv := st.Read()
	defer rv.End()
	for key := []byte{0}; ; {
		rr, err := rv.Range(key, []byte{0}, mvcc.RangeOptions{Limit: int64(recoverPage)})
		if err != nil {
			return fmt.Errorf("recover lease attachments: range keys at %d: %w", rv.Rev(), err)
		}
		m.mu.Lock()
		for i := range rr.KVs {
			if kv := &rr.KVs[i]; kv.Lease != 0 {
				m.attachLocked(kv.Key, kv.Lease)
			}
		}
		m.mu.Unlock()
		if len(rr.KVs) < recoverPage {
			return nil
		}
		key = append(rr.KVs[len(rr.KVs)-1].Key, 0)
	}
}

// Reload replaces every lease with those kept in st: after a raft snapshot
// replaced the store. Keep-alive waiters of leases that are gone see them
// revoked.
func (m *Manager) Reload(st *mvcc.Store) error {
	m.mu.Lock()
	for _, l := range m.leases {
		close(l.revokec)
	}
	m.leases = map[int64]*lease{}
	m.items = map[string]int64{}
	m.heap = nil
	m.mu.Unlock()
	return m.Recover(st)
}

// recoverPage is how many keys Recover reads at a time (a variable for
// tests).
var recoverPage = 10000
