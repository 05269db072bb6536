package mvcc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/actors"
	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/failpoint"
	"github.com/kvd-dev/kvd/pkg/index"
)

// Compact compacts the store at rev: reads below rev fail with ErrCompacted
// once the batch is applied, and the history they would need is deleted.
//
// It returns ErrCompacted if rev <= CompactRev (with a channel that closes
// when the compactions scheduled before are done, as etcd's barrier), and
// ErrFutureRev if rev > the batch's revision. Otherwise it records
// scheduledCompactRev in this batch, and once the batch is applied the
// compactor compacts the index and deletes the compacted revisions from the
// backend in chunks, each its own backend.Update, so writes are never stalled
// for long; the returned channel closes when that is done and
// finishedCompactRev is written. If the member stops before, Open resumes it.
func (b *Batch) Compact(rev int64) (<-chan struct{}, error) {
	if rev <= b.compactRev {
		barrier := &compactJob{barrier: true, done: make(chan struct{})}
		b.compactions = append(b.compactions, barrier)
		return barrier.done, ErrCompacted
	}
	if rev > b.rev {
		return nil, ErrFutureRev
	}
	b.putMeta(metaScheduledCompact, revToBytes(index.Revision{Main: rev}, false))
	job := &compactJob{rev: rev, prev: b.compactRev, hash: true, done: make(chan struct{})}
	b.compactRev = rev
	b.compactions = append(b.compactions, job)
	return job.done, nil
}

// compactJob is one compaction for the compactor, or a barrier that only
// marks the point in its queue.
type compactJob struct {
	rev int64
	// prev is the compaction revision before this one; hash tells the
	// compactor to hash the key space at rev under prev as it scans (not
	// for a compaction resumed at Open: part of it may be deleted).
	prev    int64
	hash    bool
	barrier bool
	done    chan struct{}
}

// compactor runs compactions in the order they were applied, on one
// goroutine: an actor (Run) the member runs in its actor group (Options
// ExternalCompactor), or a goroutine the Store starts itself. A compaction
// that fails ends it for good, with the reason: the member must stop, and
// the next Open resumes the compaction.
type compactor struct {
	s     *Store
	limit int // revisions scanned per backend.Update

	mu    sync.Mutex
	queue []*compactJob
	// started is set when Run begins; err is why it ended, set (under mu)
	// before ended closes.
	started bool
	err     error
	ended   chan struct{}
	// runMu is held while a job runs; Reset takes it to pause the compactor.
	runMu sync.Mutex

	wake     chan struct{}
	stopc    chan struct{}
	stopOnce sync.Once

	// afterChunk, when set (tests), is called after each committed chunk.
	afterChunk func(rev int64)
}

func (c *compactor) init(s *Store, limit int) {
	c.s = s
	c.limit = limit
	c.wake = make(chan struct{}, 1)
	c.stopc = make(chan struct{})
	c.ended = make(chan struct{})
}

// enqueue hands jobs to the compactor without blocking.
func (c *compactor) enqueue(jobs []*compactJob) {
	c.mu.Lock()
	c.queue = append(c.queue, jobs...)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// stop ends Run, waiting for the chunk it is deleting; Run not started yet
// will not start.
func (c *compactor) stop() {
	c.stopOnce.Do(func() { close(c.stopc) })
	c.mu.Lock()
	started := c.started
	c.mu.Unlock()
	if started {
		<-c.ended
	}
}

func (c *compactor) stopped(ctx context.Context) bool {
	select {
	case <-c.stopc:
		return true
	case <-ctx.Done():
		return true
	default:
		return false
	}
}

// Run runs the compactions until ctx is done or the store closes (nil), or
// one fails (the reason). Unfinished jobs are then left undone: their
// waiters watch Store.CompactorDone.
func (c *compactor) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.started {
		c.mu.Unlock()
		return errors.New("mvcc compactor already running")
	}
	c.started = true
	c.mu.Unlock()
	err := c.run(ctx)
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
	close(c.ended)
	if errors.Is(err, errCompactorStopped) {
		return nil
	}
	return err
}

func (c *compactor) run(ctx context.Context) error {
	for {
		if c.stopped(ctx) {
			return errCompactorStopped
		}
		c.mu.Lock()
		var job *compactJob
		if len(c.queue) > 0 {
			job = c.queue[0]
			c.queue = c.queue[1:]
		}
		c.mu.Unlock()
		if job == nil {
			select {
			case <-c.wake:
			case <-c.stopc:
			case <-ctx.Done():
			}
			continue
		}
		if job.barrier {
			close(job.done)
			continue
		}
		c.runMu.Lock()
		err := c.compact(ctx, job)
		c.runMu.Unlock()
		if err != nil {
			return err
		}
		close(job.done)
	}
}

var errCompactorStopped = errors.New("mvcc: compactor stopped")

// CompactorDone is closed once the compactor ended: the store was closed,
// the context of its Run was cancelled, or a compaction failed
// (CompactorErr tells which). A compaction's done channel then never
// closes unless it finished before.
func (s *Store) CompactorDone() <-chan struct{} { return s.compactor.ended }

// CompactorErr is why the compactor ended (nil while it runs): the failure
// of a compaction, or an error that says it was stopped.
func (s *Store) CompactorErr() error {
	c := &s.compactor
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Compactor is the actor that runs the store's compactions, for a store
// opened with Options.ExternalCompactor: it returns nil when ctx is done or
// the store closes, or the error of a compaction that failed (the member
// must stop; the next Open resumes the compaction). It runs once.
func (s *Store) Compactor() actors.Actor { return actors.Func(s.compactor.Run) }

// compact compacts the index at rev and deletes from the Key bucket every
// revision <= rev that the index no longer holds.
//
// It first commits the buffered writes: they include every revision <= rev
// and the scheduledCompactRev mark, which must be in the backend before any
// deletion, or a deleted revision could be written back by a later commit,
// and a crash could leave deletions without the mark that resumes them.
//
// A job that hashes also feeds every scanned revision to etcd's kvHasher
// (before deleting it) and stores the hash once done.
func (c *compactor) compact(ctx context.Context, job *compactJob) error {
	rev := job.rev
	lg := c.s.lg
	if err := c.s.Flush(); err != nil {
		return fmt.Errorf("compact at %d: %w", rev, err)
	}
	obs := c.s.observe
	istart := time.Now()
	keep := c.s.idx.Compact(rev)
	if obs.IndexCompaction != nil {
		obs.IndexCompaction(time.Since(istart))
	}
	deleted := 0
	if obs.Compaction != nil {
		total := time.Now()
		defer func() { obs.Compaction(time.Since(total), deleted) }()
	}
	var hasher *kvHasher
	if job.hash {
		hasher = newKVHasher(job.prev, rev, keep)
	}
	start := revToBytes(index.Revision{}, false)
	end := revToBytes(index.Revision{Main: rev + 1}, false)
	for {
		if c.stopped(ctx) {
			return errCompactorStopped
		}
		var next []byte
		var n int
		failpoint.Hit(failpoint.CompactBeforeCommit)
		bstart := time.Now()
		err := c.s.be.Update(func(tx backend.WriteTx) error {
			var dels [][]byte
			var last []byte
			n = 0
			var decodeErr error
			err := tx.Range(backend.Key, start, end, c.limit, func(k, v []byte) bool {
				n++
				r, tomb, err := bytesToRev(k)
				if err != nil {
					decodeErr = err
					return false
				}
				if hasher != nil {
					hasher.write(r, tomb, k, v)
				}
				if _, ok := keep[r]; !ok {
					dels = append(dels, bytes.Clone(k))
				}
				last = k
				return true
			})
			if err == nil {
				err = decodeErr
			}
			if err != nil {
				return fmt.Errorf("scan revisions from %x: %w", start, err)
			}
			if n == c.limit {
				next = append(bytes.Clone(last), 0)
			}
			for _, k := range dels {
				if err := tx.Delete(backend.Key, k); err != nil {
					return fmt.Errorf("delete revision %x: %w", k, err)
				}
			}
			deleted += len(dels)
			if next == nil {
				return tx.Put(backend.Meta, metaFinishedCompact, revToBytes(index.Revision{Main: rev}, false))
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("compact at %d: %w", rev, err)
		}
		if obs.CompactionBatch != nil {
			obs.CompactionBatch(time.Since(bstart))
		}
		failpoint.Hit(failpoint.CompactAfterCommit)
		if c.afterChunk != nil {
			c.afterChunk(rev)
		}
		if next == nil {
			fields := []zap.Field{zap.Int64("revision", rev), zap.Int("deleted", deleted)}
			if hasher != nil {
				fields = append(fields, zap.Uint32("hash", hasher.sum().Hash))
			}
			lg.Info("finished compaction", fields...)
			if hasher != nil {
				c.s.compactHashes.store(lg, hasher.sum())
			}
			return nil
		}
		start = next
	}
}
