package mvcc

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvd-dev/kvd/pkg/index"
)

// model is the store's semantics written the obvious way: a map of live keys
// and a full copy of it at every revision.
type model struct {
	rev       int64
	cur       map[string]kv
	hist      map[int64][]kv            // sorted state at each revision
	deletedAt map[int64]map[string]bool // keys a tombstone was written for
}

func newModel() *model {
	return &model{rev: 1, cur: map[string]kv{}, hist: map[int64][]kv{1: nil}, deletedAt: map[int64]map[string]bool{}}
}

func (m *model) snapshot() []kv {
	var out []kv
	for _, v := range m.cur {
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b kv) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// op is one operation of a write txn.
type op struct {
	del      bool
	key, end string // end: "" one key, "\x00" from key, else [key, end)
	value    string
	lease    int64
}

func (o op) endBytes() []byte {
	if o.end == "" {
		return nil
	}
	return []byte(o.end)
}

func inRange(k string, o op) bool {
	switch o.end {
	case "":
		return k == o.key
	case "\x00":
		return k >= o.key
	}
	return k >= o.key && k < o.end
}

// applyTxn applies ops as one txn and reports whether it wrote.
func (m *model) applyTxn(ops []op) bool {
	rev := m.rev + 1
	wrote := false
	for _, o := range ops {
		if !o.del {
			v, ok := m.cur[o.key]
			if !ok {
				v = kv{Key: o.key, Create: rev}
			}
			v.Value, v.Mod, v.Version, v.LeaseID = o.value, rev, v.Version+1, o.lease
			m.cur[o.key] = v
			wrote = true
			continue
		}
		for k := range m.cur {
			if inRange(k, o) {
				delete(m.cur, k)
				if m.deletedAt[rev] == nil {
					m.deletedAt[rev] = map[string]bool{}
				}
				m.deletedAt[rev][k] = true
				wrote = true
			}
		}
	}
	if wrote {
		m.rev = rev
		m.hist[rev] = m.snapshot()
	}
	return wrote
}

var modelKeys = []string{"a", "b", "c", "d", "e", "p/0", "p/1", "p/2", "p/3"}

func randomTxn(rng *rand.Rand) []op {
	n := rng.IntN(4)
	var ops []op
	for range n {
		k := modelKeys[rng.IntN(len(modelKeys))]
		switch rng.IntN(6) {
		case 0:
			ops = append(ops, op{del: true, key: k})
		case 1:
			ops = append(ops, op{del: true, key: k, end: modelKeys[rng.IntN(len(modelKeys))]})
		case 2:
			ops = append(ops, op{del: true, key: "p/", end: "p0"})
		default:
			ops = append(ops, op{key: k, value: fmt.Sprint(rng.IntN(1000)), lease: int64(rng.IntN(2) * 5)})
		}
	}
	return ops
}

// run applies a random batch to the store and the model.
func runBatch(t *testing.T, ts *testStore, m *model, rng *rand.Rand, ci uint64) {
	t.Helper()
	ntx := 1 + rng.IntN(4)
	ts.apply(func(b *Batch) {
		for range ntx {
			ops := randomTxn(rng)
			tw := b.Write()
			for _, o := range ops {
				if o.del {
					tw.DeleteRange([]byte(o.key), o.endBytes())
				} else {
					tw.Put([]byte(o.key), []byte(o.value), o.lease)
				}
			}
			checkVersions(t, tw, all, all)
			for _, o := range ops {
				checkVersions(t, tw, []byte(o.key), o.endBytes())
			}
			wrote := m.applyTxn(ops)
			if (len(tw.Events()) > 0) != wrote || tw.Rev() != m.rev {
				t.Fatalf("txn %v: wrote %v rev %d, model wrote %v rev %d", ops, len(tw.Events()) > 0, tw.Rev(), wrote, m.rev)
			}
			checkVersions(t, tw, all, all)
			tw.End()
		}
		b.SetConsistentIndex(ci, 3)
	})
}

// checkAgainstModel reads every revision from the compaction point on and
// random sub-ranges, and expects ErrCompacted below it.
func checkAgainstModel(t *testing.T, ts *testStore, m *model, rng *rand.Rand) {
	t.Helper()
	if ts.Rev() != m.rev {
		t.Fatalf("store rev %d, model rev %d", ts.Rev(), m.rev)
	}
	c := ts.CompactRev()
	view := ts.Read()
	checkVersions(t, view, all, all)
	view.End()
	for r := int64(1); r <= m.rev; r++ {
		got, _, err := ts.rangeAt(all, all, RangeOptions{Rev: r})
		if r < c {
			if !errors.Is(err, ErrCompacted) {
				t.Fatalf("range at %d below compaction %d: %v", r, c, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("range at %d: %v", r, err)
		}
		if want := m.hist[r]; !eqKVs(got, want) {
			t.Fatalf("range all at %d (compacted at %d):\n got %v\nwant %v", r, c, got, want)
		}
		if got, want := indexVersions(ts.idx, all, all, r), versionsOf(m.hist[r]); !slices.Equal(got, want) {
			t.Fatalf("index versions at %d (compacted at %d):\n got %v\nwant %v", r, c, got, want)
		}
		k1, k2 := modelKeys[rng.IntN(len(modelKeys))], modelKeys[rng.IntN(len(modelKeys))]
		limit := rng.IntN(3)
		o := op{key: k1, end: k2}
		if rng.IntN(3) == 0 {
			o.end = ""
		}
		var want []kv
		count := 0
		for _, v := range m.hist[r] {
			if inRange(v.Key, o) {
				count++
				if limit == 0 || len(want) < limit {
					want = append(want, v)
				}
			}
		}
		got, res, err := ts.rangeAt([]byte(o.key), o.endBytes(), RangeOptions{Rev: r, Limit: int64(limit)})
		if err != nil || !eqKVs(got, want) || res.Count != count || res.Rev != m.rev {
			t.Fatalf("range %q-%q at %d limit %d = %v count %d rev %d %v, want %v count %d rev %d",
				o.key, o.end, r, limit, got, res.Count, res.Rev, err, want, count, m.rev)
		}
	}
}

// version is what Versions reports of one key.
type version struct{ created, modified, version int64 }

func versionsOf(kvs []kv) []version {
	var out []version
	for _, v := range kvs {
		out = append(out, version{v.Create, v.Mod, v.Version})
	}
	return out
}

func collectVersions(visit func(f func(created, modified, ver int64) bool)) []version {
	var out []version
	visit(func(created, modified, ver int64) bool {
		out = append(out, version{created, modified, ver})
		return true
	})
	return out
}

// indexVersions is Versions at any revision, straight from the index.
func indexVersions(idx *index.Index, key, end []byte, rev int64) []version {
	return collectVersions(func(f func(created, modified, ver int64) bool) {
		versions(idx, key, end, rev, f)
	})
}

// checkVersions expects r's Versions to report the fields of r's Range, and
// to stop when told to.
func checkVersions(t *testing.T, r Reader, key, end []byte) {
	t.Helper()
	res, err := r.Range(key, end, RangeOptions{})
	if err != nil {
		t.Fatalf("range %q-%q: %v", key, end, err)
	}
	want := versionsOf(toKVs(res))
	got := collectVersions(func(f func(created, modified, ver int64) bool) { r.Versions(key, end, f) })
	if !slices.Equal(got, want) {
		t.Fatalf("versions %q-%q at %d:\n got %v\nwant %v", key, end, r.Rev(), got, want)
	}
	n := 0
	r.Versions(key, end, func(int64, int64, int64) bool { n++; return false })
	if n != min(len(want), 1) {
		t.Fatalf("versions %q-%q went on after f returned false: %d calls", key, end, n)
	}
}

// keptAt is how many Key bucket entries <= c a finished compaction at c
// leaves: the keys live at c, and tombstones at c of keys not live at c.
func (m *model) keptAt(c int64) int {
	n := len(m.hist[c])
	for k := range m.deletedAt[c] {
		if _, live := m.histKey(c, k); !live {
			n++
		}
	}
	return n
}

func (m *model) histKey(rev int64, key string) (kv, bool) {
	for _, v := range m.hist[rev] {
		if v.Key == key {
			return v, true
		}
	}
	return kv{}, false
}

// TestModel runs random batches and compactions, checking every revision
// against the model (time travel), the physical compaction, and a reopen
// (from the index file, or with the index rebuilt from the backend).
func TestModel(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		rng := rand.New(rand.NewPCG(7, 11))
		ts := newTestStoreConfig(t, e, config{compactBatchLimit: 3, indexFile: filepath.Join(t.TempDir(), "index")})
		m := newModel()
		ci := uint64(0)
		for round := range 6 {
			for range 10 {
				ci++
				runBatch(t, ts, m, rng, ci)
			}
			checkAgainstModel(t, ts, m, rng)
			if round%2 == 1 {
				c := max(ts.CompactRev()+1, m.rev-rng.Int64N(8))
				// Compact at a revision with a tombstone now and then.
				for r := c; r <= m.rev; r++ {
					if len(m.deletedAt[r]) > 0 && rng.IntN(2) == 0 {
						c = r
						break
					}
				}
				ts.compact(c)
				if got, want := ts.countKeyBucket(c), m.keptAt(c); got != want {
					t.Fatalf("after compaction at %d the Key bucket holds %d revisions <= %d, want %d", c, got, c, want)
				}
				checkAgainstModel(t, ts, m, rng)
			}
			if round%3 == 2 {
				// Everything committed, then a stop that leaves no index
				// file: the index is rebuilt from the backend.
				if err := ts.Flush(); err != nil {
					t.Fatal(err)
				}
				ts.crash()
				ts.open()
			} else {
				ts.reopen()
			}
			if want := round%3 != 2; ts.indexFromFile != want {
				t.Fatalf("round %d: index from the file %v, want %v", round, ts.indexFromFile, want)
			}
			if ts.ConsistentIndex() != ci || ts.ConsistentTerm() != 3 {
				t.Fatalf("reopened consistent index %d term %d, want %d 3", ts.ConsistentIndex(), ts.ConsistentTerm(), ci)
			}
			checkAgainstModel(t, ts, m, rng)
		}
	})
}
