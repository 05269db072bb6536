package mvcc

import (
	"testing"
)

// compactAndWait applies a compaction at rev and waits until it is done.
func compactAndWait(t *testing.T, ts *testStore, rev int64) {
	t.Helper()
	var done <-chan struct{}
	ts.apply(func(b *Batch) {
		var err error
		if done, err = b.Compact(rev); err != nil {
			t.Fatal(err)
		}
	})
	waitClosed(t, done, "compaction")
}

// A compaction stores the hash of the key space at its revision under the
// previous compaction revision: the one HashByRev gave just before it, as
// etcd's compaction job stores; HashByRev answers it for that revision
// while kept (the last 10 compactions), and not after a restart.
func TestCompactionStoresHash(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		ts := newTestStoreConfig(t, e, config{compactBatchLimit: 4})
		writeHistory(ts, 10, 4)
		c1 := ts.Rev() - 12
		want1, _, prev, err := ts.HashByRev(c1)
		if err != nil {
			t.Fatal(err)
		}
		compactAndWait(t, ts, c1)
		hs := ts.Hashes()
		if len(hs) != 1 || hs[0] != (KeyValueHash{Hash: want1, CompactRevision: prev, Revision: c1}) {
			t.Fatalf("hashes after the first compaction %+v, want {%d %d %d}", hs, want1, prev, c1)
		}
		got, cur, compact, err := ts.HashByRev(c1)
		if err != nil || got != want1 || compact != prev || cur != ts.Rev() {
			t.Fatalf("HashByRev(%d) after compaction = %d, %d, %d, %v; want the stored %d under %d", c1, got, cur, compact, err, want1, prev)
		}

		c2 := ts.Rev() - 3
		want2, _, _, err := ts.HashByRev(c2)
		if err != nil {
			t.Fatal(err)
		}
		compactAndWait(t, ts, c2)
		hs = ts.Hashes()
		if len(hs) != 2 || hs[1] != (KeyValueHash{Hash: want2, CompactRevision: c1, Revision: c2}) {
			t.Fatalf("hashes after the second compaction %+v, want {%d %d %d} last", hs, want2, c1, c2)
		}
		// c1 is below the compaction point now, but its hash is kept.
		if got, _, _, err := ts.HashByRev(c1); err != nil || got != want1 {
			t.Fatalf("HashByRev(%d) below the compaction = %d, %v; want the kept %d", c1, got, err, want1)
		}

		for range 10 {
			ts.put("more", "v")
			compactAndWait(t, ts, ts.Rev())
		}
		if hs := ts.Hashes(); len(hs) != maxCompactHashes || hs[0].Revision <= c2 {
			t.Fatalf("%d hashes kept (first at %d), want the last %d", len(hs), hs[0].Revision, maxCompactHashes)
		}

		ts.reopen()
		if hs := ts.Hashes(); len(hs) != 0 {
			t.Fatalf("hashes after a restart: %+v", hs)
		}
		if _, _, compact, err := ts.HashByRev(ts.Rev()); err != nil || compact != ts.CompactRev() {
			t.Fatalf("HashByRev after a restart: compact revision %d, %v; want %d", compact, err, ts.CompactRev())
		}
	})
}
