package badger

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/pb"
	"github.com/dgraph-io/ristretto/v2/z"
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
	// copyBatch is how many bytes of keys and values the copy hands the
	// StreamWriter at a time.
	copyBatch = 4 << 20
)

// defragHook, when set (by tests), is called by Defrag at each stage:
// "copy" after the snapshot is open and writeMu released, "replay" when the
// copy is done and the snapshot released, "swap" holding writeMu just
// before the new database is synced and named in CURRENT. An error fails
// the Defrag there.
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

// op is one committed write of a stored key: a put of value, or a delete.
type op struct {
	key, value []byte
	del        bool
}

// journal holds, in commit order, the writes committed since a Defrag
// opened its snapshot, for Defrag to replay into the new database.
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

// Defrag copies the live data into a new database and swaps it in, as bolt's
// defragment copies into a new file. That copy is what reclaims space on
// Badger: its own garbage collection (value-log GC, compactions) cannot be
// relied on to give space back, as it never rewrites the value log file
// being written, keeps memtable logs at full size, and drops old versions
// only as compactions happen to reach them. A copy holds just the latest
// version of each live key, in fresh sorted tables (Badger's StreamWriter),
// with no value log beyond what later writes add. Defrag logs the size
// before and after, and the time it took.
//
// The copy reads a snapshot and does not hold writeMu: Updates go on
// committing to the live database and, while a Defrag runs, also record
// their writes in its journal. Once the copy is done Defrag replays the
// journal into the new database in a few rounds, then takes writeMu,
// replays the rest, syncs the new database, points CURRENT at it and swaps
// it in. Writers wait only for that last step, unless the journal fills up
// (defragJournalMax).
//
// The new database is synced before CURRENT names it, so a crash at any
// point leaves either the old or the new data live, and Open removes the
// other; an error before CURRENT names the new database removes it and
// leaves the old one live. Readers never wait: those that pinned the old
// database keep reading it; it is closed and removed in the background once
// they are done (Close waits for that).
func (be *Backend) Defrag() error {
	if !be.gate.Enter() {
		return backend.ErrClosed
	}
	defer be.gate.Exit()
	be.defragMu.Lock()
	defer be.defragMu.Unlock()
	start := time.Now()
	// Size between walks is an estimate; measure both ends.
	be.remeasure()
	before := be.Size()
	old, st, err := be.swapInCopy()
	if err != nil {
		be.lg.Warn("badger defrag failed", zap.String("dir", be.root), zap.Duration("took", time.Since(start)), zap.Error(err))
		return err
	}
	be.remeasure()
	be.retiring.Add(1)
	go be.retire(old)
	after := be.Size()
	be.lg.Info("badger defrag done",
		zap.String("old-dir", old.dir), zap.String("new-dir", be.pinDir()),
		zap.Int64("size-before", before), zap.Int64("size-after", after),
		zap.Int64("reclaimed", before-after),
		zap.Duration("took", time.Since(start)),
		zap.Duration("copy", st.copy), zap.Duration("writers-paused", st.paused),
		zap.Int("replayed-writes", st.replayed), zap.Int("replay-rounds", st.rounds),
		zap.Duration("throttled", st.throttled), zap.Int64("journal-peak", st.journalPeak))
	return nil
}

func (be *Backend) pinDir() string {
	s := be.pin()
	defer s.readers.Done()
	return s.dir
}

type defragStats struct {
	copy, paused     time.Duration
	replayed, rounds int
	throttled        time.Duration // the pacer's sleeps
	journalPeak      int64
}

// retire closes and removes a replaced store once no reader pins it. A
// failure only leaves files behind, which the next Open removes.
func (be *Backend) retire(old *store) {
	defer be.retiring.Done()
	old.readers.Wait()
	if err := old.db.Close(); err != nil {
		be.lg.Warn("defrag: close replaced badger db", zap.String("dir", old.dir), zap.Error(err))
	}
	if err := os.RemoveAll(old.dir); err != nil {
		be.lg.Warn("defrag: remove replaced badger db", zap.String("dir", old.dir), zap.Error(err))
	}
}

// swapInCopy copies the live store into a new subdirectory, replays the
// journal into it, points CURRENT at it and makes it the live store. It
// returns the replaced store, which readers may still pin.
func (be *Backend) swapInCopy() (_ *store, st defragStats, err error) {
	name := newDataName()
	dir := filepath.Join(be.root, name)
	db, err := badger.Open(be.opts.badgerOptions(dir, be.sync))
	if err != nil {
		return nil, st, fmt.Errorf("defrag: open badger db %s: %w", dir, err)
	}

	// The snapshot and the journal start together, under writeMu: every
	// commit is either in the snapshot or in the journal, never both. Only
	// Defrag replaces cur, and defragMu keeps this one the only Defrag.
	be.writeMu.Lock()
	old := be.cur
	snap := old.db.NewTransaction(false)
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
		_ = db.Close()
		_ = os.RemoveAll(dir)
	}()

	if err := hook("copy"); err != nil {
		snap.Discard()
		return nil, st, err
	}
	t0 := time.Now()
	pc := newPacer(j)
	defer func() {
		st.throttled = pc.slept
		j.mu.Lock()
		st.journalPeak = j.peak
		j.mu.Unlock()
	}()
	err = copySnapshot(snap, db, pc)
	snap.Discard()
	if err != nil {
		return nil, st, fmt.Errorf("defrag: copy %s to %s: %w", old.dir, dir, err)
	}
	// Flush the copy now, so that the sync under writeMu below writes only
	// what the last replay adds.
	if err := db.Sync(); err != nil {
		return nil, st, fmt.Errorf("defrag: sync %s: %w", dir, err)
	}
	st.copy = time.Since(t0)
	if err := hook("replay"); err != nil {
		return nil, st, err
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
		if err := replay(db, ops, rp); err != nil {
			return nil, st, fmt.Errorf("defrag: replay into %s: %w", dir, err)
		}
		if n < defragLockedReplay {
			break
		}
	}
	// As after the copy: the sync under writeMu writes only the last
	// replay.
	if err := db.Sync(); err != nil {
		return nil, st, fmt.Errorf("defrag: sync %s: %w", dir, err)
	}

	be.writeMu.Lock()
	locked = true
	t1 := time.Now()
	ops, _ := j.drain()
	st.replayed += len(ops)
	if err := replay(db, ops, nil); err != nil {
		return nil, st, fmt.Errorf("defrag: replay into %s: %w", dir, err)
	}
	if err := hook("swap"); err != nil {
		return nil, st, err
	}
	if err := db.Sync(); err != nil {
		return nil, st, fmt.Errorf("defrag: sync %s: %w", dir, err)
	}
	// Badger does not sync the directory entries of the tables it creates.
	if err := fsutil.SyncDir(dir); err != nil {
		return nil, st, fmt.Errorf("defrag: %w", err)
	}
	if err := writeCurrent(be.root, name); err != nil {
		// The rename may have happened before the failure (syncing the
		// directory): then the new database is live on disk, and must be
		// here too.
		if live, rerr := readCurrent(be.root); rerr != nil || live != name {
			return nil, st, fmt.Errorf("defrag: %w", err)
		}
		be.lg.Warn("badger defrag: CURRENT names the new database but writing it failed", zap.String("dir", dir), zap.Error(err))
	}
	be.curMu.Lock()
	be.cur = &store{db: db, dir: dir}
	be.curMu.Unlock()
	be.journal.Store(nil)
	j.end()
	st.paused = time.Since(t1)
	be.writeMu.Unlock()
	return old, st, nil
}

// copySnapshot writes the latest version of every live kvd key that snap
// sees into the empty dst, straight into sorted tables (Badger's
// StreamWriter). Badger's Stream cannot read at a given snapshot outside
// managed mode, so this iterates snap itself, at the pace pc sets.
func copySnapshot(snap *badger.Txn, dst *badger.DB, pc *pacer) error {
	sw := dst.NewStreamWriter()
	defer sw.Cancel()
	if err := sw.Prepare(); err != nil {
		return err
	}
	buf := z.NewBuffer(2*copyBatch, "kvd.defrag")
	defer func() { _ = buf.Release() }()
	it := snap.NewIterator(badger.IteratorOptions{Prefix: []byte{nsData}, PrefetchValues: true, PrefetchSize: 100})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		item := it.Item()
		err := item.Value(func(v []byte) error {
			pc.add(len(item.Key()) + len(v))
			badger.KVToBuffer(&pb.KV{Key: item.Key(), Value: v, Version: item.Version()}, buf)
			return nil
		})
		if err != nil {
			return err
		}
		if buf.LenNoPadding() >= copyBatch {
			if err := sw.Write(buf); err != nil {
				return err
			}
			buf.Reset()
		}
	}
	if err := sw.Write(buf); err != nil {
		return err
	}
	return sw.Flush()
}

// replay applies journal writes to db in order, as few transactions as
// Badger's transaction size allows. Each gets a commit timestamp above
// every copied version, so it overrides the copy. A non-nil pc sets the
// pace (the rounds without writeMu).
func replay(db *badger.DB, ops []op, pc *pacer) error {
	for len(ops) > 0 {
		txn := db.NewTransaction(true)
		n := 0
		for _, o := range ops {
			var err error
			if o.del {
				err = txn.Delete(o.key)
			} else {
				err = txn.Set(o.key, o.value)
			}
			if errors.Is(err, badger.ErrTxnTooBig) && n > 0 {
				break // commit what fits, go on in the next one
			}
			if err != nil {
				txn.Discard()
				return err
			}
			pc.add(len(o.key) + len(o.value))
			n++
		}
		if err := txn.Commit(); err != nil {
			return err
		}
		ops = ops[n:]
	}
	return nil
}

// newDataName names a fresh data subdirectory.
func newDataName() string {
	return fmt.Sprintf("%s-%d", defaultDataDir, time.Now().UnixNano())
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
