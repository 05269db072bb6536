package snapship

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/fsutil"
)

// LoadBatchBytes sizes the updates a received dump is loaded in, for an
// engine that has no bulk load (under Badger's update limit).
const LoadBatchBytes = 4 << 20

// Stager loads the snapshots a leader sends into new backends, each in a
// directory of its own under Dir, complete and synced before raft hears of
// them. Installer takes them from there.
type Stager struct {
	dir  string
	open func(dir string) (backend.Backend, error)
	lg   *zap.Logger

	mu     sync.Mutex
	staged map[uint64]string // snapshot index -> backend directory
}

// NewStager returns a Stager that stages backends under dir, opened with
// open. Whatever a crash left in dir is deleted: raft asks the leader
// again.
func NewStager(dir string, open func(dir string) (backend.Backend, error), lg *zap.Logger) (*Stager, error) {
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("clear %s: %w", dir, err)
	}
	if err := fsutil.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	return &Stager{dir: dir, open: open, lg: lg, staged: map[uint64]string{}}, nil
}

// Receive is the transport's ReceiveSnapshot: it loads data into a new
// backend as it arrives and keeps it, synced, for the snapshot's index. A
// dump that is broken anywhere, or a stream that is, leaves nothing.
func (s *Stager) Receive(m *raftpb.Message, data io.Reader) (err error) {
	index := m.GetSnapshot().GetMetadata().GetIndex()
	start := time.Now()
	dir, err := os.MkdirTemp(s.dir, fmt.Sprintf("%016x-*", index))
	if err != nil {
		return fmt.Errorf("stage snapshot: %w", err)
	}
	defer func() {
		if err != nil {
			if rerr := os.RemoveAll(dir); rerr != nil {
				s.lg.Warn("remove a partly received snapshot; the next start removes it", zap.String("dir", dir), zap.Error(rerr))
			}
		}
	}()
	be, err := s.open(dir)
	if err != nil {
		return fmt.Errorf("stage snapshot: %w", err)
	}
	// Load reads data to its end, where the transport checks its own
	// checksum.
	err = backend.Load(be, data, LoadBatchBytes)
	if err == nil {
		err = be.Sync()
	}
	if cerr := be.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = errors.Join(fsutil.SyncDir(dir), fsutil.SyncDir(s.dir))
	}
	if err != nil {
		return fmt.Errorf("receive snapshot at index %d: %w", index, err)
	}
	s.lg.Info("received snapshot", zap.Uint64("index", index), zap.String("from", fmt.Sprintf("%x", m.GetFrom())),
		zap.Duration("took", time.Since(start)))
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.staged[index]; ok {
		s.remove(old)
	}
	s.staged[index] = dir
	return nil
}

// Take returns the backend directory staged for the snapshot at index and
// forgets it, and removes older ones raft passed over.
func (s *Stager) Take(index uint64) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	dir, ok := s.staged[index]
	for i, d := range s.staged {
		if i <= index {
			if i != index {
				s.remove(d)
			}
			delete(s.staged, i)
		}
	}
	return dir, ok
}

func (s *Stager) remove(dir string) {
	if err := os.RemoveAll(dir); err != nil {
		s.lg.Warn("remove a staged snapshot; the next start removes it", zap.String("dir", filepath.Base(dir)), zap.Error(err))
	}
}
