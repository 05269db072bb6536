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

// replacedSuffix names the backend directory set aside while a snapshot
// loads; newBackend puts it back if a crash interrupted the load.
const replacedSuffix = ".replaced"

// replaceBackend closes old, loads the dump r into a fresh backend in the
// engine's directory and returns it. The old files stay aside until the new
// ones are synced, so a crash or a bad dump leaves the old state.
func replaceBackend(c *config.Config, lg *zap.Logger, old backend.Backend, r io.Reader) (backend.Backend, error) {
	if err := old.Close(); err != nil {
		return nil, fmt.Errorf("close backend: %w", err)
	}
	dir := c.BackendDir()
	aside := dir + replacedSuffix
	if err := os.RemoveAll(aside); err != nil {
		return nil, fmt.Errorf("replace backend: %w", err)
	}
	if err := os.Rename(dir, aside); err != nil {
		return nil, fmt.Errorf("replace backend: set aside %s: %w", dir, err)
	}
	if err := fsutil.SyncDir(filepath.Dir(dir)); err != nil {
		return nil, fmt.Errorf("replace backend: %w", err)
	}
	nb, err := openBackend(c, lg)
	if err == nil {
		err = backend.Load(nb, r, loadBatchBytes)
		if err == nil {
			err = nb.Sync()
		}
		if err != nil {
			err = errors.Join(err, nb.Close())
		}
	}
	if err != nil {
		if rerr := restoreAside(dir); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return nil, fmt.Errorf("replace backend: %w", err)
	}
	if err := os.RemoveAll(aside); err != nil {
		lg.Warn("remove replaced backend", zap.String("dir", aside), zap.Error(err))
	}
	return nb, nil
}

// restoreAside puts back a backend directory set aside by an interrupted
// replaceBackend.
func restoreAside(dir string) error {
	aside := dir + replacedSuffix
	if _, err := os.Stat(aside); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("restore backend %s: %w", aside, err)
	}
	if err := os.Rename(aside, dir); err != nil {
		return fmt.Errorf("restore backend %s: %w", aside, err)
	}
	return fsutil.SyncDir(filepath.Dir(dir))
}
