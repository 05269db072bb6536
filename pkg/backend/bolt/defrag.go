package bolt

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/backend/internal/defrag"
	"github.com/kvd-dev/kvd/pkg/fsutil"
)

// defragCopyTxBytes bounds a copy transaction (and a replay transaction
// without writeMu): each is synced on its own, so that no fsync of the copy
// writes back more than this at once; the smaller, the less the live
// file's fsyncs wait behind it.
const defragCopyTxBytes = 4 << 20

// journal is the shared Defrag journal of this engine's writes.
type journal = defrag.Journal[op]

// op is one committed write: a put of value, or a delete.
type op struct {
	bucket     backend.Bucket
	key, value []byte
	del        bool
}

// Defrag implements backend.Backend. It copies the live data into a new file
// from a read transaction, without holding writeMu: Updates go on committing
// to the live file and, while a Defrag runs, also record their writes in its
// journal. Once the copy is done Defrag replays the journal into the new
// file in a few rounds, then takes writeMu, replays the rest, fsyncs the new
// file, renames it over Dir/db and swaps it in. Writers wait only for that
// last step, unless the journal fills up (defrag.JournalMax).
//
// A crash before the rename leaves the old file live and a leftover
// Dir/db.defrag, which Open removes; the new file is synced before the
// rename, so after it the new file is live and complete. An error before
// the rename leaves the old file live and removes the new one.
//
// The copy's read transaction holds bolt's mmap lock: a commit that must
// grow the memory map waits for the copy (Options.InitialMmapSize, 10 GiB by
// default, makes that rare).
func (be *Backend) Defrag() error {
	if !be.gate.Enter() {
		return backend.ErrClosed
	}
	defer be.gate.Exit()
	be.defragMu.Lock()
	defer be.defragMu.Unlock()
	start := time.Now()
	sizeBefore, inUseBefore := be.sizes()
	st, err := be.defrag()
	if err != nil {
		be.lg.Warn("bolt defrag failed", zap.String("path", be.path), zap.Duration("took", time.Since(start)), zap.Error(err))
		return err
	}
	size, inUse := be.sizes()
	be.lg.With(st.Fields()...).Info("bolt defrag done",
		zap.String("path", be.path),
		zap.Int64("size-before", sizeBefore), zap.Int64("size-after", size),
		zap.Int64("size-in-use-before", inUseBefore), zap.Int64("size-in-use-after", inUse),
		zap.Int64("reclaimed", sizeBefore-size),
		zap.Duration("took", time.Since(start)))
	return nil
}

func (be *Backend) defrag() (defrag.Stats, error) {
	tmpPath := be.path + defragSuffix
	if err := os.Remove(tmpPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return defrag.Stats{}, fmt.Errorf("defrag: remove stale %s: %w", tmpPath, err)
	}
	tmpOpts := be.bo
	tmpOpts.NoSync = true // one fsync at the end instead of one per copy tx
	tmp, err := bolt.Open(tmpPath, 0o600, tmpOpts.boltOptions())
	if err != nil {
		return defrag.Stats{}, fmt.Errorf("defrag: open %s: %w", tmpPath, err)
	}
	t := &boltCopy{be: be, tmp: tmp, tmpPath: tmpPath}
	st, err := defrag.Run(&be.writeMu, &be.journal, t)
	if err != nil {
		return st, err
	}
	be.retired.Add(1)
	go func() {
		defer be.retired.Done()
		// bolt's Close waits for the read transactions still open on old.
		_ = t.old.Close()
	}()
	if err := fsutil.SyncDir(filepath.Dir(be.path)); err != nil {
		// Not an error of this Defrag: a crash may now leave either file
		// live, both complete.
		be.lg.Warn("bolt defrag: sync directory after rename", zap.String("path", be.path), zap.Error(err))
	}
	return st, nil
}

// boltCopy is the new file of a Defrag (defrag.Target), Dir/db.defrag.
type boltCopy struct {
	be      *Backend
	tmp     *bolt.DB
	tmpPath string
	old     *bolt.DB // the replaced file, after Swap
}

func (c *boltCopy) Snapshot() (func(*defrag.Pacer) error, func(), error) {
	src, err := c.be.db.Begin(false)
	if err != nil {
		return nil, nil, fmt.Errorf("begin read tx: %w", err)
	}
	copyFn := func(pc *defrag.Pacer) error {
		if err := copyTx(c.tmp, src, defragCopyTxBytes, pc); err != nil {
			return fmt.Errorf("%s: %w", c.be.path, err)
		}
		return nil
	}
	return copyFn, func() { _ = src.Rollback() }, nil
}

func (c *boltCopy) Replay(ops []op, pc *defrag.Pacer) error {
	if err := replay(c.tmp, ops, pc); err != nil {
		return fmt.Errorf("into %s: %w", c.tmpPath, err)
	}
	return nil
}

func (c *boltCopy) Sync() error {
	if err := c.tmp.Sync(); err != nil {
		return fmt.Errorf("%s: %w", c.tmpPath, err)
	}
	return nil
}

// Swap renames the new file over Dir/db: from then on it is the live file
// on disk, complete (synced before), and it is served from at once. The
// file stays open; only its commits' fsyncs change.
func (c *boltCopy) Swap() error {
	if err := os.Rename(c.tmpPath, c.be.path); err != nil {
		return fmt.Errorf("rename %s: %w", c.tmpPath, err)
	}
	c.tmp.NoSync = c.be.bo.NoSync
	// The old file closes once its readers are done. Run holds writeMu,
	// so no view of it is shared from here on.
	c.be.mu.Lock()
	c.old = c.be.db
	c.be.db = c.tmp
	c.be.mu.Unlock()
	return nil
}

func (c *boltCopy) Abort() {
	_ = c.tmp.Close()
	_ = os.Remove(c.tmpPath)
}

// copyTx copies every bucket of src into the empty dst, committing every
// txBytes of keys and values, with full pages (keys arrive in order), at
// the pace pc sets. dst commits without fsync; it is synced after each
// commit all the same, so that the kernel does not pile up the whole copy
// as dirty pages for the live file's next fsync to wait behind (ext4's
// ordered mode flushes them together), which made writers' latency jump
// during the copy.
func copyTx(dst *bolt.DB, src *bolt.Tx, txBytes int64, pc *defrag.Pacer) (err error) {
	tx, err := dst.Begin(true)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	var size int64
	// path names the bucket being copied, from the root, for reopening it in
	// the next transaction.
	var copyBucket func(path [][]byte, from *bolt.Bucket) error
	open := func(path [][]byte) *bolt.Bucket {
		b := tx.Bucket(path[0])
		for _, name := range path[1:] {
			b = b.Bucket(name)
		}
		b.FillPercent = 1.0
		return b
	}
	copyBucket = func(path [][]byte, from *bolt.Bucket) error {
		to := open(path)
		c := from.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			pc.Add(len(k) + len(v))
			if size += int64(len(k) + len(v)); size > txBytes {
				if err := tx.Commit(); err != nil {
					return err
				}
				if err := dst.Sync(); err != nil {
					return err
				}
				if tx, err = dst.Begin(true); err != nil {
					return err
				}
				size = int64(len(k) + len(v))
				to = open(path)
			}
			if v != nil {
				if err := to.Put(k, v); err != nil {
					return err
				}
				continue
			}
			sub := from.Bucket(k)
			if sub == nil { // an empty value
				if err := to.Put(k, []byte{}); err != nil {
					return err
				}
				continue
			}
			nb, err := to.CreateBucket(k)
			if err != nil {
				return err
			}
			if err := nb.SetSequence(sub.Sequence()); err != nil {
				return err
			}
			if err := copyBucket(append(path[:len(path):len(path)], k), sub); err != nil {
				return err
			}
			to = open(path) // the nested copy may have committed tx
		}
		return nil
	}
	err = src.ForEach(func(name []byte, from *bolt.Bucket) error {
		b, err := tx.CreateBucketIfNotExists(name)
		if err != nil {
			return err
		}
		if err := b.SetSequence(from.Sequence()); err != nil {
			return err
		}
		return copyBucket([][]byte{name}, from)
	})
	if err != nil {
		return err
	}
	return tx.Commit()
}

// replay applies journal writes to db in order, committing every
// defragTxBytes. With a pacer (the rounds without writeMu) it goes at the
// pacer's pace, commits every defragCopyTxBytes and syncs each commit, as
// the copy does.
func replay(db *bolt.DB, ops []op, pc *defrag.Pacer) error {
	txBytes := int64(defragTxBytes)
	if pc != nil {
		txBytes = defragCopyTxBytes
	}
	for len(ops) > 0 {
		var size int64
		err := db.Update(func(tx *bolt.Tx) error {
			for len(ops) > 0 && size < txBytes {
				o := ops[0]
				size += int64(len(o.key) + len(o.value))
				pc.Add(len(o.key) + len(o.value))
				if o.del {
					if b := tx.Bucket([]byte(o.bucket)); b != nil {
						if err := b.Delete(o.key); err != nil {
							return err
						}
					}
				} else {
					b, err := tx.CreateBucketIfNotExists([]byte(o.bucket))
					if err != nil {
						return err
					}
					if err := b.Put(o.key, o.value); err != nil {
						return err
					}
				}
				ops = ops[1:]
			}
			return nil
		})
		if err != nil {
			return err
		}
		if pc != nil && len(ops) > 0 {
			if err := db.Sync(); err != nil {
				return err
			}
		}
	}
	return nil
}
