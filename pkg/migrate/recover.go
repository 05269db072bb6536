package migrate

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/engine"
	"github.com/kvd-dev/kvd/pkg/fsutil"
)

// How a migration replaces one engine's backend directory with another's,
// and why a crash at any point leaves exactly one live backend.
//
// The live backend of a member is <snap>/<engine> (engine.Present finds it).
// Run builds the new backend in <snap>/<to>.migrate, which is never live,
// verifies it, makes it durable, and then switches with two renames in the
// same directory, each followed by an fsync of <snap>:
//
//  1. <snap>/<from>        -> <snap>/<from>.migrated  (source set aside)
//  2. <snap>/<to>.migrate  -> <snap>/<to>             (commit point)
//  3. remove <snap>/<from>.migrated
//
// At no instant are two engines live, so neither kvd nor a later migrate
// can ever pick a stale one. What a crash leaves, and what Recover (run by
// every migrate first and by kvd at start, before it opens a backend) does:
//
//   - before 1: <from> live, maybe a partial <to>.migrate. The source was
//     only read. Recover removes <to>.migrate.
//   - between 1 and 2: no live backend, <from>.migrated and a complete
//     <to>.migrate. Recover rolls back: <from>.migrated is renamed back to
//     <from> (fsynced), then <to>.migrate removed. Nothing was reported as
//     done, so rolling back is what the user expects.
//   - after 2: <to> live, <from>.migrated left over (maybe half removed).
//     Recover deletes <from>.migrated.
//
// So the rule is: a .migrated directory beside a live backend is garbage;
// one without a live backend is the live backend, put back; a .migrate
// directory is always garbage. The fsync after each rename orders the two
// renames on disk, so "<to> present" implies "<from> set aside" after a
// power cut too. Migrate holds the data-dir lock throughout, so no member
// runs on the files meanwhile; it keeps at most one .migrated directory at
// a time (a stale <to> it replaces is removed before step 1).
const (
	tempSuffix     = ".migrate"
	migratedSuffix = ".migrated"
)

// removeAll is os.RemoveAll; tests make it fail.
var removeAll = os.RemoveAll

// Recover finishes or undoes what an interrupted kvd migrate left in snapDir
// (<data-dir>/member/snap), as described above, and logs what it did. It
// does nothing when there is nothing to do.
func Recover(snapDir string, lg *zap.Logger) error {
	if lg == nil {
		lg = zap.NewNop()
	}
	live, err := engine.Present(snapDir)
	if err != nil {
		return fmt.Errorf("recover interrupted migrate in %s: %w", snapDir, err)
	}
	changed := false
	for _, n := range engine.Names {
		aside := filepath.Join(snapDir, n+migratedSuffix)
		if ok, err := exists(aside); err != nil {
			return fmt.Errorf("recover interrupted migrate: %w", err)
		} else if !ok {
			continue
		}
		changed = true
		if len(live) > 0 {
			lg.Warn("removing the old backend of a kvd migrate that was interrupted after it switched engines",
				zap.String("dir", aside), zap.Strings("live", live))
			if err := removeAll(aside); err != nil {
				return fmt.Errorf("recover interrupted migrate: remove %s: %w", aside, err)
			}
			continue
		}
		dir := filepath.Join(snapDir, n)
		lg.Warn("putting back the backend of a kvd migrate that was interrupted before it switched engines",
			zap.String("dir", dir))
		if err := os.Rename(aside, dir); err != nil {
			return fmt.Errorf("recover interrupted migrate: put back %s: %w", aside, err)
		}
		if err := fsutil.SyncDir(snapDir); err != nil {
			return fmt.Errorf("recover interrupted migrate: %w", err)
		}
		live = []string{n}
	}
	for _, n := range engine.Names {
		tmp := filepath.Join(snapDir, n+tempSuffix)
		if ok, err := exists(tmp); err != nil {
			return fmt.Errorf("recover interrupted migrate: %w", err)
		} else if !ok {
			continue
		}
		changed = true
		lg.Warn("removing the partial backend of an interrupted kvd migrate", zap.String("dir", tmp))
		if err := removeAll(tmp); err != nil {
			return fmt.Errorf("recover interrupted migrate: remove %s: %w", tmp, err)
		}
	}
	if err := removeIndexFiles(snapDir, live); err != nil {
		return fmt.Errorf("recover interrupted migrate: %w", err)
	}
	if changed {
		return fsutil.SyncDir(snapDir)
	}
	return nil
}

// removeIndexFiles removes the index file (engine.IndexFile) of every
// engine in snapDir but live's: one left beside a backend that is gone, or
// beside the backend a migrate just wrote, describes no backend there is
// (a live engine's own is the store's to check at its start).
func removeIndexFiles(snapDir string, live []string) error {
	for _, n := range engine.Names {
		if slices.Contains(live, n) {
			continue
		}
		path := engine.IndexFile(filepath.Join(snapDir, n))
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", path, err)
		}
	}
	return nil
}

func exists(path string) (bool, error) {
	_, err := os.Lstat(path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	}
	return false, err
}
