package badger

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/pb"
	"github.com/dgraph-io/ristretto/v2/z"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/backend/internal/defrag"
	"github.com/kvd-dev/kvd/pkg/fsutil"
)

// copyBatch is how many bytes of keys and values the copy hands the
// StreamWriter at a time.
const copyBatch = 4 << 20

// journal is the shared Defrag journal of this engine's writes.
type journal = defrag.Journal[op]

// op is one committed write of a stored key: a put of value, or a delete.
type op struct {
	key, value []byte
	del        bool
}

// Defrag copies the live data into a new database and swaps it in, as bolt's
// defragment copies into a new file. That copy is what reclaims space on
// Badger: its own garbage collection (value-log GC, compactions) cannot be
// relied on to give space back, as it never rewrites the value log file
// being written, keeps memtable logs at full size, and drops old versions
// only as compactions happen to reach them. A copy holds just the latest
// version of each live key, in fresh sorted tables (Badger's StreamWriter),
// with no value log beyond what later writes add. Defrag logs the size
// before and after, and the time it took.
//
// The copy reads a snapshot and does not hold writeMu: Updates go on
// committing to the live database and, while a Defrag runs, also record
// their writes in its journal. Once the copy is done Defrag replays the
// journal into the new database in a few rounds, then takes writeMu,
// replays the rest, syncs the new database, points CURRENT at it and swaps
// it in. Writers wait only for that last step, unless the journal fills up
// (defrag.JournalMax).
//
// The new database is synced before CURRENT names it, so a crash at any
// point leaves either the old or the new data live, and Open removes the
// other; an error before CURRENT names the new database removes it and
// leaves the old one live. Readers never wait: those that pinned the old
// database keep reading it; it is closed and removed in the background once
// they are done (Close waits for that).
func (be *Backend) Defrag() error {
	if !be.gate.Enter() {
		return backend.ErrClosed
	}
	defer be.gate.Exit()
	be.defragMu.Lock()
	defer be.defragMu.Unlock()
	start := time.Now()
	// Size between walks is an estimate; measure both ends.
	be.remeasure()
	before := be.Size()
	old, st, err := be.swapInCopy()
	if err != nil {
		be.lg.Warn("badger defrag failed", zap.String("dir", be.root), zap.Duration("took", time.Since(start)), zap.Error(err))
		return err
	}
	be.remeasure()
	be.retiring.Add(1)
	go be.retire(old)
	after := be.Size()
	be.lg.With(st.Fields()...).Info("badger defrag done",
		zap.String("old-dir", old.dir), zap.String("new-dir", be.pinDir()),
		zap.Int64("size-before", before), zap.Int64("size-after", after),
		zap.Int64("reclaimed", before-after),
		zap.Duration("took", time.Since(start)))
	return nil
}

func (be *Backend) pinDir() string {
	s := be.pin()
	defer s.readers.Done()
	return s.dir
}

// retire closes and removes a replaced store once no reader pins it. A
// failure only leaves files behind, which the next Open removes.
func (be *Backend) retire(old *store) {
	defer be.retiring.Done()
	old.readers.Wait()
	if err := old.db.Close(); err != nil {
		be.lg.Warn("defrag: close replaced badger db", zap.String("dir", old.dir), zap.Error(err))
	}
	if err := os.RemoveAll(old.dir); err != nil {
		be.lg.Warn("defrag: remove replaced badger db", zap.String("dir", old.dir), zap.Error(err))
	}
}

// swapInCopy copies the live store into a new subdirectory, replays the
// journal into it, points CURRENT at it and makes it the live store. It
// returns the replaced store, which readers may still pin.
func (be *Backend) swapInCopy() (*store, defrag.Stats, error) {
	name := newDataName()
	dir := filepath.Join(be.root, name)
	db, err := badger.Open(be.opts.badgerOptions(dir, be.sync))
	if err != nil {
		return nil, defrag.Stats{}, fmt.Errorf("defrag: open badger db %s: %w", dir, err)
	}
	t := &badgerCopy{be: be, db: db, name: name, dir: dir}
	// Only Defrag replaces cur, and defragMu keeps this one the only
	// Defrag, so cur read under writeMu in Snapshot is the store Swap
	// replaces.
	st, err := defrag.Run(&be.writeMu, &be.journal, t)
	if err != nil {
		return nil, st, err
	}
	return t.old, st, nil
}

// badgerCopy is the new database of a Defrag (defrag.Target), in its own
// subdirectory until CURRENT names it.
type badgerCopy struct {
	be        *Backend
	db        *badger.DB
	name, dir string
	old       *store // the live store the snapshot was taken of
}

func (c *badgerCopy) Snapshot() (func(*defrag.Pacer) error, func(), error) {
	c.old = c.be.cur
	snap := c.old.db.NewTransaction(false)
	copyFn := func(pc *defrag.Pacer) error {
		if err := copySnapshot(snap, c.db, pc); err != nil {
			return fmt.Errorf("%s to %s: %w", c.old.dir, c.dir, err)
		}
		return nil
	}
	return copyFn, snap.Discard, nil
}

func (c *badgerCopy) Replay(ops []op, pc *defrag.Pacer) error {
	if err := replay(c.db, ops, pc); err != nil {
		return fmt.Errorf("into %s: %w", c.dir, err)
	}
	return nil
}

func (c *badgerCopy) Sync() error {
	if err := c.db.Sync(); err != nil {
		return fmt.Errorf("%s: %w", c.dir, err)
	}
	return nil
}

// Swap points CURRENT at the new database and makes it the live store.
func (c *badgerCopy) Swap() error {
	// Badger does not sync the directory entries of the tables it creates.
	if err := fsutil.SyncDir(c.dir); err != nil {
		return err
	}
	if err := writeCurrent(c.be.root, c.name); err != nil {
		// The rename may have happened before the failure (syncing the
		// directory): then the new database is live on disk, and must be
		// here too.
		if live, rerr := readCurrent(c.be.root); rerr != nil || live != c.name {
			return err
		}
		c.be.lg.Warn("badger defrag: CURRENT names the new database but writing it failed", zap.String("dir", c.dir), zap.Error(err))
	}
	// The old store closes once its readers are done. Run holds writeMu,
	// so no view of it is shared from here on.
	c.be.curMu.Lock()
	c.be.cur = &store{db: c.db, dir: c.dir}
	c.be.curMu.Unlock()
	return nil
}

func (c *badgerCopy) Abort() {
	_ = c.db.Close()
	_ = os.RemoveAll(c.dir)
}

// copySnapshot writes the latest version of every live kvd key that snap
// sees into the empty dst, straight into sorted tables (Badger's
// StreamWriter). Badger's Stream cannot read at a given snapshot outside
// managed mode, so this iterates snap itself, at the pace pc sets.
func copySnapshot(snap *badger.Txn, dst *badger.DB, pc *defrag.Pacer) error {
	sw := dst.NewStreamWriter()
	defer sw.Cancel()
	if err := sw.Prepare(); err != nil {
		return err
	}
	buf := z.NewBuffer(2*copyBatch, "kvd.defrag")
	defer func() { _ = buf.Release() }()
	it := snap.NewIterator(badger.IteratorOptions{Prefix: []byte{nsData}, PrefetchValues: true, PrefetchSize: 100})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		item := it.Item()
		err := item.Value(func(v []byte) error {
			pc.Add(len(item.Key()) + len(v))
			badger.KVToBuffer(&pb.KV{Key: item.Key(), Value: v, Version: item.Version()}, buf)
			return nil
		})
		if err != nil {
			return err
		}
		if buf.LenNoPadding() >= copyBatch {
			if err := sw.Write(buf); err != nil {
				return err
			}
			buf.Reset()
		}
	}
	if err := sw.Write(buf); err != nil {
		return err
	}
	return sw.Flush()
}

// replay applies journal writes to db in order, as few transactions as
// Badger's transaction size allows. Each gets a commit timestamp above
// every copied version, so it overrides the copy. A non-nil pc sets the
// pace (the rounds without writeMu).
func replay(db *badger.DB, ops []op, pc *defrag.Pacer) error {
	for len(ops) > 0 {
		txn := db.NewTransaction(true)
		n := 0
		for _, o := range ops {
			var err error
			if o.del {
				err = txn.Delete(o.key)
			} else {
				err = txn.Set(o.key, o.value)
			}
			if errors.Is(err, badger.ErrTxnTooBig) && n > 0 {
				break // commit what fits, go on in the next one
			}
			if err != nil {
				txn.Discard()
				return err
			}
			pc.Add(len(o.key) + len(o.value))
			n++
		}
		if err := txn.Commit(); err != nil {
			return err
		}
		ops = ops[n:]
	}
	return nil
}

// newDataName names a fresh data subdirectory.
func newDataName() string {
	return fmt.Sprintf("%s-%d", defaultDataDir, time.Now().UnixNano())
}
