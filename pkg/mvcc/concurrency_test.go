package mvcc

import (
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-dev/kvd/pkg/index"
)

// A batch of several txns becomes visible to readers all at once, after
// Apply returns; readers run concurrently with the applier and a compaction.
func TestBatchVisibleOnlyAfterApply(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		ts := newTestStore(t, e)
		const nkeys, nbatches = 5, 40
		var stop atomic.Bool
		var wg sync.WaitGroup
		errs := make(chan error, 3+2*nbatches) // never blocks a sender
		for w := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(w), 1))
				last := -1
				for !stop.Load() {
					if err := checkView(ts.Store, rng, nkeys, &last); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		for i := range nbatches {
			ts.apply(func(b *Batch) {
				for j := range nkeys {
					tw := b.Write()
					tw.Put(fmt.Appendf(nil, "k%d", j), []byte(strconv.Itoa(i)), 0)
					tw.End()
				}
				// The applier's own readers do not see the batch yet.
				r := ts.Read()
				res, err := r.Range(all, all, RangeOptions{})
				r.End()
				if err != nil || r.Rev() != int64(1+nkeys*i) || (i > 0 && string(res.KVs[0].Value) != strconv.Itoa(i-1)) {
					errs <- fmt.Errorf("inside batch %d a reader saw rev %d %v %v", i, r.Rev(), toKVs(res), err)
				}
				if i == nbatches/2 {
					if _, err := b.Compact(b.Rev() - 7); err != nil {
						errs <- err
					}
				}
				b.SetConsistentIndex(uint64(i), 1)
			})
		}
		stop.Store(true)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}

// checkView opens a view and checks it shows whole batches: every key holds
// the same batch number, matching the view's revision, never going back.
func checkView(s *Store, rng *rand.Rand, nkeys int, last *int) error {
	r := s.Read()
	defer r.End()
	rev := r.Rev()
	res, err := r.Range(all, all, RangeOptions{})
	if err != nil {
		return fmt.Errorf("range at %d: %w", rev, err)
	}
	if rev == 1 {
		if len(res.KVs) != 0 {
			return fmt.Errorf("rev 1 view has %d keys", len(res.KVs))
		}
		return nil
	}
	if len(res.KVs) != nkeys {
		return fmt.Errorf("view at %d has %d keys, want %d", rev, len(res.KVs), nkeys)
	}
	batch := string(res.KVs[0].Value)
	for i := range res.KVs {
		if v := string(res.KVs[i].Value); v != batch {
			return fmt.Errorf("view at %d mixes batches %s and %s", rev, batch, v)
		}
	}
	n, _ := strconv.Atoi(batch)
	if want := int64(1 + nkeys*(n+1)); rev != want {
		return fmt.Errorf("view at %d shows batch %d, whose revision is %d", rev, n, want)
	}
	if n < *last {
		return fmt.Errorf("view went back from batch %d to %d", *last, n)
	}
	*last = n
	// A historical read: complete or compacted, never partial.
	at := 1 + rng.Int64N(rev)
	hres, err := r.Range(all, all, RangeOptions{Rev: at})
	if errors.Is(err, ErrCompacted) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("range at %d in view %d: %w", at, rev, err)
	}
	if want := min(nkeys, int(at-1)); len(hres.KVs) != want {
		return fmt.Errorf("range at %d in view %d: %d keys, want %d", at, rev, len(hres.KVs), want)
	}
	return nil
}

func TestHashByRev(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		// Same operations; a's compaction finishes, b's is parked after
		// its first chunk. Their hashes must agree.
		a := newTestStoreConfig(t, e, config{compactBatchLimit: 2})
		chunked := make(chan struct{})
		b := newTestStoreConfig(t, e, config{compactBatchLimit: 2, afterCompactChunk: stopAfterFirstChunk(chunked)})
		ma, mb := newModel(), newModel()
		rngA, rngB := rand.New(rand.NewPCG(3, 4)), rand.New(rand.NewPCG(3, 4))
		for i := range 30 {
			runBatch(t, a, ma, rngA, uint64(i))
			runBatch(t, b, mb, rngB, uint64(i))
		}
		c := a.Rev() - 5
		var atC uint32
		for _, rev := range []int64{0, 1, c, a.Rev()} {
			ha, _, _, errA := a.HashByRev(rev)
			hb, _, _, errB := b.HashByRev(rev)
			if errA != nil || errB != nil || ha != hb {
				t.Fatalf("before compaction hash at %d: %x %v vs %x %v", rev, ha, errA, hb, errB)
			}
			if rev == c {
				atC = ha
			}
		}
		a.compact(c)
		b.apply(func(bt *Batch) {
			if _, err := bt.Compact(c); err != nil {
				t.Fatal(err)
			}
		})
		waitClosed(t, chunked, "b's first compaction chunk")
		// At the compaction revision itself a finished compaction answers,
		// as etcd's, the hash it stored (under the previous compaction
		// revision, -1 here: the hash before it); an unfinished one a fresh
		// hash under c, as etcd's before its job is done.
		if h, _, comp, err := a.HashByRev(c); err != nil || h != atC || comp != -1 {
			t.Fatalf("hash at the compaction revision %d after it: %x compact %d %v; want the stored %x under -1", c, h, comp, err, atC)
		}
		if _, _, comp, err := b.HashByRev(c); err != nil || comp != c {
			t.Fatalf("hash at the compaction revision %d while it runs: compact %d %v; want a fresh one under %d", c, comp, err, c)
		}
		for rev := c + 1; rev <= a.Rev(); rev++ {
			ha, curA, compA, errA := a.HashByRev(rev)
			hb, curB, compB, errB := b.HashByRev(rev)
			if errA != nil || errB != nil || ha != hb || curA != curB || compA != c || compB != c {
				t.Fatalf("hash at %d: a %x cur %d compact %d %v; b %x cur %d compact %d %v",
					rev, ha, curA, compA, errA, hb, curB, compB, errB)
			}
		}
		if _, _, _, err := a.HashByRev(c - 1); !errors.Is(err, ErrCompacted) {
			t.Fatalf("hash below the compaction: %v", err)
		}
		if _, cur, _, err := a.HashByRev(a.Rev() + 1); !errors.Is(err, ErrFutureRev) || cur != a.Rev() {
			t.Fatalf("hash at a future revision: %v (current %d)", err, cur)
		}
		h1, _, _, _ := a.HashByRev(0)
		a.put("different", "x")
		h2, _, _, _ := a.HashByRev(0)
		h3, _, _, _ := a.HashByRev(a.Rev() - 1)
		if h1 == h2 || h1 != h3 {
			t.Fatalf("hash before a put %x, after %x, at the old revision %x", h1, h2, h3)
		}
	})
}

// The hash is etcd's formula: CRC-32C of "key" then each revision key and
// marshaled KeyValue, in revision order.
func TestHashFormula(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		ts := newTestStore(t, e)
		ts.put("a", "1")
		ts.del("a", "")
		h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
		h.Write([]byte("key"))
		v, _ := proto.Marshal(&mvccpb.KeyValue{Key: []byte("a"), Value: []byte("1"), CreateRevision: 2, ModRevision: 2, Version: 1})
		h.Write(revToBytes(index.Revision{Main: 2}, false))
		h.Write(v)
		tomb, _ := proto.Marshal(&mvccpb.KeyValue{Key: []byte("a")})
		h.Write(revToBytes(index.Revision{Main: 3}, true))
		h.Write(tomb)
		got, cur, comp, err := ts.HashByRev(0)
		if err != nil || got != h.Sum32() || cur != 3 || comp != -1 {
			t.Fatalf("HashByRev = %x %d %d %v, want %x 3 -1", got, cur, comp, err, h.Sum32())
		}
	})
}

// The same operations on every engine give the same hash: the layout and the
// encoding do not depend on the engine.
func TestHashAcrossEngines(t *testing.T) {
	if len(engines) < 2 {
		t.Skip("one engine")
	}
	var hashes []uint32
	for _, e := range engines {
		ts := newTestStore(t, e)
		m, rng := newModel(), rand.New(rand.NewPCG(9, 9))
		for i := range 20 {
			runBatch(t, ts, m, rng, uint64(i))
		}
		ts.compact(ts.Rev() - 4)
		runBatch(t, ts, m, rng, 99)
		h, _, _, err := ts.HashByRev(0)
		if err != nil {
			t.Fatal(err)
		}
		hashes = append(hashes, h)
	}
	for i := range hashes {
		if hashes[i] != hashes[0] {
			t.Fatalf("hashes differ across engines: %x", hashes)
		}
	}
}
