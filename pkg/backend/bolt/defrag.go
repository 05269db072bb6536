package bolt

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/fsutil"
)

const (
	// defragJournalMax bounds the keys and values a Defrag's journal holds.
	// Past it, Update waits until Defrag drains the journal: during the copy
	// that means writers wait for the rest of the copy, as every write did
	// before Defrag went online (the last resort); once the copy is done,
	// each replay round drains it. It is memory held for the length of a
	// Defrag, sized for the throttled copy (defragCopyPause): it holds
	// about 50 s of a steady 5 MB/s of writes (docs/benchmarks.md's load),
	// and the pacer stops throttling as it fills (journal.headroom), so a
	// copy longer than that under such a load finishes at full speed
	// rather than holding writers.
	defragJournalMax = 256 << 20
	// defragReplayRounds is how many times Defrag replays the journal
	// without writeMu before it takes writeMu for the rest.
	defragReplayRounds = 4
	// defragLockedReplay: a replay round that found less than this many
	// bytes is the last one without writeMu; so little replays in about a
	// millisecond.
	defragLockedReplay = 256 << 10
	// defragCopyTxBytes bounds a copy transaction (and a replay transaction
	// without writeMu): each is synced on its own, so that no fsync of
	// the copy writes back more than this at once; the smaller, the less
	// the live file's fsyncs wait behind it.
	defragCopyTxBytes = 4 << 20
	// defragCopyPause throttles the copy and the replay rounds that run
	// without writeMu, so that they yield to the live workload (issue #15):
	// after each defragCopyStep bytes of keys and values, the copying
	// goroutine sleeps defragCopyPause times as long as that step took, so
	// it runs about 1/(1+defragCopyPause) of the time and leaves the rest
	// of the CPU and the disk to the writers. The pause is a multiple of
	// the step's own time, not a fixed rate, so it adapts to the machine and
	// to the load: a step slowed down by the workload gets a longer pause.
	// The cost is a longer Defrag: its copy takes up to 1+defragCopyPause
	// times as long as at full speed under the same load (4x), and its
	// journal grows for that long. The pause shrinks as the journal fills
	// (journal.headroom): a write rate that would fill the journal before the
	// throttled copy ends gets a faster copy rather than writers held by a
	// full journal. The final replay under writeMu is never throttled.
	// Measured in docs/benchmarks.md, "Online defragment".
	defragCopyPause = 3
	// defragCopyStep is the bytes of keys and values the copy handles
	// between two pauses: at full speed a few milliseconds of work.
	defragCopyStep = 1 << 20
)

// defragHook, when set (by tests), is called by Defrag at each stage:
// "copy" after the snapshot is open and writeMu released, "replay" when the
// copy is done and the snapshot released, "swap" holding writeMu just
// before the new file is synced and renamed. An error fails the Defrag
// there.
var defragHook func(stage string) error

// journalLimit is defragJournalMax; tests lower it.
var journalLimit int64 = defragJournalMax

// copyPause is defragCopyPause; tests set it to 0 for a full-speed copy.
var copyPause float64 = defragCopyPause

func hook(stage string) error {
	if defragHook != nil {
		if err := defragHook(stage); err != nil {
			return fmt.Errorf("defrag: %s: %w", stage, err)
		}
	}
	return nil
}

// op is one committed write: a put of value, or a delete.
type op struct {
	bucket     backend.Bucket
	key, value []byte
	del        bool
}

// journal holds, in commit order, the writes committed since a Defrag
// opened its snapshot, for Defrag to replay into the new file.
type journal struct {
	limit int64
	mu    sync.Mutex
	room  *sync.Cond // signalled when ops are drained or the journal ends
	ops   []op
	bytes int64
	peak  int64 // the most bytes it held
	done  bool
}

func newJournal() *journal {
	j := &journal{limit: journalLimit}
	j.room = sync.NewCond(&j.mu)
	return j
}

// add appends the writes of one committed Update.
func (j *journal) add(ops []op, n int64) {
	if len(ops) == 0 {
		return
	}
	j.mu.Lock()
	j.ops = append(j.ops, ops...)
	j.bytes += n
	j.peak = max(j.peak, j.bytes)
	j.mu.Unlock()
}

// drain takes every write recorded so far.
func (j *journal) drain() ([]op, int64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	ops, n := j.ops, j.bytes
	j.ops, j.bytes = nil, 0
	j.room.Broadcast()
	return ops, n
}

// waitRoom waits while the journal is full.
func (j *journal) waitRoom() {
	j.mu.Lock()
	for j.bytes > j.limit && !j.done {
		j.room.Wait()
	}
	j.mu.Unlock()
}

// headroom tells a pacer how much of its pause to take: all of it while the
// journal is under a quarter full, none from three quarters, in proportion
// between.
func (j *journal) headroom() float64 {
	j.mu.Lock()
	fill := float64(j.bytes) / float64(j.limit)
	j.mu.Unlock()
	return min(1, max(0, 1.5-2*fill))
}

// end releases the writers waiting for room; Defrag has unhooked j.
func (j *journal) end() {
	j.mu.Lock()
	j.done = true
	j.ops, j.bytes = nil, 0
	j.room.Broadcast()
	j.mu.Unlock()
}

// Defrag implements backend.Backend. It copies the live data into a new file
// from a read transaction, without holding writeMu: Updates go on committing
// to the live file and, while a Defrag runs, also record their writes in its
// journal. Once the copy is done Defrag replays the journal into the new
// file in a few rounds, then takes writeMu, replays the rest, fsyncs the new
// file, renames it over Dir/db and swaps it in. Writers wait only for that
// last step, unless the journal fills up (defragJournalMax).
//
// A crash before the rename leaves the old file live and a leftover
// Dir/db.defrag, which Open removes; the new file is synced before the
// rename, so after it the new file is live and complete. An error before
// the rename leaves the old file live and removes the new one.
//
// The copy's read transaction holds bolt's mmap lock: a commit that must
// grow the memory map waits for the copy (Options.InitialMmapSize, 10 GiB by
// default, makes that rare).
func (be *Backend) Defrag() error {
	if !be.gate.Enter() {
		return backend.ErrClosed
	}
	defer be.gate.Exit()
	be.defragMu.Lock()
	defer be.defragMu.Unlock()
	start := time.Now()
	sizeBefore, inUseBefore := be.sizes()
	st, err := be.defrag()
	if err != nil {
		be.lg.Warn("bolt defrag failed", zap.String("path", be.path), zap.Duration("took", time.Since(start)), zap.Error(err))
		return err
	}
	size, inUse := be.sizes()
	be.lg.Info("bolt defrag done",
		zap.String("path", be.path),
		zap.Int64("size-before", sizeBefore), zap.Int64("size-after", size),
		zap.Int64("size-in-use-before", inUseBefore), zap.Int64("size-in-use-after", inUse),
		zap.Int64("reclaimed", sizeBefore-size),
		zap.Duration("took", time.Since(start)),
		zap.Duration("copy", st.copy), zap.Duration("writers-paused", st.paused),
		zap.Int("replayed-writes", st.replayed), zap.Int("replay-rounds", st.rounds),
		zap.Duration("throttled", st.throttled), zap.Int64("journal-peak", st.journalPeak))
	return nil
}

type defragStats struct {
	copy, paused     time.Duration
	replayed, rounds int
	throttled        time.Duration // the pacer's sleeps
	journalPeak      int64
}

func (be *Backend) defrag() (st defragStats, err error) {
	tmpPath := be.path + defragSuffix
	if err := os.Remove(tmpPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return st, fmt.Errorf("defrag: remove stale %s: %w", tmpPath, err)
	}
	tmpOpts := be.bo
	tmpOpts.NoSync = true // one fsync at the end instead of one per copy tx
	tmp, err := bolt.Open(tmpPath, 0o600, tmpOpts.boltOptions())
	if err != nil {
		return st, fmt.Errorf("defrag: open %s: %w", tmpPath, err)
	}

	// The snapshot and the journal start together, under writeMu: every
	// commit is either in the snapshot or in the journal, never both.
	be.writeMu.Lock()
	src, err := be.db.Begin(false)
	if err != nil {
		be.writeMu.Unlock()
		_ = tmp.Close()
		_ = os.Remove(tmpPath)
		return st, fmt.Errorf("defrag: begin read tx: %w", err)
	}
	j := newJournal()
	be.journal.Store(j)
	be.writeMu.Unlock()

	locked := false
	defer func() {
		if err == nil {
			return
		}
		if !locked {
			be.writeMu.Lock()
		}
		be.journal.Store(nil)
		be.writeMu.Unlock()
		j.end()
		_ = tmp.Close()
		_ = os.Remove(tmpPath)
	}()

	if err := hook("copy"); err != nil {
		_ = src.Rollback()
		return st, err
	}
	t0 := time.Now()
	pc := newPacer(j)
	defer func() {
		st.throttled = pc.slept
		j.mu.Lock()
		st.journalPeak = j.peak
		j.mu.Unlock()
	}()
	err = copyTx(tmp, src, defragCopyTxBytes, pc)
	_ = src.Rollback()
	if err != nil {
		return st, fmt.Errorf("defrag: copy %s: %w", be.path, err)
	}
	// Flush the copy now, so that the fsync under writeMu below writes
	// only what the last replay adds.
	if err := tmp.Sync(); err != nil {
		return st, fmt.Errorf("defrag: sync %s: %w", tmpPath, err)
	}
	st.copy = time.Since(t0)
	if err := hook("replay"); err != nil {
		return st, err
	}
	// The first replay round goes at the copy's pace; a later one only if
	// the rounds converge fast enough at that pace (this round has at most
	// half the previous one's bytes), otherwise at full speed: writers
	// that outpace a throttled replay would make each round longer than
	// the last.
	rp, prev := pc, int64(-1)
	for st.rounds < defragReplayRounds {
		ops, n := j.drain()
		st.rounds++
		st.replayed += len(ops)
		if prev >= 0 && n > prev/2 {
			rp = nil
		}
		prev = n
		rp.restart()
		if err := replay(tmp, ops, rp); err != nil {
			return st, fmt.Errorf("defrag: replay into %s: %w", tmpPath, err)
		}
		if n < defragLockedReplay {
			break
		}
	}
	// As after the copy: the fsync under writeMu writes only the last
	// replay.
	if err := tmp.Sync(); err != nil {
		return st, fmt.Errorf("defrag: sync %s: %w", tmpPath, err)
	}

	be.writeMu.Lock()
	locked = true
	t1 := time.Now()
	ops, _ := j.drain()
	st.replayed += len(ops)
	if err := replay(tmp, ops, nil); err != nil {
		return st, fmt.Errorf("defrag: replay into %s: %w", tmpPath, err)
	}
	if err := hook("swap"); err != nil {
		return st, err
	}
	if err := tmp.Sync(); err != nil {
		return st, fmt.Errorf("defrag: sync %s: %w", tmpPath, err)
	}
	if err := os.Rename(tmpPath, be.path); err != nil {
		return st, fmt.Errorf("defrag: rename %s: %w", tmpPath, err)
	}
	// From here Dir/db is the new file: serve from it, whatever happens.
	// The file stays open; only its commits' fsyncs change.
	tmp.NoSync = be.bo.NoSync
	be.journal.Store(nil)
	j.end()
	be.mu.Lock()
	old := be.db
	be.db = tmp
	be.mu.Unlock()
	st.paused = time.Since(t1)
	be.writeMu.Unlock()
	be.retired.Add(1)
	go func() {
		defer be.retired.Done()
		// bolt's Close waits for the read transactions still open on old.
		_ = old.Close()
	}()
	if err := fsutil.SyncDir(filepath.Dir(be.path)); err != nil {
		// Not an error of this Defrag (err would remove the new file): a
		// crash may now leave either file live, both complete.
		be.lg.Warn("bolt defrag: sync directory after rename", zap.String("path", be.path), zap.Error(err))
	}
	return st, nil
}

// copyTx copies every bucket of src into the empty dst, committing every
// txBytes of keys and values, with full pages (keys arrive in order), at
// the pace pc sets. dst commits without fsync; it is synced after each
// commit all the same, so that the kernel does not pile up the whole copy
// as dirty pages for the live file's next fsync to wait behind (ext4's
// ordered mode flushes them together), which made writers' latency jump
// during the copy.
func copyTx(dst *bolt.DB, src *bolt.Tx, txBytes int64, pc *pacer) (err error) {
	tx, err := dst.Begin(true)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	var size int64
	// path names the bucket being copied, from the root, for reopening it in
	// the next transaction.
	var copyBucket func(path [][]byte, from *bolt.Bucket) error
	open := func(path [][]byte) *bolt.Bucket {
		b := tx.Bucket(path[0])
		for _, name := range path[1:] {
			b = b.Bucket(name)
		}
		b.FillPercent = 1.0
		return b
	}
	copyBucket = func(path [][]byte, from *bolt.Bucket) error {
		to := open(path)
		c := from.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			pc.add(len(k) + len(v))
			if size += int64(len(k) + len(v)); size > txBytes {
				if err := tx.Commit(); err != nil {
					return err
				}
				if err := dst.Sync(); err != nil {
					return err
				}
				if tx, err = dst.Begin(true); err != nil {
					return err
				}
				size = int64(len(k) + len(v))
				to = open(path)
			}
			if v != nil {
				if err := to.Put(k, v); err != nil {
					return err
				}
				continue
			}
			sub := from.Bucket(k)
			if sub == nil { // an empty value
				if err := to.Put(k, []byte{}); err != nil {
					return err
				}
				continue
			}
			nb, err := to.CreateBucket(k)
			if err != nil {
				return err
			}
			if err := nb.SetSequence(sub.Sequence()); err != nil {
				return err
			}
			if err := copyBucket(append(path[:len(path):len(path)], k), sub); err != nil {
				return err
			}
			to = open(path) // the nested copy may have committed tx
		}
		return nil
	}
	err = src.ForEach(func(name []byte, from *bolt.Bucket) error {
		b, err := tx.CreateBucketIfNotExists(name)
		if err != nil {
			return err
		}
		if err := b.SetSequence(from.Sequence()); err != nil {
			return err
		}
		return copyBucket([][]byte{name}, from)
	})
	if err != nil {
		return err
	}
	return tx.Commit()
}

// replay applies journal writes to db in order, committing every
// defragTxBytes. With a pacer (the rounds without writeMu) it goes at the
// pacer's pace, commits every defragCopyTxBytes and syncs each commit, as
// the copy does.
func replay(db *bolt.DB, ops []op, pc *pacer) error {
	txBytes := int64(defragTxBytes)
	if pc != nil {
		txBytes = defragCopyTxBytes
	}
	for len(ops) > 0 {
		var size int64
		err := db.Update(func(tx *bolt.Tx) error {
			for len(ops) > 0 && size < txBytes {
				o := ops[0]
				size += int64(len(o.key) + len(o.value))
				pc.add(len(o.key) + len(o.value))
				if o.del {
					if b := tx.Bucket([]byte(o.bucket)); b != nil {
						if err := b.Delete(o.key); err != nil {
							return err
						}
					}
				} else {
					b, err := tx.CreateBucketIfNotExists([]byte(o.bucket))
					if err != nil {
						return err
					}
					if err := b.Put(o.key, o.value); err != nil {
						return err
					}
				}
				ops = ops[1:]
			}
			return nil
		})
		if err != nil {
			return err
		}
		if pc != nil && len(ops) > 0 {
			if err := db.Sync(); err != nil {
				return err
			}
		}
	}
	return nil
}

// pacer throttles the copy and the unlocked replay rounds of a Defrag with a
// duty cycle (see defragCopyPause). A nil pacer does not throttle.
type pacer struct {
	pause float64
	j     *journal
	n     int64     // bytes since the last pause
	since time.Time // start of the current step
	slept time.Duration
}

func newPacer(j *journal) *pacer {
	return &pacer{pause: copyPause, j: j, since: time.Now()}
}

// restart starts a step now, after a gap that is not the pacer's work.
func (p *pacer) restart() {
	if p != nil {
		p.n, p.since = 0, time.Now()
	}
}

// add counts n bytes handled; at the end of a step it sleeps.
func (p *pacer) add(n int) {
	if p == nil || p.pause <= 0 {
		return
	}
	if p.n += int64(n); p.n < defragCopyStep {
		return
	}
	if d := time.Duration(float64(time.Since(p.since)) * p.pause * p.j.headroom()); d > 0 {
		time.Sleep(d)
		p.slept += d
	}
	p.restart()
}
