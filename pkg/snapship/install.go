package snapship

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/failpoint"
	"github.com/kvd-dev/kvd/pkg/fsutil"
	"github.com/kvd-dev/kvd/pkg/mvcc"
)

// Installer makes this member's state the one a leader sent with a raft
// snapshot: its Install is the WAL writer's InstallSnapshot.
type Installer struct {
	Stager *Stager
	Store  *mvcc.Store
	// Dir is the live backend's directory; Open opens a backend in it.
	Dir  string
	Open func(dir string) (backend.Backend, error)
	// Apply is the applier's Install: it runs its function once everything
	// handed to the applier before is applied.
	Apply func(ctx context.Context, snap *raftpb.Snapshot, install func() error) error
	// Reload makes everything kept beside the store (members, leases,
	// auth, alarms, watchers) follow the new backend.
	Reload func() error
	Logger *zap.Logger

	// removeAll is os.RemoveAll; tests make it fail part way.
	removeAll func(string) error
}

// Install swaps the backend staged for snap in for the live one.
func (i *Installer) Install(ctx context.Context, snap *raftpb.Snapshot) error {
	index := snap.GetMetadata().GetIndex()
	staged, ok := i.Stager.Take(index)
	if !ok {
		return fmt.Errorf("no data received for the raft snapshot at index %d", index)
	}
	// Gone once moved in place; still there if the install failed.
	defer i.Stager.remove(staged.Dir)
	return i.Apply(ctx, snap, func() error {
		start := time.Now()
		err := i.Store.Reset(func(old backend.Backend) (backend.Backend, error) {
			return i.replace(old, staged.Dir)
		}, staged.Index)
		if err != nil {
			return err
		}
		if err := i.Reload(); err != nil {
			return err
		}
		i.Logger.Info("backend replaced by the leader's snapshot", zap.Uint64("index", index),
			zap.Uint64("consistent-index", i.Store.ConsistentIndex()), zap.Int64("revision", i.Store.Rev()),
			zap.Duration("took", time.Since(start)))
		return nil
	})
}

// While a leader's snapshot is installed, the old backend directory is set
// aside as <dir>.replaced; it is the one the WAL matches until the new
// backend is in place. Then one atomic rename to <dir>.discarded marks the
// switch, and only then is the old one deleted. At start, RecoverDir puts
// back a .replaced directory (the install was interrupted) and deletes a
// .discarded one (its removal was).
const (
	replacedSuffix  = ".replaced"
	discardedSuffix = ".discarded"
)

// replace closes old, moves the staged backend into its directory and
// opens it. The old files stay aside until the switch is durable, so a crash
// leaves the old state or the new, never a mix.
func (i *Installer) replace(old backend.Backend, staged string) (backend.Backend, error) {
	removeAll := i.removeAll
	if removeAll == nil {
		removeAll = os.RemoveAll
	}
	if err := old.Close(); err != nil {
		return nil, fmt.Errorf("close backend: %w", err)
	}
	dir := i.Dir
	aside, discarded := dir+replacedSuffix, dir+discardedSuffix
	for _, d := range []string{aside, discarded} {
		if err := removeAll(d); err != nil {
			return nil, fmt.Errorf("replace backend: %w", err)
		}
	}
	if err := os.Rename(dir, aside); err != nil {
		return nil, fmt.Errorf("replace backend: set aside %s: %w", dir, err)
	}
	if err := fsutil.SyncDir(filepath.Dir(dir)); err != nil {
		return nil, fmt.Errorf("replace backend: %w", err)
	}
	failpoint.Hit(failpoint.InstallAfterAside)
	err := os.Rename(staged, dir)
	if err == nil {
		err = fsutil.SyncDir(filepath.Dir(dir))
	}
	var nb backend.Backend
	if err == nil {
		failpoint.Hit(failpoint.InstallAfterLoad)
		nb, err = i.Open(dir)
	}
	if err == nil {
		if err = commitSwitch(aside, discarded); err != nil {
			err = errors.Join(err, nb.Close())
		}
	}
	if err != nil {
		if rerr := recoverDir(dir, removeAll); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return nil, fmt.Errorf("replace backend: %w", err)
	}
	failpoint.Hit(failpoint.InstallAfterSwitch)
	if err := removeAll(discarded); err != nil {
		i.Logger.Warn("remove replaced backend; the next start removes it", zap.String("dir", discarded), zap.Error(err))
	}
	return nb, nil
}

// commitSwitch makes the new backend the one a restart keeps: the aside
// directory is renamed to its discarded name, durably.
func commitSwitch(aside, discarded string) error {
	if err := os.Rename(aside, discarded); err != nil {
		return fmt.Errorf("mark %s replaced: %w", aside, err)
	}
	return fsutil.SyncDir(filepath.Dir(aside))
}

// RecoverDir finishes what an interrupted install left in the backend
// directory dir: a discarded old backend is deleted; an old backend still
// set aside is put back in place of the new one.
func RecoverDir(dir string) error { return recoverDir(dir, os.RemoveAll) }

func recoverDir(dir string, removeAll func(string) error) error {
	if err := removeAll(dir + discardedSuffix); err != nil {
		return fmt.Errorf("remove replaced backend: %w", err)
	}
	aside := dir + replacedSuffix
	if _, err := os.Stat(aside); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := removeAll(dir); err != nil {
		return fmt.Errorf("restore backend %s: %w", aside, err)
	}
	if err := os.Rename(aside, dir); err != nil {
		return fmt.Errorf("restore backend %s: %w", aside, err)
	}
	return fsutil.SyncDir(filepath.Dir(dir))
}
