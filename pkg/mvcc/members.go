package mvcc

import "github.com/kvd-dev/kvd/pkg/backend"

// Member records live in bucket backend.Members. Keys and values are the
// membership package's; like lease records they go through the write-back
// buffer, so a membership change is committed in the same backend update as
// the consistent index of the entry that made it.

// PutMember stages a member record, committed with the batch. value must
// not be modified afterwards.
func (b *Batch) PutMember(key string, value []byte) {
	b.aux = append(b.aux, auxPending{k: auxKey{backend.Members, key}, w: auxWrite{value: value}})
}

// DeleteMember stages the removal of a member record.
func (b *Batch) DeleteMember(key string) {
	b.aux = append(b.aux, auxPending{k: auxKey{backend.Members, key}, w: auxWrite{del: true}})
}

// Members calls fn with every member record, in key order. Like Leases it
// flushes first: for start-up and snapshot installs, not the hot path.
func (s *Store) Members(fn func(key string, value []byte) error) error {
	return s.records(backend.Members, "members", func(k, v []byte) error { return fn(string(k), v) })
}
