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
	rv := st.Read()
	defer rv.End()
	rr, err := rv.Range([]byte{0}, []byte{0}, mvcc.RangeOptions{})
	if err != nil {
		return fmt.Errorf("recover lease attachments: range keys at %d: %w", rv.Rev(), err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range rr.KVs {
		if kv := &rr.KVs[i]; kv.Lease != 0 {
			m.attachLocked(kv.Key, kv.Lease)
		}
	}
	return nil
}
