package mvcc

import (
	"fmt"

	"github.com/kvd-dev/kvd/pkg/backend"
)

// Auth records (users, roles, the enabled flag, the auth revision) live in
// bucket backend.Auth; pkg/authz encodes them. Like member and lease records
// they go through the write-back buffer, committed with the consistent index
// of the entry that changed them.

// PutAuth stages an auth record. value must not be modified afterwards.
func (b *Batch) PutAuth(key string, value []byte) {
	b.aux = append(b.aux, auxPending{k: auxKey{backend.Auth, key}, w: auxWrite{value: value}})
}

// DeleteAuth stages the removal of an auth record.
func (b *Batch) DeleteAuth(key string) {
	b.aux = append(b.aux, auxPending{k: auxKey{backend.Auth, key}, w: auxWrite{del: true}})
}

// AuthRecords calls fn with every auth record, in key order. It flushes
// first: for start-up and snapshot installs, not the hot path.
func (s *Store) AuthRecords(fn func(key string, value []byte) error) error {
	return s.records(backend.Auth, "auth records", func(k, v []byte) error { return fn(string(k), v) })
}

// records calls fn with every record of bucket, in key order, each value a
// copy. It commits the buffered writes first (Flush), so it is for start-up,
// snapshot installs and tests; not from inside Apply.
func (s *Store) records(bucket backend.Bucket, what string, fn func(k, v []byte) error) error {
	if err := s.Flush(); err != nil {
		return fmt.Errorf("read %s: %w", what, err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	tx, err := s.be.ReadTx()
	if err != nil {
		return fmt.Errorf("read %s: read tx: %w", what, err)
	}
	defer tx.Release()
	var fnErr error
	err = tx.Range(bucket, nil, nil, 0, func(k, v []byte) bool {
		fnErr = fn(k, append([]byte(nil), v...))
		return fnErr == nil
	})
	if err == nil {
		err = fnErr
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", what, err)
	}
	return nil
}
