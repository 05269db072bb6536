package badger

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/dgraph-io/badger/v4"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/backend"
)

// Defrag copies the live data into a new database and swaps it in, as bolt's
// defragment copies into a new file. Badger's own garbage collection cannot
// be relied on to give space back: it never rewrites the value log file being
// written, keeps memtable logs at full size, and drops old versions only as
// compactions happen to reach them. A copy holds just the latest version of
// each live key.
//
// Writers wait while the copy runs; readers do not. The new database is
// synced before CURRENT names it, so a crash at any point leaves either the
// old or the new data live, and Open removes the other. Readers that pinned
// the old database keep reading it; it is closed and removed in the
// background once they are done (Close waits for that).
func (be *Backend) Defrag() error {
	if !be.gate.Enter() {
		return backend.ErrClosed
	}
	defer be.gate.Exit()
	old, err := be.swapInCopy()
	if err != nil {
		return err
	}
	be.remeasure()
	be.retiring.Add(1)
	go be.retire(old)
	return nil
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

// swapInCopy copies the live store into a new subdirectory, points CURRENT
// at it and makes it the live store. It returns the replaced store, which
// readers may still pin.
func (be *Backend) swapInCopy() (*store, error) {
	be.writeMu.Lock()
	defer be.writeMu.Unlock()
	old := be.cur
	name := newDataName()
	dir := filepath.Join(be.root, name)
	db, err := badger.Open(be.opts.badgerOptions(dir, be.sync))
	if err != nil {
		return nil, fmt.Errorf("defrag: open badger db %s: %w", dir, err)
	}
	abandon := func(err error) (*store, error) {
		_ = db.Close()
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if err := copyLive(old.db, db); err != nil {
		return abandon(fmt.Errorf("defrag: copy %s to %s: %w", old.dir, dir, err))
	}
	if err := db.Sync(); err != nil {
		return abandon(fmt.Errorf("defrag: sync %s: %w", dir, err))
	}
	if err := writeCurrent(be.root, name); err != nil {
		return abandon(fmt.Errorf("defrag: %w", err))
	}
	be.curMu.Lock()
	be.cur = &store{db: db, dir: dir}
	be.curMu.Unlock()
	return old, nil
}

// copyLive writes the latest version of every live kvd key of src into the
// empty dst, straight into sorted tables (Badger's StreamWriter).
func copyLive(src, dst *badger.DB) error {
	sw := dst.NewStreamWriter()
	defer sw.Cancel()
	if err := sw.Prepare(); err != nil {
		return err
	}
	stream := src.NewStream()
	stream.Prefix = []byte{nsData}
	stream.LogPrefix = "kvd defrag"
	stream.NumGo = 2 // bound memory; the copy is bound by writing anyway
	stream.Send = sw.Write
	if err := stream.Orchestrate(context.Background()); err != nil {
		return err
	}
	return sw.Flush()
}

// newDataName names a fresh data subdirectory.
func newDataName() string {
	return fmt.Sprintf("%s-%d", defaultDataDir, time.Now().UnixNano())
}
