// Package engine opens the storage engine a configuration names, with the
// options it gives, and finds which engines a data dir holds. The member
// (pkg/server) and the offline tools (snapshot restore, migrate) open
// backends through it, so all of them open an engine the same way.
package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/backend/badger"
	"github.com/kvd-dev/kvd/pkg/backend/bolt"
	"github.com/kvd-dev/kvd/pkg/config"
	"github.com/kvd-dev/kvd/pkg/fsutil"
	"github.com/kvd-dev/kvd/pkg/progress"
)

// Names are the engines kvd has, as backend.engine spells them.
var Names = []string{"bolt", "badger"}

// Canonical is the engine's name as Names spell it ("bbolt" is "bolt").
func Canonical(name string) (string, error) {
	switch name {
	case "bolt", "bbolt":
		return "bolt", nil
	case "badger":
		return "badger", nil
	}
	return "", fmt.Errorf("unknown engine %q (want bolt or badger)", name)
}

// Open opens engine name in dir with the engine options of c.
func Open(c *config.Config, name, dir string, lg *zap.Logger) (backend.Backend, error) {
	name, err := Canonical(name)
	if err != nil {
		return nil, fmt.Errorf("backend.engine: %w", err)
	}
	opts := backend.Options{Dir: dir, Sync: !c.UnsafeNoFsync}
	var be backend.Backend
	switch name {
	case "bolt":
		be, err = bolt.Open(opts, bolt.Options{
			InitialMmapSize: int(c.BoltInitialMmapSize()),
			FreelistType:    c.Backend.Bolt.FreelistType,
			NoSync:          c.UnsafeNoFsync,
			Logger:          lg.Named("bolt"),
		})
	case "badger":
		be, err = badger.Open(opts, badger.Options{
			Logger:           lg.Named("badger"),
			MaxUpdateBytes:   badgerMaxUpdateBytes,
			MemTableSize:     c.Backend.Badger.MemTableBytes(),
			ValueLogFileSize: c.Backend.Badger.ValueLogFileSize,
			NumCompactors:    c.Backend.Badger.NumCompactors,
			ValueThreshold:   c.Backend.Badger.ValueThreshold,
			BlockCacheSize:   c.Backend.Badger.BlockCacheSize,
		})
	}
	if err != nil {
		return nil, fmt.Errorf("open %s backend in %s: %w", name, dir, err)
	}
	return be, nil
}

// badgerMaxUpdateBytes is the least a Badger update must hold: the MVCC
// store commits its buffer at 8 MiB (mvcc.Options.BatchBytes) and writes
// one that outgrew an update in parts of at most that (pkg/mvcc/split.go).
// Badger's update limit is 15% of its memtable, so the memtable is at least
// config.BadgerMinMemTableSize.
const badgerMaxUpdateBytes = 8 << 20

// IndexFile is where the store keeps the key index between a clean stop
// and the next start for the backend in dir (mvcc.Options.IndexFile).
func IndexFile(dir string) string { return dir + ".index" }

// Present lists the engines that have a backend directory under snapDir
// (<data-dir>/member/snap), in Names order.
func Present(snapDir string) ([]string, error) {
	var found []string
	for _, n := range Names {
		_, err := os.Stat(filepath.Join(snapDir, n))
		switch {
		case err == nil:
			found = append(found, n)
		case !errors.Is(err, os.ErrNotExist):
			return nil, err
		}
	}
	return found, nil
}

// ErrNoSpace is returned (wrapped) when a disk has too little free space
// for a load, or filled during one.
var ErrNoSpace = errors.New("not enough disk space")

// CheckLoadSpace refuses to load dataBytes of records into a new engine
// name in dir when the disk cannot hold them and that engine would not fail
// cleanly. Bolt reports a full disk as a write error, which the loader
// turns into a clean failure, so for it there is nothing to check. Badger
// writes its memtable log through a memory map, where a full disk is a
// SIGBUS that kills the process: it needs room for the data and for the
// memtables the load fills on the way (two at most, config.Badger.MemTableBytes).
func CheckLoadSpace(c *config.Config, name, dir string, dataBytes int64) error {
	if name != "badger" {
		return nil
	}
	free, ok := fsutil.FreeBytes(dir)
	if !ok {
		return nil
	}
	memtable := c.Backend.Badger.MemTableBytes()
	need := dataBytes + min(dataBytes, 2*memtable) + 16<<20
	if free < need {
		return fmt.Errorf("%w: %s has %s free; a badger copy of %s of data needs about %s", ErrNoSpace, dir,
			progress.Bytes(free), progress.Bytes(dataBytes), progress.Bytes(need))
	}
	return nil
}
