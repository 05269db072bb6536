package mvcc

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// indexState is what a restart must give back exactly: the encoded index,
// the revisions and the live key count.
type indexState struct {
	enc                []byte
	rev, compact, live int64
	fromFile           bool
}

func (ts *testStore) indexState() indexState {
	return indexState{enc: ts.idx.AppendEncoded(nil), rev: ts.Rev(), compact: ts.CompactRev(),
		live: ts.idx.Live(), fromFile: ts.indexFromFile}
}

func (a indexState) differs(b indexState) string {
	switch {
	case !bytes.Equal(a.enc, b.enc):
		return fmt.Sprintf("index encodings differ (%d and %d bytes)", len(a.enc), len(b.enc))
	case a.rev != b.rev || a.compact != b.compact || a.live != b.live:
		return fmt.Sprintf("rev/compact/live %d/%d/%d and %d/%d/%d", a.rev, a.compact, a.live, b.rev, b.compact, b.live)
	}
	return ""
}

// rebuiltThenTaken opens the closed store twice: without the index file
// (a rebuild, leaving the file where it is), then with it, and returns the
// state of each open. The store stays open after the second.
func (ts *testStore) rebuiltThenTaken(file string) (rebuilt, taken indexState) {
	ts.cfg.indexFile = ""
	ts.open()
	rebuilt = ts.indexState()
	ts.close()
	ts.cfg.indexFile = file
	ts.open()
	return rebuilt, ts.indexState()
}

// randomWrites applies n transactions of one to three puts and deletes
// over 30 keys, some of them deleting ranges, and compacts now and then.
func (ts *testStore) randomWrites(rng *rand.Rand, n int) {
	ts.t.Helper()
	for range n {
		ts.apply(func(b *Batch) {
			tw := b.Write()
			for range rng.IntN(3) + 1 {
				key := []byte(fmt.Sprintf("k%02d", rng.IntN(30)))
				switch rng.IntN(6) {
				case 0:
					tw.DeleteRange(key, nil)
				case 1:
					tw.DeleteRange(key, []byte(fmt.Sprintf("k%02d", rng.IntN(30))))
				default:
					tw.Put(key, []byte(fmt.Sprint(rng.Int())), 0)
				}
			}
			tw.End()
		})
		if at := ts.Rev() - rng.Int64N(5); rng.IntN(40) == 0 && at > ts.CompactRev() {
			ts.compact(at)
		}
	}
}

// A clean close leaves the index file; the next open takes it and has
// exactly the index, revisions and live count a rebuild from the same
// backend gives, round after round of writes, deletes and compactions, and
// goes on from there as the rebuilt store would.
func TestIndexFileRestart(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		for seed := range uint64(4) {
			testIndexFileRounds(t, e, seed)
		}
	})
}

func testIndexFileRounds(t *testing.T, e engine, seed uint64) {
	file := filepath.Join(t.TempDir(), "index")
	ts := newTestStoreConfig(t, e, config{indexFile: file})
	rng := rand.New(rand.NewPCG(seed, 8))
	for round := range 5 {
		ts.randomWrites(rng, 150)
		ts.close()
		if _, err := os.Stat(file); err != nil {
			t.Fatalf("round %d: no index file after a clean close: %v", round, err)
		}
		rebuilt, loaded := ts.rebuiltThenTaken(file)
		if !loaded.fromFile || rebuilt.fromFile {
			t.Fatalf("round %d: index from the file: %v, in the rebuild: %v", round, loaded.fromFile, rebuilt.fromFile)
		}
		if why := loaded.differs(rebuilt); why != "" {
			t.Fatalf("seed %d round %d: loaded from the file and rebuilt: %s", seed, round, why)
		}
		if _, err := os.Stat(file); !os.IsNotExist(err) {
			t.Fatalf("round %d: the index file is still there after open: %v", round, err)
		}
	}
}

// An index file read ahead of the open (ReadIndexFile, while the backend
// opens) gives the open what taking it there would; one discarded is gone
// and the next open rebuilds.
func TestIndexFileReadAhead(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		file := filepath.Join(t.TempDir(), "index")
		ts := newTestStoreConfig(t, e, config{indexFile: file})
		ts.randomWrites(rand.New(rand.NewPCG(3, 8)), 300)
		want := ts.indexState()
		ts.close()

		ts.cfg = config{indexFileRead: ReadIndexFile(file, nil)}
		ts.open()
		if got := ts.indexState(); !got.fromFile || got.differs(want) != "" {
			t.Fatalf("read ahead: from the file %v, against the state closed: %q", got.fromFile, got.differs(want))
		}
		if _, err := os.Stat(file); !os.IsNotExist(err) {
			t.Fatalf("the index file is still there after open: %v", err)
		}
		ts.close() // the store read ahead writes its file again
		if _, err := os.Stat(file); err != nil {
			t.Fatalf("no index file after a clean close: %v", err)
		}

		ReadIndexFile(file, nil).Discard()
		if _, err := os.Stat(file); !os.IsNotExist(err) {
			t.Fatalf("the index file is still there after Discard: %v", err)
		}
		ts.cfg = config{indexFile: file}
		ts.open()
		if got := ts.indexState(); got.fromFile || got.differs(want) != "" {
			t.Fatalf("after Discard: from the file %v, against the state closed: %q", got.fromFile, got.differs(want))
		}
	})
}

// The file is not used when the backend moved on after it was written (a
// start without it, a write), nor when it is damaged: the store rebuilds
// and has the backend's data. Either way the file is gone after the open.
func TestIndexFileNotUsed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(t *testing.T, ts *testStore, file string)
	}{
		{"backend moved on", func(t *testing.T, ts *testStore, file string) {
			ts.cfg.indexFile = ""
			ts.open()
			ts.put("late", "v")
			ts.close()
		}},
		{"consistent index moved on", func(t *testing.T, ts *testStore, file string) {
			ts.cfg.indexFile = ""
			ts.open()
			ts.apply(func(b *Batch) { b.SetConsistentIndex(ts.ConsistentIndex()+1, 1) })
			ts.close()
		}},
		{"damaged", func(t *testing.T, ts *testStore, file string) {
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 1
			if err := os.WriteFile(file, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"truncated", func(t *testing.T, ts *testStore, file string) {
			st, err := os.Stat(file)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(file, st.Size()/2); err != nil {
				t.Fatal(err)
			}
		}},
		{"cut to a few bytes", func(t *testing.T, ts *testStore, file string) {
			if err := os.Truncate(file, 10); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forEachEngine(t, func(t *testing.T, e engine) {
				file := filepath.Join(t.TempDir(), "index")
				ts := newTestStoreConfig(t, e, config{indexFile: file})
				ts.randomWrites(rand.New(rand.NewPCG(1, 1)), 100)
				ts.close()
				tc.spoil(t, ts, file)
				rebuilt, got := ts.rebuiltThenTaken(file)
				if got.fromFile {
					t.Fatal("the index came from the file")
				}
				if why := got.differs(rebuilt); why != "" {
					t.Fatal(why)
				}
				if _, err := os.Stat(file); !os.IsNotExist(err) {
					t.Fatalf("the index file is still there after open: %v", err)
				}
			})
		})
	}
}

// With a compaction scheduled but not finished at close, no file is
// written: the next open resumes the compaction on a rebuilt index.
func TestIndexFileSkippedWithCompactionPending(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		file := filepath.Join(t.TempDir(), "index")
		// No compactor runs: the compaction stays scheduled.
		ts := newTestStoreConfig(t, e, config{indexFile: file, externalCompactor: true})
		for i := range 20 {
			ts.put(fmt.Sprint("k", i%3), "v")
		}
		ts.scheduleCompact(10)
		ts.close()
		if _, err := os.Stat(file); !os.IsNotExist(err) {
			t.Fatalf("an index file was written with a compaction pending: %v", err)
		}
	})
}
