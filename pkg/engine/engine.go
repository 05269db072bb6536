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
			InitialMmapSize: int(c.Backend.Bolt.InitialMmapSize),
			FreelistType:    c.Backend.Bolt.FreelistType,
			NoSync:          c.UnsafeNoFsync,
		})
	case "badger":
		be, err = badger.Open(opts, badger.Options{
			Logger: lg.Named("badger"),
			// The store's flushes stay under ~16 MiB (its 8 MiB buffer plus
			// one applied batch); Badger's default memtable for 64 MiB
			// updates is ~430 MiB, zeroed at open and heavy on the heap.
			MaxUpdateBytes:   24 << 20,
			MemTableSize:     c.Backend.Badger.MemTableSize,
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
