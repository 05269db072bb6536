package mvcc

import (
	"fmt"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/index"
)

// Reset moves the store onto another backend: the one holding a raft
// snapshot a member installs. swap gets the current backend, which nothing
// uses any more when swap runs (no reader, flush or compaction is in
// progress), and returns the new one, typically after closing the old one
// and replacing its files. The writes applied but not committed are dropped:
// the snapshot supersedes them. Afterwards the store reads the new backend's
// consistent index, revisions and compaction marks as Open does, and
// rebuilds the index from it unless built holds it already (an IndexBuilder
// fed the same Key bucket records the new backend holds).
//
// Only the applier may call Reset, never from inside Apply. On error the
// store is failed and refuses writes: the member must stop.
func (s *Store) Reset(swap func(old backend.Backend) (backend.Backend, error), built *BuiltIndex) error {
	c := &s.compactor
	c.runMu.Lock()
	defer c.runMu.Unlock()
	c.mu.Lock()
	for _, j := range c.queue {
		close(j.done)
	}
	c.queue = nil
	c.mu.Unlock()

	r := flushReq{done: make(chan error, 1), reset: func() error {
		s.applyMu.Lock()
		defer s.applyMu.Unlock()
		s.mu.Lock()
		defer s.mu.Unlock()
		nb, err := swap(s.be)
		if err != nil {
			err = fmt.Errorf("reset store: %w", err)
			s.failed = err
			return err
		}
		s.be = nb
		s.idx = index.New()
		s.compactRev = -1
		s.consistentIndex.Store(0)
		s.consistentTerm.Store(0)
		s.active = newWbuf()
		s.stateMu.Lock()
		s.bufs.Store(&bufState{})
		s.stateMu.Unlock()
		scheduled, err := s.restore(built)
		if err != nil {
			err = fmt.Errorf("reset store: %w", err)
			s.failed = err
			return err
		}
		if scheduled > 0 {
			s.compactRev = scheduled
			c.mu.Lock()
			c.queue = append(c.queue, &compactJob{rev: scheduled, done: make(chan struct{})})
			c.mu.Unlock()
			select {
			case c.wake <- struct{}{}:
			default:
			}
		}
		return nil
	}}
	select {
	case s.flusher.reqc <- r:
	case <-s.flusher.donec:
		return errStoreClosed
	}
	return <-r.done
}

// Backend returns the backend the store is on now. A caller that keeps it
// across a Reset uses a closed backend; hold it only for one operation.
func (s *Store) Backend() backend.Backend {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.be
}
