package mvcc

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/kvd-dev/kvd/pkg/backend"
)

// limitedBackend refuses, as Badger does, an Update of more than limit
// writes (backend.ErrUpdateTooLarge), and counts the Updates that
// committed. With failAfter > 0 the Update after that many committed ones
// fails (a crash between the parts of a split commit).
type limitedBackend struct {
	backend.Backend
	limit     int
	failAfter int64
	committed atomic.Int64
}

func (l *limitedBackend) Update(fn func(backend.WriteTx) error) error {
	if l.failAfter > 0 && l.committed.Load() >= l.failAfter {
		return errInjected
	}
	err := l.Backend.Update(func(tx backend.WriteTx) error {
		return fn(&limitedTx{WriteTx: tx, left: l.limit})
	})
	if err == nil {
		l.committed.Add(1)
	}
	return err
}

type limitedTx struct {
	backend.WriteTx
	left int
}

func (t *limitedTx) count() error {
	if t.left == 0 {
		return fmt.Errorf("limited test backend: %w", backend.ErrUpdateTooLarge)
	}
	t.left--
	return nil
}

func (t *limitedTx) Put(b backend.Bucket, k, v []byte) error {
	if err := t.count(); err != nil {
		return err
	}
	return t.WriteTx.Put(b, k, v)
}

func (t *limitedTx) Delete(b backend.Bucket, k []byte) error {
	if err := t.count(); err != nil {
		return err
	}
	return t.WriteTx.Delete(b, k)
}

const (
	splitKeys  = 2000
	splitLimit = 500 // writes per Update the limited backend takes
)

// splitStores opens a store on e limited to splitLimit writes per Update
// (parts of 100) and a reference store on e without limit, and puts
// splitKeys keys into both, one Apply and consistent index per 100.
func splitStores(t *testing.T, e engine, failAfter int64) (limited, ref *testStore, lb *limitedBackend) {
	t.Helper()
	limitedEngine := engine{name: e.name, open: func(dir string) (backend.Backend, error) {
		be, err := e.open(dir)
		if err != nil {
			return nil, err
		}
		lb = &limitedBackend{Backend: be, limit: splitLimit, failAfter: failAfter}
		return lb, nil
	}}
	cfg := noAutoFlush
	cfg.batchLimit = 100
	limited = newTestStoreConfig(t, limitedEngine, cfg)
	ref = newTestStoreConfig(t, e, noAutoFlush)
	for i := 0; i < splitKeys; i += 100 {
		for _, ts := range []*testStore{limited, ref} {
			ts.apply(func(b *Batch) {
				for j := i; j < i+100; j++ {
					tw := b.Write()
					tw.Put(fmt.Appendf(nil, "k%05d", j), []byte("v"), 0)
					tw.End()
				}
				b.SetConsistentIndex(uint64(i/100+1), 2)
			})
			ts.flush()
		}
	}
	return limited, ref, lb
}

// deleteAll deletes every key in one DeleteRange, at consistent index 100.
func deleteAll(ts *testStore) {
	ts.apply(func(b *Batch) {
		tw := b.Write()
		tw.DeleteRange([]byte("k"), []byte("l"))
		tw.End()
		b.SetConsistentIndex(100, 2)
	})
}

func (ts *testStore) hasSplitMark() bool {
	ts.t.Helper()
	v, err := ts.readMeta(metaSplitCommit)
	if err != nil {
		ts.t.Fatal(err)
	}
	return v != nil
}

func sameStores(t *testing.T, what string, a, b *testStore) {
	t.Helper()
	ha, ra, errA := a.Hash()
	hb, rb, errB := b.Hash()
	if errA != nil || errB != nil || ha != hb || ra != rb {
		t.Fatalf("%s: hash %x at %d (%v), reference %x at %d (%v)", what, ha, ra, errA, hb, rb, errB)
	}
	if a.ConsistentIndex() != b.ConsistentIndex() {
		t.Fatalf("%s: consistent index %d, reference %d", what, a.ConsistentIndex(), b.ConsistentIndex())
	}
	if got, want := a.mustRange(all, all, RangeOptions{}), b.mustRange(all, all, RangeOptions{}); !eqKVs(got, want) {
		t.Fatalf("%s: %d keys, reference %d", what, len(got), len(want))
	}
}

// A DeleteRange whose tombstones no single update holds is committed in
// parts: the store ends where one whole commit would have left it, and
// reopens there.
func TestSplitCommit(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		limited, ref, lb := splitStores(t, e, 0)
		before := lb.committed.Load()
		deleteAll(limited)
		deleteAll(ref)
		limited.flush()
		ref.flush()
		// 2000 tombstones in parts of 100, the last with the meta.
		if parts := lb.committed.Load() - before; parts != splitKeys/100 {
			t.Fatalf("the delete was committed in %d updates, want %d", parts, splitKeys/100)
		}
		if limited.hasSplitMark() {
			t.Fatal("a finished split commit left its Meta record")
		}
		if n := len(limited.mustRange(all, all, RangeOptions{})); n != 0 {
			t.Fatalf("%d keys after deleting all", n)
		}
		sameStores(t, "after the split commit", limited, ref)
		limited.reopen()
		ref.reopen()
		sameStores(t, "reopened", limited, ref)
	})
}

// A crash between the parts of a split commit leaves Key records past the
// consistent index; the store rolls them back when it opens, and applying
// the entry again ends where the reference store is.
func TestSplitCommitCutShort(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		// The puts take splitKeys/100 updates; the delete's third part fails.
		limited, ref, _ := splitStores(t, e, splitKeys/100+2)
		revBefore, ciBefore := limited.Rev(), limited.ConsistentIndex()
		deleteAll(limited)
		if err := limited.Flush(); !errors.Is(err, ErrStoreFailed) || !errors.Is(err, errInjected) {
			t.Fatalf("flush with a failing third part = %v", err)
		}
		limited.crash()
		limited.e = e // no limit from here on, no failure
		limited.open()
		if limited.hasSplitMark() {
			t.Fatal("the roll back left the split commit's Meta record")
		}
		if limited.Rev() != revBefore || limited.ConsistentIndex() != ciBefore {
			t.Fatalf("reopened at revision %d consistent index %d, want %d %d", limited.Rev(), limited.ConsistentIndex(), revBefore, ciBefore)
		}
		if n := limited.countKeyBucket(1 << 62); n != splitKeys {
			t.Fatalf("the Key bucket holds %d records, want the %d puts only", n, splitKeys)
		}
		sameStores(t, "rolled back", limited, ref)
		deleteAll(limited)
		deleteAll(ref)
		limited.flush()
		ref.flush()
		sameStores(t, "the delete applied again", limited, ref)
	})
}

// Badger's own limit: the test engine's updates hold 4 MiB, about 43,000
// writes, and one DeleteRange of 50,000 keys needs more.
func TestSplitCommitBadgerLimit(t *testing.T) {
	for _, e := range engines {
		if e.name != "badger" {
			continue
		}
		ts := newTestStoreConfig(t, e, config{batchLimit: 10000})
		const keys = 50000
		for i := 0; i < keys; i += 5000 {
			ts.apply(func(b *Batch) {
				for j := i; j < i+5000; j++ {
					tw := b.Write()
					tw.Put(fmt.Appendf(nil, "k%06d", j), []byte("v"), 0)
					tw.End()
				}
			})
		}
		ts.flush()
		deleteAll(ts)
		ts.flush()
		ts.reopen()
		if n := len(ts.mustRange(all, all, RangeOptions{})); n != 0 {
			t.Fatalf("%d keys after deleting all and reopening", n)
		}
		if ts.ConsistentIndex() != 100 || ts.hasSplitMark() {
			t.Fatalf("reopened at consistent index %d, split mark %v", ts.ConsistentIndex(), ts.hasSplitMark())
		}
	}
}
