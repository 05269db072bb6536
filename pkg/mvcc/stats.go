package mvcc

import (
	"sync/atomic"

	"github.com/kvd-dev/kvd/pkg/backend"
)

// txnOps counts one transaction's operations; only its goroutine touches it.
type txnOps struct {
	ranges, puts, deletes, putBytes uint64
}

// opCounters are the operations of every ended transaction, counted as
// etcd's MVCC layer counts them (etcd_mvcc_range_total and the others): a
// range, put or delete-range is one operation whatever it touched, and a
// transaction of more than one operation is also one txn. Each ended
// transaction costs a few atomic adds.
type opCounters struct {
	ranges, puts, deletes, txns, putBytes atomic.Uint64
}

func (c *opCounters) add(n *txnOps) {
	if n.ranges > 0 {
		c.ranges.Add(n.ranges)
	}
	if n.puts > 0 {
		c.puts.Add(n.puts)
		c.putBytes.Add(n.putBytes)
	}
	if n.deletes > 0 {
		c.deletes.Add(n.deletes)
	}
	if n.ranges+n.puts+n.deletes > 1 {
		c.txns.Add(1)
	}
}

// OpStats are the store's operation counts since it was opened.
type OpStats struct {
	Ranges, Puts, Deletes, Txns uint64
	// PutBytes is the size of the keys and values put.
	PutBytes uint64
}

// Ops returns the operation counts of the transactions ended so far.
func (s *Store) Ops() OpStats {
	return OpStats{
		Ranges:   s.ops.ranges.Load(),
		Puts:     s.ops.puts.Load(),
		Deletes:  s.ops.deletes.Load(),
		Txns:     s.ops.txns.Load(),
		PutBytes: s.ops.putBytes.Load(),
	}
}

// Keys returns the number of live keys (etcd_debugging_mvcc_keys_total):
// keys put and not deleted since, whatever their revision count.
func (s *Store) Keys() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.idx.Live()
}

// Buffered reports the Key bucket writes applied but not yet committed to
// the backend (the write-back buffer's published and frozen entries) and
// an estimate of their bytes, as the commit will write them. It walks the
// buffers: for scrapes, not for the hot path.
func (s *Store) Buffered() (writes, bytes int) {
	st := s.bufs.Load()
	for _, ents := range [2][]bufEntry{st.active, st.frozen} {
		writes += len(ents)
		for i := range ents {
			bytes += writeBytes(backend.Key, markedRevBytesLen, len(ents[i].value))
		}
	}
	return writes, bytes
}
