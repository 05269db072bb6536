package mvcc

import (
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/index"
)

// Split commits.
//
// One entry can leave any number of Key writes in the buffer: a DeleteRange
// or a lease revoke tombstones every key it covers. An engine with an update
// limit (Badger: its memtable) refuses such a buffer whole
// (backend.ErrUpdateTooLarge), and a member that cannot commit it cannot
// restart either, since it applies the same entry again. commitSplit writes
// it in parts instead:
//   - the parts hold the Key records in revision order, so between them the
//     backend still holds a prefix of the history, as readers expect;
//   - the first part also records the first revision of the buffer
//     (metaSplitCommit), the last one writes the Meta and Lease writes and
//     the consistent index and deletes that record;
//   - a store that opens on a backend holding the record (a crash between
//     the parts) deletes the Key records from that revision on first
//     (rollBackSplit): the backend is then what its consistent index says,
//     and raft applies the entries after it again.
//
// Between the parts the backend as a whole matches no consistent index:
// whole-backend copies (snapshots) take their view under WholeView.

// metaSplitCommit is the Meta key of an unfinished split commit: the first
// revision it writes (a revision key, sub 0).
var metaSplitCommit = []byte("kvdSplitCommitRev")

// commitSplit commits w in parts of at most batchLimit Key writes and
// batchBytes bytes.
func (s *Store) commitSplit(w *wbuf) error {
	if len(w.ents) == 0 {
		return errors.New("split commit: no Key writes to split")
	}
	s.splitMu.Lock()
	defer s.splitMu.Unlock()
	mark := revToBytes(index.Revision{Main: w.ents[0].rev.Main}, false)
	i := 0
	for part := 0; ; part++ {
		j, bytes := i, 0
		for j < len(w.ents) && j-i < s.batchLimit {
			n := writeBytes(backend.Key, markedRevBytesLen, len(w.ents[j].value))
			if j > i && bytes+n > s.batchBytes {
				break
			}
			bytes += n
			j++
		}
		if j == len(w.ents) {
			break
		}
		err := s.be.Update(func(tx backend.WriteTx) error {
			if part == 0 {
				if err := tx.Put(backend.Meta, metaSplitCommit, mark); err != nil {
					return fmt.Errorf("put meta %s: %w", metaSplitCommit, err)
				}
			}
			return putEnts(tx, w.ents[i:j])
		})
		if err != nil {
			return fmt.Errorf("split commit, part %d (writes %d..%d of %d): %w", part+1, i, j-1, len(w.ents), err)
		}
		i = j
	}
	err := s.be.Update(func(tx backend.WriteTx) error {
		if err := putEnts(tx, w.ents[i:]); err != nil {
			return err
		}
		if err := putMetaAux(tx, w); err != nil {
			return err
		}
		return tx.Delete(backend.Meta, metaSplitCommit)
	})
	if err != nil {
		return fmt.Errorf("split commit, last part (writes %d..%d): %w", i, len(w.ents)-1, err)
	}
	s.lg.Info("committed applied writes in parts: one update could not hold them",
		zap.Int("writes", len(w.ents)), zap.Int("bytes", w.bytes))
	return nil
}

// WholeView runs fn, which takes a view of the whole backend (a snapshot),
// while no split commit is between its parts, so the view matches its
// consistent index. A split commit waits for fn.
func (s *Store) WholeView(fn func(be backend.Backend) error) error {
	s.splitMu.RLock()
	defer s.splitMu.RUnlock()
	return fn(s.Backend())
}

// rollBackSplit deletes what an unfinished split commit left in the
// backend: the Key records from its first revision on, in updates of at most
// batchLimit deletions, then the Meta record. It reports whether there was
// one. A crash during it leaves the record, so the next open finishes it.
func (s *Store) rollBackSplit() (bool, error) {
	mark, err := s.readMeta(metaSplitCommit)
	if err != nil || mark == nil {
		return false, err
	}
	from, _, err := bytesToRev(mark)
	if err != nil {
		return false, fmt.Errorf("meta %s: %w", metaSplitCommit, err)
	}
	deleted := 0
	for {
		tx, err := s.be.ReadTx()
		if err != nil {
			return false, fmt.Errorf("roll back split commit: read tx: %w", err)
		}
		var keys [][]byte
		err = tx.Range(backend.Key, mark, nil, s.batchLimit, func(k, _ []byte) bool {
			keys = append(keys, append([]byte(nil), k...))
			return true
		})
		tx.Release()
		if err != nil {
			return false, fmt.Errorf("roll back split commit: %w", err)
		}
		if len(keys) == 0 {
			break
		}
		err = s.be.Update(func(tx backend.WriteTx) error {
			for _, k := range keys {
				if err := tx.Delete(backend.Key, k); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return false, fmt.Errorf("roll back split commit: %w", err)
		}
		deleted += len(keys)
	}
	if err := s.be.Update(func(tx backend.WriteTx) error { return tx.Delete(backend.Meta, metaSplitCommit) }); err != nil {
		return false, fmt.Errorf("roll back split commit: %w", err)
	}
	s.lg.Warn("rolled back a commit cut short between its parts; raft applies its entries again",
		zap.Int64("from-revision", from.Main), zap.Int("key-records", deleted))
	return true, nil
}

// readMeta returns the value of Meta key, or nil.
func (s *Store) readMeta(key []byte) ([]byte, error) {
	tx, err := s.be.ReadTx()
	if err != nil {
		return nil, fmt.Errorf("read meta %s: %w", key, err)
	}
	defer tx.Release()
	v, ok, err := tx.Get(backend.Meta, key)
	if err != nil || !ok {
		return nil, err
	}
	return append([]byte(nil), v...), nil
}
