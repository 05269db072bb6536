package index

import "testing"

// Live counts keys put and not deleted since, through puts, deletes,
// restores and compactions.
func TestLive(t *testing.T) {
	ti := New()
	want := func(step string, n int64) {
		t.Helper()
		if got := ti.Live(); got != n {
			t.Fatalf("%s: Live() = %d, want %d", step, got, n)
		}
	}
	want("empty", 0)
	ti.Put([]byte("a"), Revision{Main: 2})
	ti.Put([]byte("b"), Revision{Main: 3})
	ti.Put([]byte("a"), Revision{Main: 4})
	want("puts", 2)
	if err := ti.Tombstone([]byte("a"), Revision{Main: 5}); err != nil {
		t.Fatal(err)
	}
	want("delete", 1)
	if err := ti.Tombstone([]byte("a"), Revision{Main: 6}); err == nil {
		t.Fatal("second delete of a: no error")
	}
	if err := ti.Tombstone([]byte("zz"), Revision{Main: 6}); err == nil {
		t.Fatal("delete of an unknown key: no error")
	}
	want("deletes of dead keys", 1)
	ti.Put([]byte("a"), Revision{Main: 7})
	want("put after delete", 2)
	ti.Compact(7)
	want("compact", 2)
	if err := ti.Tombstone([]byte("b"), Revision{Main: 8}); err != nil {
		t.Fatal(err)
	}
	ti.Compact(8)
	want("compact at a delete", 1)

	// Rebuilding from a compacted backend.
	ti = New()
	ti.Restore([]byte("a"), Revision{Main: 1}, Revision{Main: 3}, 2)
	ti.RestoreTombstone([]byte("b"), Revision{Main: 4})
	want("restored", 1)
	ti.RestoreTombstone([]byte("a"), Revision{Main: 5})
	want("restored delete", 0)
	ti.Restore([]byte("b"), Revision{Main: 6}, Revision{Main: 6}, 1)
	want("restored put after delete", 1)
}
