package mvcc

import (
	"reflect"
	"testing"

	"github.com/kvd-dev/kvd/pkg/backend"
)

// Reset moves a store onto another backend (a raft snapshot being
// installed): afterwards it reads exactly the other backend's state,
// including its consistent index and member records, drops its own
// uncommitted writes, and keeps applying on top. With an index built from
// the new backend's Key bucket records (as a snapshot install builds it on
// the way in) the store takes that index instead of rebuilding it.
func TestResetOntoAnotherBackend(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		for _, prebuilt := range []bool{false, true} {
			t.Run(map[bool]string{false: "rebuilt", true: "prebuilt"}[prebuilt], func(t *testing.T) {
				testResetOnto(t, e, prebuilt)
			})
		}
	})
}

func testResetOnto(t *testing.T, e engine, prebuilt bool) {
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
	var built *BuiltIndex
	if prebuilt {
		built = buildIndexOf(t, e, src.dir)
	}

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
	}, built)
	if err != nil {
		t.Fatalf("reset: %v", err)
	}
	if !closedOld {
		t.Fatal("swap not called")
	}
	if prebuilt && dst.idx != built.idx {
		t.Fatal("Reset rebuilt the index it was handed")
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
}

// buildIndexOf feeds an IndexBuilder the Key bucket of the backend in dir.
func buildIndexOf(t *testing.T, e engine, dir string) *BuiltIndex {
	t.Helper()
	be, err := e.open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	tx, err := be.ReadTx()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Release()
	ib := NewIndexBuilder()
	err = tx.Range(backend.Key, nil, nil, 0, func(k, v []byte) bool { return ib.Add(k, v) == nil })
	if err != nil {
		ib.Abort()
		t.Fatal(err)
	}
	built, err := ib.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return built
}
