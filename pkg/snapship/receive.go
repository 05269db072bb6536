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
	"github.com/kvd-dev/kvd/pkg/mvcc"
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
	staged map[uint64]Staged // by snapshot index
}

// Staged is a snapshot's backend, complete and synced, with its key index.
type Staged struct {
	Dir   string
	Index *mvcc.BuiltIndex
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
	return &Stager{dir: dir, open: open, lg: lg, staged: map[uint64]Staged{}}, nil
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
	// The key index is built from the records on their way to the engine,
	// so the install need not scan the new backend. Load reads data to its
	// end, where the transport checks its own checksum.
	ib := mvcc.NewIndexBuilder()
	err = backend.LoadEach(be, data, LoadBatchBytes, func(b backend.Bucket, k, v []byte) error {
		if b == backend.Key {
			return ib.Add(k, v)
		}
		return nil
	})
	var built *mvcc.BuiltIndex
	if err == nil {
		built, err = ib.Finish()
	} else {
		ib.Abort()
	}
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
		s.remove(old.Dir)
	}
	s.staged[index] = Staged{Dir: dir, Index: built}
	return nil
}

// Take returns what is staged for the snapshot at index and forgets it, and
// removes older ones raft passed over.
func (s *Stager) Take(index uint64) (Staged, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.staged[index]
	for i, d := range s.staged {
		if i <= index {
			if i != index {
				s.remove(d.Dir)
			}
			delete(s.staged, i)
		}
	}
	return st, ok
}

func (s *Stager) remove(dir string) {
	if err := os.RemoveAll(dir); err != nil {
		s.lg.Warn("remove a staged snapshot; the next start removes it", zap.String("dir", filepath.Base(dir)), zap.Error(err))
	}
}
