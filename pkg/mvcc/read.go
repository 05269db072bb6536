package mvcc

import (
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/index"
)

// RangeOptions shape a Range.
type RangeOptions struct {
	// Limit caps the number of KVs returned (<= 0: no limit).
	Limit int64
	// Rev is the revision to read at; 0 means the reader's current one.
	Rev int64
	// Count asks only for the number of matching keys, no KVs.
	Count bool
}

// RangeResult is the answer of a Range.
type RangeResult struct {
	// KVs are the matching keys live at the read revision, ascending by key,
	// at most Limit of them. They are the caller's.
	KVs []mvccpb.KeyValue
	// Rev is the reader's current revision, not the one read at (as etcd's
	// response header).
	Rev int64
	// Count is the number of matching keys, ignoring Limit.
	Count int
}

// Reader reads at a fixed point: both a read view (ReadTxn) and a write
// transaction (TxnWrite) implement it.
//
// Range ends follow etcd: a nil or empty end selects the single key key,
// end == []byte{0} selects every key >= key, otherwise [key, end).
// Range fails with ErrFutureRev when ro.Rev > Rev(), and with ErrCompacted
// when ro.Rev (0 means Rev()) is below the compaction revision; reading at
// exactly the compaction revision is allowed, as in etcd.
type Reader interface {
	Range(key, end []byte, ro RangeOptions) (*RangeResult, error)
	// Versions calls f, in key order, for each key live at Rev() in the
	// range with the create revision, mod revision and version a Range would
	// return for it, until f returns false. It reads the index alone, no
	// value: a txn's compare of those fields needs no more. It counts as a
	// range in the store's counters, as etcd counts a compare.
	Versions(key, end []byte, f func(created, modified, version int64) bool)
	Rev() int64
}

// ReadTxn is a consistent read view at the store revision of its creation.
// It must be ended with End, promptly: a compaction waits for open views
// (as in etcd), and the applier with it. A goroutine must not open a second
// view while holding one.
type ReadTxn struct {
	s          *Store
	rev        int64
	compactRev int64
	// active and frozen are the buffers loaded after rev; tx is the backend
	// view, opened on the first read that misses them (see buffer.go).
	active, frozen []bufEntry
	tx             backend.ReadTx
	scratch        []byte
	// scratchBuf backs scratch: a revision key built by appends would
	// cost two allocations a read.
	scratchBuf [markedRevBytesLen]byte
	ended      bool
	// n counts the view's ranges; End adds them to the store's.
	n txnOps
}

// Read opens a read view at Rev(). Index entries above Rev() belong to a
// batch not yet applied and are never looked at; every revision <= Rev() is
// in the buffers the view loads after Rev() or in the backend view it opens
// later.
func (s *Store) Read() *ReadTxn {
	s.mu.RLock()
	t := &ReadTxn{s: s, rev: s.rev.Load(), compactRev: s.compactRev}
	t.scratch = t.scratchBuf[:0]
	st := s.bufs.Load()
	t.active, t.frozen = st.active, st.frozen
	return t
}

// Rev returns the revision of the view.
func (t *ReadTxn) Rev() int64 { return t.rev }

// Range implements Reader.
func (t *ReadTxn) Range(key, end []byte, ro RangeOptions) (*RangeResult, error) {
	if t.ended {
		panic("mvcc: Range on an ended read view")
	}
	t.n.ranges++
	return rangeKeys(t.s.idx, t, key, end, t.rev, t.compactRev, ro)
}

// Versions implements Reader.
func (t *ReadTxn) Versions(key, end []byte, f func(created, modified, version int64) bool) {
	if t.ended {
		panic("mvcc: Versions on an ended read view")
	}
	t.n.ranges++
	versions(t.s.idx, key, end, t.rev, f)
}

// versions is Versions over idx at rev.
func versions(idx *index.Index, key, end []byte, rev int64, f func(created, modified, version int64) bool) {
	idx.Versions(key, end, rev, func(created, modified index.Revision, ver int64) bool {
		return f(created.Main, modified.Main, ver)
	})
}

func (t *ReadTxn) getRev(rev index.Revision) ([]byte, bool, bool, error) {
	v, owned, ok, err := getRev(t.active, t.frozen, t.s.be, &t.tx, &t.scratch, rev)
	if err != nil {
		err = fmt.Errorf("read view at %d: %w", t.rev, err)
	}
	return v, owned, ok, err
}

// End releases the view. Calling it twice is harmless.
func (t *ReadTxn) End() {
	if t.ended {
		return
	}
	t.ended = true
	t.s.ops.add(&t.n)
	if t.tx != nil {
		t.tx.Release()
	}
	t.s.mu.RUnlock()
}

// rangeResult1 is a RangeResult with room for one KeyValue.
type rangeResult1 struct {
	res RangeResult
	one [1]mvccpb.KeyValue
}

// revGetter reads the KeyValue put at a revision: a read view or a batch.
type revGetter interface {
	// getRev is getRev of buffer.go: value, owned, found.
	getRev(rev index.Revision) ([]byte, bool, bool, error)
}

// rangeKeys answers a Range at curRev over idx and tx, etcd's rangeKeys.
func rangeKeys(idx *index.Index, tx revGetter, key, end []byte, curRev, compactRev int64, ro RangeOptions) (*RangeResult, error) {
	rev := ro.Rev
	if rev > curRev {
		return &RangeResult{Rev: curRev, Count: -1}, ErrFutureRev
	}
	if rev <= 0 {
		rev = curRev
	}
	if rev < compactRev {
		return &RangeResult{Count: -1}, ErrCompacted
	}
	if ro.Count {
		return &RangeResult{Rev: curRev, Count: idx.CountRevisions(key, end, rev)}, nil
	}
	revs, total := idx.Revisions(key, end, rev, int(ro.Limit))
	var res *RangeResult
	switch len(revs) {
	case 0:
		return &RangeResult{Rev: curRev, Count: total}, nil
	case 1:
		// One allocation for the result and its KeyValue.
		r1 := new(rangeResult1)
		res = &r1.res
		res.KVs = r1.one[:]
	default:
		res = &RangeResult{KVs: make([]mvccpb.KeyValue, len(revs))}
	}
	res.Rev, res.Count = curRev, total
	for i, r := range revs {
		v, owned, ok, err := tx.getRev(r)
		if err != nil {
			return nil, fmt.Errorf("mvcc range: read revision %v: %w", r, err)
		}
		if !ok {
			// The index and the backend disagree: a bug, not a user error.
			return nil, fmt.Errorf("mvcc range: revision %v of key %q is in the index but not in the backend", r, key)
		}
		decode := unmarshalKV
		if owned {
			decode = decodeKV // a copy already: no second one
		}
		if err := decode(v, &res.KVs[i]); err != nil {
			return nil, fmt.Errorf("mvcc range: unmarshal revision %v: %w", r, err)
		}
	}
	return res, nil
}
