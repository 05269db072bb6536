package mvcc

import (
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/index"
)

// CompactRev returns the compaction revision of the view: revisions below it
// may be gone, revisions at or above it are all readable.
func (t *ReadTxn) CompactRev() int64 { return t.compactRev }

// Events returns the changes of revisions from..to (both included) in
// revision order, as watchers get them: a PUT carries the KeyValue written, a
// DELETE carries Key and ModRevision. It returns whole revisions only: once
// it holds at least limit events (limit <= 0: no limit) it stops at the end
// of a revision, and last is the newest revision covered (to when it did not
// stop early; the caller resumes at last+1). A txn's events are never split.
//
// Events fails with ErrCompacted when from is below the view's compaction
// revision and with ErrFutureRev when to is above the view's revision.
func (t *ReadTxn) Events(from, to int64, limit int) (evs []*mvccpb.Event, last int64, err error) {
	if t.ended {
		panic("mvcc: Events on an ended read view")
	}
	if from < t.compactRev {
		return nil, 0, ErrCompacted
	}
	if to > t.rev {
		return nil, 0, ErrFutureRev
	}
	if from > to {
		return nil, to, nil
	}
	last = to
	var (
		emitted index.Revision // newest revision emitted
		stopped bool
		decErr  error
	)
	emit := func(rev index.Revision, tomb bool, v []byte) bool {
		if limit > 0 && len(evs) >= limit && rev.Main != emitted.Main {
			last, stopped = emitted.Main, true
			return false
		}
		kv := &mvccpb.KeyValue{}
		if err := unmarshalKV(v, kv); err != nil {
			decErr = fmt.Errorf("unmarshal revision %v: %w", rev, err)
			return false
		}
		ev := &mvccpb.Event{Type: mvccpb.PUT, Kv: kv}
		if tomb {
			ev.Type = mvccpb.DELETE
			kv.ModRevision = rev.Main
		}
		evs = append(evs, ev)
		emitted = rev
		return true
	}

	// The backend holds a prefix of the history, the buffers a suffix that
	// may overlap it (a frozen buffer stays until its commit is done): take
	// the backend's, then the buffered revisions newer than those.
	if t.tx == nil {
		tx, err := t.s.be.ReadTx()
		if err != nil {
			return nil, 0, fmt.Errorf("mvcc events %d..%d: open backend read tx: %w", from, to, err)
		}
		t.tx = tx
	}
	start := revToBytes(index.Revision{Main: from}, false)
	end := revToBytes(index.Revision{Main: to + 1}, false)
	err = t.tx.Range(backend.Key, start, end, 0, func(k, v []byte) bool {
		rev, tomb, err := bytesToRev(k)
		if err != nil {
			decErr = err
			return false
		}
		return emit(rev, tomb, v)
	})
	if err == nil {
		err = decErr
	}
	if err != nil {
		return nil, 0, fmt.Errorf("mvcc events %d..%d: %w", from, to, err)
	}
	for _, ents := range [][]bufEntry{t.frozen, t.active} {
		for i := range ents {
			if stopped {
				break
			}
			e := &ents[i]
			if e.rev.Main < from || e.rev.Main > to || compareRev(e.rev, emitted) <= 0 {
				continue
			}
			if !emit(e.rev, e.tomb, e.value) {
				break
			}
		}
	}
	if decErr != nil {
		return nil, 0, fmt.Errorf("mvcc events %d..%d: %w", from, to, decErr)
	}
	return evs, last, nil
}
