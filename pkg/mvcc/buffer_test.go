package mvcc

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvd-dev/kvd/pkg/backend"
)

// noAutoFlush keeps every applied write in memory until Flush or Close.
var noAutoFlush = config{batchInterval: time.Hour, batchLimit: 1 << 30, batchBytes: 1 << 30}

// backendCI reads the consistent index the backend holds (0: none).
func (ts *testStore) backendCI() uint64 {
	ts.t.Helper()
	tx, err := ts.be.ReadTx()
	if err != nil {
		ts.t.Fatal(err)
	}
	defer tx.Release()
	v, ok, err := tx.Get(backend.Meta, metaConsistentIndex)
	if err != nil {
		ts.t.Fatal(err)
	}
	if !ok {
		return 0
	}
	ci, err := bytesToUint64(v)
	if err != nil {
		ts.t.Fatal(err)
	}
	return ci
}

func (ts *testStore) flush() {
	ts.t.Helper()
	if err := ts.Flush(); err != nil {
		ts.t.Fatalf("flush: %v", err)
	}
}

// Applied writes are read from memory before their commit, and the same
// after it.
func TestReadsSeeUnflushedWrites(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		ts := newTestStoreConfig(t, e, noAutoFlush)
		m, rng := newModel(), rand.New(rand.NewPCG(1, 2))
		for ci := uint64(1); ci <= 20; ci++ {
			runBatch(t, ts, m, rng, ci)
		}
		if n := ts.countKeyBucket(m.rev); n != 0 || ts.backendCI() != 0 {
			t.Fatalf("before any flush the backend holds %d revisions and consistent index %d", n, ts.backendCI())
		}
		checkAgainstModel(t, ts, m, rng)
		hashBefore, _, _, err := ts.HashByRev(0)
		if err != nil {
			t.Fatal(err)
		}
		ts.flush()
		if n := ts.countKeyBucket(m.rev); n == 0 || ts.backendCI() != 20 {
			t.Fatalf("after a flush the backend holds %d revisions and consistent index %d, want some and 20", n, ts.backendCI())
		}
		checkAgainstModel(t, ts, m, rng)
		// Half in the backend, half in memory.
		for ci := uint64(21); ci <= 40; ci++ {
			runBatch(t, ts, m, rng, ci)
		}
		checkAgainstModel(t, ts, m, rng)
		if h, _, _, err := ts.HashByRev(20 + 1); err != nil || h == 0 {
			t.Fatalf("hash: %x %v", h, err)
		}
		ts.flush()
		if h, _, _, err := ts.HashByRev(0); err != nil || h == hashBefore {
			t.Fatalf("hash after more writes %x %v, before %x", h, err, hashBefore)
		}
		ts.reopen()
		checkAgainstModel(t, ts, m, rng)
		if ts.ConsistentIndex() != 40 {
			t.Fatalf("reopened at consistent index %d, want 40", ts.ConsistentIndex())
		}
	})
}

// A view opened before flushes and used after them reads what it read
// before: its buffers stay with it, and what was dropped from them is in
// the backend view it opens later.
func TestReaderAcrossFlush(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		ts := newTestStoreConfig(t, e, noAutoFlush)
		for i := range 5 {
			ts.put(fmt.Sprintf("old%d", i), "x")
		}
		ts.flush()
		for i := range 5 {
			ts.put(fmt.Sprintf("new%d", i), "y")
		}
		ts.put("old1", "z")
		want := ts.mustRange(all, all, RangeOptions{})
		wantOld := ts.mustRange(all, all, RangeOptions{Rev: 4})

		r := ts.Read()
		ts.flush()
		ts.put("old2", "later")
		ts.del("new", "new9")
		ts.flush()
		res, err := r.Range(all, all, RangeOptions{})
		if err != nil || !eqKVs(toKVs(res), want) || res.Rev != 12 {
			t.Errorf("view across flushes = %v rev %d %v, want %v at 12", toKVs(res), res.Rev, err, want)
		}
		res, err = r.Range(all, all, RangeOptions{Rev: 4})
		if err != nil || !eqKVs(toKVs(res), wantOld) {
			t.Errorf("view across flushes at 4 = %v %v, want %v", toKVs(res), err, wantOld)
		}
		r.End()
	})
}

// Readers, hashes and the applier run concurrently with commits of small
// buffers: views show whole batches, and a hash at a fixed revision never
// changes.
func TestConcurrentReadsWithFlushes(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		ts := newTestStoreConfig(t, e, config{batchInterval: time.Millisecond, batchLimit: 7})
		const nkeys, nbatches = 5, 200
		var stop atomic.Bool
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for w := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(w), 2))
				last := -1
				for !stop.Load() {
					if err := checkView(ts.Store, rng, nkeys, &last); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		hashRev := int64(1 + nkeys*3)
		var hashes []uint32
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if ts.Rev() < hashRev {
					continue
				}
				h, _, _, err := ts.HashByRev(hashRev)
				if err != nil {
					errs <- err
					return
				}
				hashes = append(hashes, h)
			}
		}()
		for i := range nbatches {
			ts.apply(func(b *Batch) {
				for j := range nkeys {
					tw := b.Write()
					tw.Put(fmt.Appendf(nil, "k%d", j), fmt.Append(nil, i), 0)
					tw.End()
				}
				b.SetConsistentIndex(uint64(i+1), 1)
			})
		}
		stop.Store(true)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		ts.flush()
		want, _, _, err := ts.HashByRev(hashRev)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hashes {
			if h != want {
				t.Fatalf("hash at %d during flushes %x, after them %x", hashRev, h, want)
			}
		}
	})
}

// batchPoint is the store state after one applied batch.
type batchPoint struct {
	rev  int64
	kvs  []kv
	hash uint32
}

// A crash loses the writes not committed, never part of a commit: the
// reopened store is at a batch boundary, at or after the last Flush, with
// exactly that batch's revision and data.
func TestCrashLeavesFlushedPrefix(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   config
		exact bool
	}{
		{"no-auto-flush", noAutoFlush, true},
		{"small-batches", config{batchInterval: time.Hour, batchLimit: 13}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forEachEngine(t, func(t *testing.T, e engine) {
				ts := newTestStoreConfig(t, e, tc.cfg)
				m, rng := newModel(), rand.New(rand.NewPCG(5, 6))
				points := map[uint64]batchPoint{0: {rev: 1}}
				record := func(ci uint64) {
					h, _, _, err := ts.HashByRev(0)
					if err != nil {
						t.Fatal(err)
					}
					points[ci] = batchPoint{rev: m.rev, kvs: m.hist[m.rev], hash: h}
				}
				var ci, flushed uint64
				for range 3 {
					for range 15 {
						ci++
						runBatch(t, ts, m, rng, ci)
						record(ci)
					}
					ts.flush()
					flushed = ci
				}
				for range 15 {
					ci++
					runBatch(t, ts, m, rng, ci)
					record(ci)
				}
				ts.crash()
				ts.open()

				got := ts.ConsistentIndex()
				p, ok := points[got]
				if !ok || got < flushed || (tc.exact && got != flushed) {
					t.Fatalf("after a crash at consistent index %d: reopened at %d (a batch: %v), last flush at %d", ci, got, ok, flushed)
				}
				if ts.Rev() != p.rev {
					t.Fatalf("reopened at consistent index %d with revision %d, want %d", got, ts.Rev(), p.rev)
				}
				if kvs := ts.mustRange(all, all, RangeOptions{}); !eqKVs(kvs, p.kvs) {
					t.Fatalf("reopened at %d: %v, want %v", got, kvs, p.kvs)
				}
				if h, _, _, err := ts.HashByRev(0); err != nil || h != p.hash {
					t.Fatalf("reopened at %d: hash %x %v, want %x", got, h, err, p.hash)
				}
				if rev := ts.put("after", "crash"); rev != p.rev+1 {
					t.Fatalf("first put after the crash at %d, want %d", rev, p.rev+1)
				}
			})
		})
	}
}

// Without any Flush call, applied writes reach the backend within the batch
// interval; OnCommit observes that commit, and no other while idle.
func TestFlushOnInterval(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		var commits atomic.Int32
		ts := newTestStoreConfig(t, e, config{batchInterval: 5 * time.Millisecond, batchLimit: 1 << 30, batchBytes: 1 << 30,
			onCommit: func(d time.Duration) {
				if d > 0 {
					commits.Add(1)
				}
			}})
		ts.apply(func(b *Batch) {
			tw := b.Write()
			tw.Put([]byte("a"), []byte("1"), 0)
			tw.End()
			b.SetConsistentIndex(7, 2)
		})
		deadline := time.Now().Add(20 * time.Second)
		for ts.backendCI() != 7 {
			if time.Now().After(deadline) {
				t.Fatal("the applied batch was not committed by the interval flush")
			}
			time.Sleep(time.Millisecond)
		}
		if n := ts.countKeyBucket(ts.Rev()); n != 1 {
			t.Fatalf("backend holds %d revisions with the consistent index, want 1", n)
		}
		for commits.Load() == 0 {
			if time.Now().After(deadline) {
				t.Fatal("OnCommit did not observe the commit")
			}
			time.Sleep(time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond) // ten idle intervals
		if n := commits.Load(); n != 1 {
			t.Fatalf("OnCommit observed %d commits, want 1: idle intervals commit nothing", n)
		}
	})
}

// Compactions over writes still in memory leave what compactions over
// committed writes leave.
func TestCompactionAfterUnflushedWrites(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		eager := newTestStore(t, e)
		lazy := newTestStoreConfig(t, e, noAutoFlush)
		me, ml := newModel(), newModel()
		rngE, rngL := rand.New(rand.NewPCG(8, 1)), rand.New(rand.NewPCG(8, 1))
		rngCheck := rand.New(rand.NewPCG(8, 2))
		ci := uint64(0)
		for round := range 4 {
			for range 12 {
				ci++
				runBatch(t, eager, me, rngE, ci)
				eager.flush()
				runBatch(t, lazy, ml, rngL, ci)
			}
			c := eager.Rev() - int64(round)
			eager.compact(c)
			lazy.compact(c)
			if a, b := eager.countKeyBucket(c), lazy.countKeyBucket(c); a != b || a != me.keptAt(c) {
				t.Fatalf("after compaction at %d the Key buckets hold %d and %d revisions <= %d, want %d", c, a, b, c, me.keptAt(c))
			}
			for rev := c; rev <= eager.Rev(); rev++ {
				ha, _, _, errA := eager.HashByRev(rev)
				hb, _, _, errB := lazy.HashByRev(rev)
				if errA != nil || errB != nil || ha != hb {
					t.Fatalf("hash at %d after compaction at %d: flushed each batch %x %v, buffered %x %v", rev, c, ha, errA, hb, errB)
				}
			}
			checkAgainstModel(t, lazy, ml, rngCheck)
		}
		lazy.reopen()
		eager.reopen()
		checkAgainstModel(t, lazy, ml, rngCheck)
		ha, _, _, errA := eager.HashByRev(0)
		hb, _, _, errB := lazy.HashByRev(0)
		if errA != nil || errB != nil || ha != hb {
			t.Fatalf("hash after reopen: %x %v vs %x %v", ha, errA, hb, errB)
		}
	})
}

var errInjected = errors.New("injected backend failure")

// faultyBackend fails the Put after the first few of an Update while fail
// is set.
type faultyBackend struct {
	backend.Backend
	fail atomic.Bool
}

func (f *faultyBackend) Update(fn func(backend.WriteTx) error) error {
	return f.Backend.Update(func(tx backend.WriteTx) error {
		if f.fail.Load() {
			tx = &faultyTx{WriteTx: tx, left: 3}
		}
		return fn(tx)
	})
}

type faultyTx struct {
	backend.WriteTx
	left int
}

func (t *faultyTx) Put(b backend.Bucket, k, v []byte) error {
	if t.left == 0 {
		return errInjected
	}
	t.left--
	return t.WriteTx.Put(b, k, v)
}

// A failed commit is fatal for writes; readers still see what was applied,
// and the backend keeps the last whole commit.
func TestFlushFailureIsFatal(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		var fb *faultyBackend
		faulty := engine{name: e.name, open: func(dir string) (backend.Backend, error) {
			be, err := e.open(dir)
			if err != nil {
				return nil, err
			}
			fb = &faultyBackend{Backend: be}
			return fb, nil
		}}
		ts := newTestStoreConfig(t, faulty, noAutoFlush)
		m, rng := newModel(), rand.New(rand.NewPCG(4, 4))
		for ci := uint64(1); ci <= 5; ci++ {
			runBatch(t, ts, m, rng, ci)
		}
		ts.flush()
		flushedRev := m.rev
		for ci := uint64(6); ci <= 10; ci++ {
			runBatch(t, ts, m, rng, ci)
		}
		fb.fail.Store(true)
		if err := ts.Flush(); !errors.Is(err, ErrStoreFailed) || !errors.Is(err, errInjected) {
			t.Fatalf("flush over a failing backend = %v", err)
		}
		if err := ts.Flush(); !errors.Is(err, ErrStoreFailed) {
			t.Fatalf("second flush = %v", err)
		}
		if err := ts.Apply(func(*Batch) error { return nil }); !errors.Is(err, ErrStoreFailed) {
			t.Fatalf("apply after a failed flush = %v, want ErrStoreFailed", err)
		}
		checkAgainstModel(t, ts, m, rng)
		ts.crash()
		ts.e = e
		ts.open()
		if ts.ConsistentIndex() != 5 || ts.Rev() != flushedRev {
			t.Fatalf("reopened at consistent index %d revision %d, want 5 %d", ts.ConsistentIndex(), ts.Rev(), flushedRev)
		}
		if got := ts.mustRange(all, all, RangeOptions{}); !eqKVs(got, m.hist[flushedRev]) {
			t.Fatalf("reopened: %v, want %v", got, m.hist[flushedRev])
		}
	})
}

// blockingBackend holds every Update at its start while hold is set,
// signalling entered, until release is closed.
type blockingBackend struct {
	backend.Backend
	hold    atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (b *blockingBackend) Update(fn func(backend.WriteTx) error) error {
	if b.hold.Load() {
		b.entered <- struct{}{}
		<-b.release
	}
	return b.Backend.Update(fn)
}

// Apply does not wait for a backend commit in progress, until the buffered
// writes pass the batch limit; then it waits for that commit to finish.
func TestApplyDoesNotWaitForCommit(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		bb := &blockingBackend{entered: make(chan struct{}, 1), release: make(chan struct{})}
		blocking := engine{name: e.name, open: func(dir string) (backend.Backend, error) {
			be, err := e.open(dir)
			bb.Backend = be
			return bb, err
		}}
		ts := newTestStoreConfig(t, blocking, config{batchInterval: time.Hour, batchLimit: 10})
		bb.hold.Store(true)
		flushed := make(chan error, 1)
		ts.put("a", "0")
		go func() { flushed <- ts.Flush() }()
		waitClosed(t, bb.entered, "the flush's backend update")
		bb.hold.Store(false)
		for i := range 9 {
			ts.put("a", fmt.Sprint(i+1))
		}
		if got := ts.mustRange([]byte("a"), nil, RangeOptions{}); len(got) != 1 || got[0].Value != "9" || got[0].Version != 10 {
			t.Fatalf("during a commit readers see %v, want a=9 at version 10", got)
		}
		// The 10th buffered write fills the buffer: this Apply waits for
		// the commit in progress.
		var released atomic.Bool
		applied := make(chan struct{})
		go func() {
			defer close(applied)
			ts.put("a", "10")
			if !released.Load() {
				t.Error("an Apply that filled the buffer returned while the previous commit was still running")
			}
		}()
		released.Store(true)
		close(bb.release)
		waitClosed(t, applied, "the Apply that filled the buffer")
		if err := <-flushed; err != nil {
			t.Fatal(err)
		}
		ts.flush()
		if got := ts.countKeyBucket(ts.Rev()); got != 11 {
			t.Fatalf("backend holds %d revisions after the flushes, want 11", got)
		}
	})
}
