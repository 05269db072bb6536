package mvcc

import (
	"encoding/binary"
	"fmt"

	"github.com/kvd-dev/kvd/pkg/backend"
)

// Lease records live in bucket backend.Lease, keyed by the lease ID as 8
// bytes big-endian (etcd's key). The value is opaque to the store: the lease
// manager encodes it. They go through the write-back buffer like Meta
// writes, so a lease record is committed in the same backend update as the
// revisions and the consistent index of the batch that wrote it.

// auxKey names one buffered write outside the Key bucket other than Meta.
type auxKey struct {
	bucket backend.Bucket
	key    string
}

// auxWrite is the last buffered write of an auxKey: a put, or a delete.
type auxWrite struct {
	value []byte
	del   bool
}

func leaseKey(id int64) string {
	return string(binary.BigEndian.AppendUint64(nil, uint64(id)))
}

// PutLease stages the record of lease id, committed with the batch. value
// must not be modified afterwards.
func (b *Batch) PutLease(id int64, value []byte) {
	b.aux = append(b.aux, auxPending{k: auxKey{backend.Lease, leaseKey(id)}, w: auxWrite{value: value}})
}

// DeleteLease stages the removal of lease id's record, committed with the
// batch.
func (b *Batch) DeleteLease(id int64) {
	b.aux = append(b.aux, auxPending{k: auxKey{backend.Lease, leaseKey(id)}, w: auxWrite{del: true}})
}

type auxPending struct {
	k auxKey
	w auxWrite
}

// Leases calls fn with every lease record applied so far, in ID byte order
// (unsigned big-endian). It commits the buffered writes first (Flush), so
// it is for start-up and tests, not for the hot path; writes applied
// concurrently with the call may or may not be seen. Not from inside Apply.
func (s *Store) Leases(fn func(id int64, value []byte) error) error {
	return s.records(backend.Lease, "leases", func(k, v []byte) error {
		if len(k) != 8 {
			return fmt.Errorf("bad lease key %x", k)
		}
		return fn(int64(binary.BigEndian.Uint64(k)), v)
	})
}
