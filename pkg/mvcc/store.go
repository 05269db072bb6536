// Package mvcc is kvd's multi-version store, etcd's data model: every write
// transaction that changes something gets the next revision; each key's
// history is a list of generations in the index (pkg/index); each revision's
// KeyValue lives in the backend under the revision (see layout.go).
// Compaction forgets history below a revision without changing any read at or
// above it.
//
// Roles: one applier goroutine writes, through Apply; any number of
// goroutines read, through Read and HashByRev; a flusher goroutine owned by
// the Store commits applied writes to the backend in batches (buffer.go); a
// compactor (a goroutine of the Store's, or an actor the member runs: see
// Options.ExternalCompactor) deletes compacted revisions from the
// backend in the background.
package mvcc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/index"
)

// Errors returned by reads and compaction; their text is etcd's (the API
// layer prefixes "etcdserver: " on the wire, as etcd does).
var (
	ErrCompacted = errors.New("mvcc: required revision has been compacted")
	ErrFutureRev = errors.New("mvcc: required revision is a future revision")
)

// ErrStoreFailed wraps the error of an Apply that failed: the index may then
// hold writes the backend does not, so the store refuses further writes and
// the member must stop and recover from the WAL.
var ErrStoreFailed = errors.New("mvcc: store failed")

// Defaults of Options.
const (
	defaultCompactBatchLimit = 1000
	defaultBatchInterval     = 100 * time.Millisecond
	defaultBatchLimit        = 10000
	defaultBatchBytes        = 8 << 20
)

// Store is the MVCC store over a backend.
type Store struct {
	be      backend.Backend
	idx     *index.Index
	lg      *zap.Logger
	observe Observers

	// rev is the newest revision readers may see: every write <= rev is in
	// the published buffers or committed in the backend. Written by the
	// applier after it published the batch's buffered writes.
	rev atomic.Int64

	consistentIndex atomic.Uint64
	consistentTerm  atomic.Uint64

	// mu orders reads against compaction: a ReadTxn holds mu.RLock for its
	// life, and publishing a new compactRev takes mu.Lock, so a read never
	// runs below a compaction that started after it checked compactRev.
	mu sync.RWMutex
	// compactRev is the revision of the last compaction (-1: never). Reads
	// at a revision < compactRev fail with ErrCompacted. Written under mu
	// by the applier (and by Open); readers read it under mu.RLock, the
	// applier reads it without lock.
	compactRev int64

	// applyMu serialises Apply and freezing the active buffer. failed is
	// set, under applyMu, when an Apply failed; the store refuses writes
	// afterwards.
	applyMu sync.Mutex
	failed  error
	// active is the write-back buffer Apply appends to (under applyMu).
	active *wbuf
	// bufs is what readers see of the buffers; stores are serialised by
	// stateMu.
	bufs    atomic.Pointer[bufState]
	stateMu sync.Mutex
	// flushFailed holds the error of a failed commit of buffered writes.
	flushFailed atomic.Pointer[error]
	// batchLimit and batchBytes: Apply has the active buffer frozen for a
	// commit once it holds this many Key writes or bytes; they also size
	// the parts of a split commit.
	batchLimit, batchBytes int
	flusher                flusher
	// splitMu is held for writing while a split commit is between its parts
	// (split.go): the backend then holds Key records its consistent index
	// does not cover. WholeView holds it for reading.
	splitMu sync.RWMutex

	compactor compactor
	// compactHashes are the last compactions' hashes (compacthash.go).
	compactHashes compactHashes
	// resumed closes when the compaction Open resumed is done (nil: none).
	resumed   <-chan struct{}
	closeOnce sync.Once
	// indexFile is Options.IndexFile; indexFromFile is set when Open took
	// the index from it.
	indexFile     string
	indexFromFile bool
	// ops counts the operations of ended transactions (stats.go).
	ops opCounters
}

// Options tune a Store. Zero values take the defaults.
type Options struct {
	// Logger may be nil.
	Logger *zap.Logger
	// BatchInterval bounds how long applied writes wait in memory before
	// they are committed to the backend (etcd's backend-batch-interval).
	// Default: 100 ms.
	BatchInterval time.Duration
	// BatchLimit and BatchBytes start a commit once the applied writes not
	// committed yet number this many Key bucket writes or take this many
	// bytes (etcd's backend-batch-limit). One backend update holds at most
	// that plus one Apply's writes, and is never split: keep it under the
	// engine's update limit (Badger's MaxUpdateBytes). Defaults: 10,000
	// writes, 8 MiB.
	BatchLimit int
	BatchBytes int
	// CompactBatchLimit is how many revisions one compaction update scans.
	// Default: 1000.
	CompactBatchLimit int
	// OnCommit, if set, observes how long each backend commit of applied
	// writes took (etcd's etcd_disk_backend_commit_duration_seconds). It
	// runs on the flusher goroutine.
	OnCommit func(time.Duration)
	// Observe has the compaction and hash hooks (etcd's mvcc timings).
	Observe Observers
	// Tracer, if set, traces each backend commit that carries writes of
	// traced proposals (Batch.Link): a "backend.commit" span linked to
	// them. nil: no span work at all.
	Tracer trace.Tracer
	// IndexFile, if set, is where Close leaves the key index for the next
	// Open, which reads and removes it instead of rebuilding the index from
	// the backend when the backend is still as Close left it (indexfile.go).
	IndexFile string
	// IndexFileRead, if set, is IndexFile already being read
	// (ReadIndexFile): Open takes the index from it instead.
	IndexFileRead *IndexFileRead
	// ExternalCompactor leaves running the compactor to the caller, who
	// runs Store.Compactor (the member, in its actor group, so a failed
	// compaction stops the member). Otherwise Open starts it on a goroutine
	// of its own, which logs a failure and ends.
	ExternalCompactor bool
}

// Observers observe the store's compactions and hashes, as etcd's mvcc
// metrics do; each may be nil. The compaction hooks run on the compactor's
// goroutine, the hash hooks on the caller's.
type Observers struct {
	// IndexCompaction gets how long compacting the key index took: the
	// pause it puts on writes (etcd_debugging_mvcc_index_compaction_pause_duration_milliseconds).
	IndexCompaction func(time.Duration)
	// CompactionBatch gets how long one backend update of a compaction
	// took (etcd_debugging_mvcc_db_compaction_pause_duration_milliseconds).
	CompactionBatch func(time.Duration)
	// Compaction gets, when a compaction's backend part ends (done or
	// stopped), how long that part took and how many revisions it
	// deleted (etcd_debugging_mvcc_db_compaction_total_duration_milliseconds,
	// _keys_total, _last).
	Compaction func(d time.Duration, deleted int)
	// Hash and HashByRev get how long a Store.Hash and a HashByRev that
	// hashed took (etcd_mvcc_hash_duration_seconds, etcd_mvcc_hash_rev_duration_seconds).
	Hash, HashByRev func(time.Duration)
}

// Open opens the store kept in be with the default Options and logger lg
// (may be nil).
func Open(be backend.Backend, lg *zap.Logger) (*Store, error) {
	return OpenWithOptions(be, Options{Logger: lg})
}

// OpenWithOptions opens the store kept in be: it reads the consistent index
// and the compaction marks from Meta, rebuilds the index from the Key
// bucket, and resumes a physical compaction that was scheduled but not
// finished. be stays owned by the caller, who closes it after Store.Close.
func OpenWithOptions(be backend.Backend, o Options) (*Store, error) {
	return open(be, o.Logger, config{
		compactBatchLimit: o.CompactBatchLimit,
		batchInterval:     o.BatchInterval,
		batchLimit:        o.BatchLimit,
		batchBytes:        o.BatchBytes,
		onCommit:          o.OnCommit,
		observe:           o.Observe,
		tracer:            o.Tracer,
		externalCompactor: o.ExternalCompactor,
		indexFile:         o.IndexFile,
		indexFileRead:     o.IndexFileRead,
	})
}

// config holds the options and knobs tests turn; zero values take the
// defaults.
type config struct {
	compactBatchLimit int
	batchInterval     time.Duration
	batchLimit        int
	batchBytes        int
	onCommit          func(time.Duration)
	observe           Observers
	tracer            trace.Tracer
	externalCompactor bool
	indexFile         string
	indexFileRead     *IndexFileRead
	// afterCompactChunk is called by the compactor after each chunk.
	afterCompactChunk func(s *Store, rev int64)
}

func (c config) withDefaults() config {
	if c.compactBatchLimit <= 0 {
		c.compactBatchLimit = defaultCompactBatchLimit
	}
	if c.batchInterval <= 0 {
		c.batchInterval = defaultBatchInterval
	}
	if c.batchLimit <= 0 {
		c.batchLimit = defaultBatchLimit
	}
	if c.batchBytes <= 0 {
		c.batchBytes = defaultBatchBytes
	}
	return c
}

func open(be backend.Backend, lg *zap.Logger, cfg config) (*Store, error) {
	if lg == nil {
		lg = zap.NewNop()
	}
	cfg = cfg.withDefaults()
	s := &Store{be: be, idx: index.New(), lg: lg, compactRev: -1, observe: cfg.observe,
		active: newWbuf(), batchLimit: cfg.batchLimit, batchBytes: cfg.batchBytes}
	s.bufs.Store(&bufState{})
	s.compactor.init(s, cfg.compactBatchLimit)
	if f := cfg.afterCompactChunk; f != nil {
		s.compactor.afterChunk = func(rev int64) { f(s, rev) }
	}
	s.flusher.init(s, cfg.batchInterval)
	s.flusher.onCommit = cfg.onCommit
	s.flusher.tracer = cfg.tracer

	var saved *BuiltIndex
	switch {
	case cfg.indexFileRead != nil:
		s.indexFile = cfg.indexFileRead.path
		saved = cfg.indexFileRead.wait()
	case cfg.indexFile != "":
		s.indexFile = cfg.indexFile
		saved = takeIndexFile(cfg.indexFile, lg)
	}
	scheduled, err := s.restore(saved)
	if err != nil {
		return nil, err
	}
	go s.flusher.run()
	if !cfg.externalCompactor {
		go func() {
			if err := s.compactor.Run(context.Background()); err != nil {
				lg.Error("compaction failed; the compactor stopped", zap.Error(err))
			}
		}()
	}
	if scheduled > 0 {
		lg.Info("resuming unfinished compaction", zap.Int64("revision", scheduled))
		s.compactRev = scheduled
		job := &compactJob{rev: scheduled, done: make(chan struct{})}
		s.resumed = job.done
		s.compactor.enqueue([]*compactJob{job})
	}
	return s, nil
}

// restore loads the meta values and the index: built, or rebuilt from the
// backend when nil. It returns the revision of an unfinished compaction, or
// 0.
func (s *Store) restore(built *BuiltIndex) (scheduled int64, err error) {
	start := time.Now()
	if rolled, err := s.rollBackSplit(); err != nil {
		return 0, fmt.Errorf("open mvcc store: %w", err)
	} else if rolled {
		built = nil // it indexed the records rolled back
	}
	tx, err := s.be.ReadTx()
	if err != nil {
		return 0, fmt.Errorf("open mvcc store: read tx: %w", err)
	}
	defer tx.Release()

	for _, m := range []struct {
		key []byte
		dst *atomic.Uint64
	}{{metaConsistentIndex, &s.consistentIndex}, {metaConsistentTerm, &s.consistentTerm}} {
		v, ok, err := tx.Get(backend.Meta, m.key)
		if err != nil {
			return 0, fmt.Errorf("open mvcc store: read meta %s: %w", m.key, err)
		}
		if !ok {
			continue
		}
		n, err := bytesToUint64(v)
		if err != nil {
			return 0, fmt.Errorf("open mvcc store: meta %s: %w", m.key, err)
		}
		m.dst.Store(n)
	}
	finished, err := readCompactMark(tx, metaFinishedCompact)
	if err != nil {
		return 0, err
	}
	scheduled, err = readCompactMark(tx, metaScheduledCompact)
	if err != nil {
		return 0, err
	}
	if built != nil && built.written != nil {
		why := built.written.mismatch(s.consistentIndex.Load(), s.consistentTerm.Load(), finished, scheduled)
		if why == "" {
			why, err = revisionsBeyond(tx, built.current)
			if err != nil {
				return 0, err
			}
		}
		if why != "" {
			s.lg.Warn("index file not used; rebuilding the index", zap.String("reason", why))
			built = nil
		}
	}
	if finished >= 0 {
		s.compactRev = finished
	}
	if scheduled <= s.compactRev {
		scheduled = 0
	}

	if built == nil {
		if built, err = rebuildIndex(tx); err != nil {
			return 0, err
		}
	}
	s.idx = built.idx
	s.indexFromFile = built.written != nil
	current := built.current
	// Compaction may have deleted every revision up to the compaction point,
	// which is then the newest revision known.
	current = max(current, s.compactRev, scheduled)
	s.rev.Store(current)
	// From a file, the index was read before (the "read index file" line)
	// and only checked here.
	took := zap.Duration("index-rebuild", time.Since(start))
	if s.indexFromFile {
		took = zap.Duration("index-check", time.Since(start))
	}
	s.lg.Info("opened mvcc store",
		zap.Int64("revision", current),
		zap.Int64("compact-revision", s.compactRev),
		zap.Uint64("consistent-index", s.consistentIndex.Load()),
		zap.Int("keys", s.idx.Len()),
		zap.Bool("index-from-file", s.indexFromFile),
		took)
	return scheduled, nil
}

func readCompactMark(tx backend.ReadTx, key []byte) (int64, error) {
	v, ok, err := tx.Get(backend.Meta, key)
	if err != nil {
		return 0, fmt.Errorf("open mvcc store: read meta %s: %w", key, err)
	}
	if !ok {
		return -1, nil
	}
	rev, _, err := bytesToRev(v)
	if err != nil {
		return 0, fmt.Errorf("open mvcc store: meta %s: %w", key, err)
	}
	return rev.Main, nil
}

// Rev returns the newest revision visible to readers. A fresh store is at
// revision 1, as etcd.
func (s *Store) Rev() int64 { return s.rev.Load() }

// CompactRev returns the revision of the last compaction, -1 if the store
// was never compacted (etcd reports the same in HashKV's compact_revision).
func (s *Store) CompactRev() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.compactRev
}

// ConsistentIndex returns the raft index of the last entry applied (0 on a
// fresh store). The backend holds it, with the data, only after the next
// commit of buffered writes (see Flush).
func (s *Store) ConsistentIndex() uint64 { return s.consistentIndex.Load() }

// ConsistentTerm returns the raft term stored with ConsistentIndex.
func (s *Store) ConsistentTerm() uint64 { return s.consistentTerm.Load() }

// Close stops the background compactor, waiting for the chunk it is
// deleting (an unfinished compaction resumes at the next Open), commits the
// applied writes (Flush) and stops the flusher. The store must not be used
// afterwards. It does not close the backend.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.compactor.stop()
		err = s.Flush()
		s.flusher.stop()
		if err == nil && s.indexFile != "" {
			start := time.Now()
			if serr := s.saveIndexFile(s.indexFile); serr != nil {
				// The next Open rebuilds the index, as after a crash.
				s.lg.Warn("index file not written", zap.String("path", s.indexFile), zap.Error(serr))
			} else {
				s.lg.Info("wrote index file", zap.String("path", s.indexFile), zap.Duration("took", time.Since(start)))
			}
		}
	})
	return err
}
