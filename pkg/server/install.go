package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/alarms"
	"github.com/kvd-dev/kvd/pkg/apply"
	"github.com/kvd-dev/kvd/pkg/authz"
	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/config"
	"github.com/kvd-dev/kvd/pkg/failpoint"
	"github.com/kvd-dev/kvd/pkg/fsutil"
	"github.com/kvd-dev/kvd/pkg/leasemgr"
	"github.com/kvd-dev/kvd/pkg/membership"
	"github.com/kvd-dev/kvd/pkg/mvcc"
	"github.com/kvd-dev/kvd/pkg/watchhub"
)

// loadBatchBytes sizes the updates a received dump is loaded in (under
// Badger's update limit).
const loadBatchBytes = 4 << 20

// snapshotInstaller makes this member's state the one a leader sent with a
// raft snapshot: it is the WAL writer's InstallSnapshot.
type snapshotInstaller struct {
	c       *config.Config
	st      *mvcc.Store
	cl      *membership.Cluster
	leases  *leasemgr.Manager
	auth    *authz.Store
	alarms  *alarms.Store
	hub     *watchhub.Hub
	link    *peerLink
	applier *apply.Applier
	lg      *zap.Logger
}

func (i *snapshotInstaller) install(ctx context.Context, snap *raftpb.Snapshot) error {
	index := snap.GetMetadata().GetIndex()
	path, ok := i.link.take(index)
	if !ok {
		return fmt.Errorf("no data received for the raft snapshot at index %d", index)
	}
	defer os.Remove(path)
	return i.applier.Install(ctx, snap, func() error {
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("open received snapshot: %w", err)
		}
		defer f.Close()
		err = i.st.Reset(func(old backend.Backend) (backend.Backend, error) {
			return replaceBackend(i.c, i.lg, old, f)
		})
		if err != nil {
			return err
		}
		var ld membership.Loader
		if err := i.st.Members(ld.Add); err != nil {
			return err
		}
		ld.RestoreInto(i.cl)
		if i.leases != nil {
			if err := i.leases.Reload(i.st); err != nil {
				return err
			}
		}
		if err := i.auth.Load(i.st.AuthRecords); err != nil {
			return err
		}
		if i.alarms != nil {
			if err := i.alarms.Load(i.st.AlarmRecords); err != nil {
				return err
			}
		}
		i.hub.Resync()
		i.lg.Info("backend replaced by the leader's snapshot", zap.Uint64("index", index),
			zap.Uint64("consistent-index", i.st.ConsistentIndex()), zap.Int64("revision", i.st.Rev()))
		return nil
	})
}

// While a leader's snapshot loads, the old backend directory is set aside
// as <dir>.replaced; it is the one the WAL matches until the new backend is
// complete. Once the new one is synced, one atomic rename to
// <dir>.discarded marks the switch, and only then is the old one deleted.
// At start, recoverBackendDir puts back a .replaced directory (the load was
// interrupted) and deletes a .discarded one (its removal was).
const (
	replacedSuffix  = ".replaced"
	discardedSuffix = ".discarded"
)

// removeAll is os.RemoveAll; tests make it fail part way.
var removeAll = os.RemoveAll

// replaceBackend closes old, loads the dump r into a fresh backend in the
// engine's directory and returns it. The old files stay aside until the new
// ones are synced, so a crash or a bad dump leaves the old state.
func replaceBackend(c *config.Config, lg *zap.Logger, old backend.Backend, r io.Reader) (backend.Backend, error) {
	if err := old.Close(); err != nil {
		return nil, fmt.Errorf("close backend: %w", err)
	}
	dir := c.BackendDir()
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
	nb, err := openBackend(c, lg)
	if err == nil {
		err = backend.Load(nb, r, loadBatchBytes)
		if err == nil {
			err = nb.Sync()
		}
		if err == nil {
			failpoint.Hit(failpoint.InstallAfterLoad)
			err = commitSwitch(aside, discarded)
		}
		if err != nil {
			err = errors.Join(err, nb.Close())
		}
	}
	if err != nil {
		if rerr := recoverBackendDir(dir); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return nil, fmt.Errorf("replace backend: %w", err)
	}
	failpoint.Hit(failpoint.InstallAfterSwitch)
	if err := removeAll(discarded); err != nil {
		lg.Warn("remove replaced backend; the next start removes it", zap.String("dir", discarded), zap.Error(err))
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

// recoverBackendDir finishes what an interrupted replaceBackend left: a
// discarded old backend is deleted; an old backend still set aside is put
// back in place of the partial new one.
func recoverBackendDir(dir string) error {
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
