package mvcc

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// stopAfterFirstChunk is an afterCompactChunk hook that parks the compactor
// after its first chunk until the store is closed, leaving the compaction
// unfinished. chunked closes when it parks.
func stopAfterFirstChunk(chunked chan struct{}) func(s *Store, rev int64) {
	var once sync.Once
	return func(s *Store, rev int64) {
		once.Do(func() {
			close(chunked)
			<-s.compactor.stopc
		})
	}
}

func writeHistory(ts *testStore, nkeys, rounds int) {
	for r := range rounds {
		ts.apply(func(b *Batch) {
			for i := range nkeys {
				tw := b.Write()
				tw.Put(fmt.Appendf(nil, "k%02d", i), fmt.Appendf(nil, "v%d", r), 0)
				tw.End()
			}
			tw := b.Write()
			tw.DeleteRange([]byte("k00"), nil)
			tw.End()
		})
	}
}

func TestUnfinishedCompactionResumes(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		chunked := make(chan struct{})
		ts := newTestStoreConfig(t, e, config{compactBatchLimit: 4, afterCompactChunk: stopAfterFirstChunk(chunked)})
		writeHistory(ts, 10, 4)
		c := ts.Rev() - 3
		before := map[int64][]kv{}
		for r := c; r <= ts.Rev(); r++ {
			before[r] = ts.mustRange(all, all, RangeOptions{Rev: r})
		}
		var done <-chan struct{}
		ts.apply(func(b *Batch) {
			var err error
			if done, err = b.Compact(c); err != nil {
				t.Fatal(err)
			}
		})
		waitClosed(t, chunked, "first compaction chunk")
		// The compaction is published although its deletion is parked.
		if _, _, err := ts.rangeAt(all, all, RangeOptions{Rev: c - 1}); !errors.Is(err, ErrCompacted) {
			t.Fatalf("range below the compaction while it runs: %v", err)
		}
		ts.close()
		select {
		case <-done:
			t.Fatal("compaction reported done although it was stopped after one chunk")
		default:
		}

		ts.cfg = config{compactBatchLimit: 4}
		ts.open()
		if ts.CompactRev() != c {
			t.Fatalf("reopened compact rev %d, want the scheduled %d", ts.CompactRev(), c)
		}
		if ts.resumed == nil {
			t.Fatal("Open did not resume the unfinished compaction")
		}
		waitClosed(t, ts.resumed, "resumed compaction")
		for r := c; r <= ts.Rev(); r++ {
			if got := ts.mustRange(all, all, RangeOptions{Rev: r}); !eqKVs(got, before[r]) {
				t.Fatalf("range at %d after resumed compaction = %v, want %v", r, got, before[r])
			}
		}
		// Every revision <= c left is one a read at c needs: the keys live
		// at c (c is a put revision, so no tombstone is kept).
		if n := ts.countKeyBucket(c); n != len(before[c]) {
			t.Fatalf("Key bucket holds %d revisions <= %d, want %d", n, c, len(before[c]))
		}
		ts.reopen()
		if ts.resumed != nil || ts.CompactRev() != c {
			t.Fatalf("after a finished compaction: resumed %v, compact rev %d, want none and %d", ts.resumed, ts.CompactRev(), c)
		}
	})
}

// Reads that are open when a compaction is applied finish at their revision;
// the compaction waits for them.
func TestCompactionWaitsForOpenReads(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		ts := newTestStore(t, e)
		ts.put("a", "1") // 2
		ts.put("a", "2") // 3
		r := ts.Read()
		applied := make(chan struct{})
		go func() {
			defer close(applied)
			err := ts.Apply(func(b *Batch) error {
				_, err := b.Compact(3)
				return err
			})
			if err != nil {
				t.Error(err)
			}
		}()
		res, err := r.Range([]byte("a"), nil, RangeOptions{Rev: 2})
		if err != nil || len(res.KVs) != 1 || string(res.KVs[0].Value) != "1" {
			t.Errorf("open view at 2 during compaction = %v %v", res, err)
		}
		r.End()
		waitClosed(t, applied, "compaction apply")
		if _, _, err := ts.rangeAt([]byte("a"), nil, RangeOptions{Rev: 2}); !errors.Is(err, ErrCompacted) {
			t.Fatalf("new view at 2 after compaction: %v", err)
		}
	})
}

// The Observers see one index compaction, one pause per backend batch and
// one finished compaction with the revisions it deleted; Hash and a
// HashByRev that hashes are timed, one answered from a compaction's stored
// hash is not (etcd's neither).
func TestObservers(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		var mu sync.Mutex
		var index, batches, compactions, deleted, hashes, hashesByRev int
		count := func(n *int) func(time.Duration) {
			return func(time.Duration) { mu.Lock(); *n++; mu.Unlock() }
		}
		ts := newTestStoreConfig(t, e, config{compactBatchLimit: 3, observe: Observers{
			IndexCompaction: count(&index),
			CompactionBatch: count(&batches),
			Compaction: func(_ time.Duration, n int) {
				mu.Lock()
				compactions++
				deleted += n
				mu.Unlock()
			},
			Hash:      count(&hashes),
			HashByRev: count(&hashesByRev),
		}})
		var rev int64
		for i := range 7 {
			rev = ts.put("k", fmt.Sprint(i)) // revisions 2..8
		}
		ts.compact(rev) // keeps 8, deletes 2..7
		mu.Lock()
		got := [4]int{index, batches, compactions, deleted}
		mu.Unlock()
		// 7 revisions scanned 3 at a time: 3 batches.
		if want := [4]int{1, 3, 1, 6}; got != want {
			t.Fatalf("index compactions, batches, compactions, deleted = %v, want %v", got, want)
		}
		if _, _, err := ts.Hash(); err != nil {
			t.Fatal(err)
		}
		if _, _, _, err := ts.HashByRev(0); err != nil {
			t.Fatal(err)
		}
		if _, _, _, err := ts.HashByRev(1); !errors.Is(err, ErrCompacted) {
			t.Fatalf("HashByRev below the compaction: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if hashes != 1 || hashesByRev != 1 {
			t.Fatalf("hashes %d, hashes by revision %d, want 1 and 1", hashes, hashesByRev)
		}
	})
}
