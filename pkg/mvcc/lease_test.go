package mvcc

import (
	"maps"
	"testing"
)

func (ts *testStore) leases() map[int64]string {
	ts.t.Helper()
	got := map[int64]string{}
	if err := ts.Leases(func(id int64, v []byte) error {
		got[id] = string(v)
		return nil
	}); err != nil {
		ts.t.Fatal(err)
	}
	return got
}

// Lease records go through the write-back buffer: the last write of a batch
// wins, deletes remove, and they survive a reopen.
func TestLeaseRecords(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		ts := newTestStoreConfig(t, e, noAutoFlush)
		ts.apply(func(b *Batch) {
			b.PutLease(1, []byte("a"))
			b.PutLease(-5, []byte("neg"))
			b.PutLease(2, []byte("b"))
			b.PutLease(2, []byte("b2"))
			b.SetConsistentIndex(1, 1)
		})
		ts.apply(func(b *Batch) {
			b.DeleteLease(1)
			b.PutLease(3, []byte("c"))
			b.SetConsistentIndex(2, 1)
		})
		want := map[int64]string{-5: "neg", 2: "b2", 3: "c"}
		if got := ts.leases(); !maps.Equal(got, want) {
			t.Fatalf("leases = %v, want %v", got, want)
		}
		ts.apply(func(b *Batch) {
			b.DeleteLease(3)
			b.DeleteLease(42)
			b.SetConsistentIndex(3, 1)
		})
		ts.reopen()
		delete(want, 3)
		if got := ts.leases(); !maps.Equal(got, want) {
			t.Fatalf("after reopen: leases = %v, want %v", got, want)
		}
	})
}

// A lease record is committed with its batch's consistent index: a crash
// before the commit loses both, never one of them.
func TestLeaseRecordsCommitWithConsistentIndex(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		ts := newTestStoreConfig(t, e, noAutoFlush)
		ts.apply(func(b *Batch) {
			b.PutLease(7, []byte("x"))
			tw := b.Write()
			tw.Put([]byte("k"), []byte("v"), 7)
			tw.End()
			b.SetConsistentIndex(10, 2)
		})
		ts.flush()
		ts.apply(func(b *Batch) {
			b.DeleteLease(7)
			b.PutLease(8, []byte("y"))
			b.SetConsistentIndex(11, 2)
		})
		ts.crash()
		ts.open()
		if ci := ts.ConsistentIndex(); ci != 10 {
			t.Fatalf("consistent index after crash = %d, want 10", ci)
		}
		if got, want := ts.leases(), map[int64]string{7: "x"}; !maps.Equal(got, want) {
			t.Fatalf("leases after crash = %v, want %v", got, want)
		}
	})
}
