package mvcc

import (
	"reflect"
	"testing"

	"github.com/kvd-dev/kvd/pkg/backend"
)

// Reset moves a store onto another backend (a raft snapshot being
// installed): afterwards it reads exactly the other backend's state,
// including its consistent index and member records, drops its own
// uncommitted writes, and keeps applying on top.
func TestResetOntoAnotherBackend(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		src := newTestStore(t, e)
		src.put("a", "1")
		src.put("b", "2")
		src.del("a", "")
		src.apply(func(b *Batch) {
			b.PutMember("m/1", []byte("one"))
			b.SetConsistentIndex(40, 3)
		})
		srcKVs := src.mustRange(all, all, RangeOptions{})
		srcRev := src.Rev()
		src.close()

		dst := newTestStoreConfig(t, e, noAutoFlush)
		for i := 0; i < 10; i++ {
			dst.put("x", "old")
		}
		dst.apply(func(b *Batch) { b.SetConsistentIndex(7, 1) })

		var closedOld bool
		err := dst.Reset(func(old backend.Backend) (backend.Backend, error) {
			if old != dst.be {
				t.Errorf("swap got another backend than the store's")
			}
			if err := old.Close(); err != nil {
				return nil, err
			}
			closedOld = true
			return e.open(src.dir)
		})
		if err != nil {
			t.Fatalf("reset: %v", err)
		}
		if !closedOld {
			t.Fatal("swap not called")
		}
		dst.be, dst.dir = dst.Backend(), src.dir
		if got := dst.mustRange(all, all, RangeOptions{}); !reflect.DeepEqual(got, srcKVs) {
			t.Fatalf("after reset: %v, want %v", got, srcKVs)
		}
		if dst.Rev() != srcRev || dst.ConsistentIndex() != 40 || dst.ConsistentTerm() != 3 {
			t.Fatalf("after reset: rev %d ci %d/%d, want %d 40/3", dst.Rev(), dst.ConsistentIndex(), dst.ConsistentTerm(), srcRev)
		}
		var members []string
		if err := dst.Members(func(k string, v []byte) error { members = append(members, k+"="+string(v)); return nil }); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(members, []string{"m/1=one"}) {
			t.Fatalf("members after reset: %v", members)
		}
		rev := dst.put("c", "3")
		if rev != srcRev+1 {
			t.Fatalf("put after reset at revision %d, want %d", rev, srcRev+1)
		}
		dst.reopen()
		if got := dst.mustRange([]byte("c"), nil, RangeOptions{}); len(got) != 1 || got[0].Mod != rev {
			t.Fatalf("after reopen: %v", got)
		}
	})
}
