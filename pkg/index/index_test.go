package index

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
)

func bs(s string) []byte { return []byte(s) }

// newTestIndex writes, one revision each:
//
//	2 put a, 3 put b, 4 put c, 5 put a, 6 del b, 7 put d, 8 put b, 9 del d
func newTestIndex(t *testing.T) *Index {
	t.Helper()
	ti := New()
	ti.Put(bs("a"), r(2))
	ti.Put(bs("b"), r(3))
	ti.Put(bs("c"), r(4))
	ti.Put(bs("a"), r(5))
	if err := ti.Tombstone(bs("b"), r(6)); err != nil {
		t.Fatal(err)
	}
	ti.Put(bs("d"), r(7))
	ti.Put(bs("b"), r(8))
	if err := ti.Tombstone(bs("d"), r(9)); err != nil {
		t.Fatal(err)
	}
	return ti
}

func TestIndexRange(t *testing.T) {
	ti := newTestIndex(t)
	tests := []struct {
		name     string
		key, end []byte
		atRev    int64
		limit    int
		wkeys    []string
		wrevs    []Revision
		wtotal   int
	}{
		{"single key", bs("a"), nil, 9, 0, []string{"a"}, []Revision{r(5)}, 1},
		{"single key, empty end", bs("a"), []byte{}, 9, 0, []string{"a"}, []Revision{r(5)}, 1},
		{"single key in the past", bs("a"), nil, 4, 0, []string{"a"}, []Revision{r(2)}, 1},
		{"single deleted key", bs("d"), nil, 9, 0, nil, nil, 0},
		{"missing key", bs("zz"), nil, 9, 0, nil, nil, 0},
		{"half-open range", bs("a"), bs("c"), 9, 0, []string{"a", "b"}, []Revision{r(5), r(8)}, 2},
		{"range at 6 skips deleted b", bs("a"), bs("z"), 6, 0, []string{"a", "c"}, []Revision{r(5), r(4)}, 2},
		{"range at 7", bs("a"), bs("z"), 7, 0, []string{"a", "c", "d"}, []Revision{r(5), r(4), r(7)}, 3},
		{"from key", bs("b"), []byte{0}, 9, 0, []string{"b", "c"}, []Revision{r(8), r(4)}, 2},
		{"all keys", []byte{0}, []byte{0}, 9, 0, []string{"a", "b", "c"}, []Revision{r(5), r(8), r(4)}, 3},
		{"limit keeps total", []byte{0}, []byte{0}, 9, 2, []string{"a", "b"}, []Revision{r(5), r(8)}, 3},
		{"empty range key >= end", bs("c"), bs("a"), 9, 0, nil, nil, 0},
		{"before first write", []byte{0}, []byte{0}, 1, 0, nil, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keys, revs, total := ti.Range(tt.key, tt.end, tt.atRev, tt.limit)
			var gotKeys []string
			for _, k := range keys {
				gotKeys = append(gotKeys, string(k))
			}
			if !reflect.DeepEqual(gotKeys, tt.wkeys) || !reflect.DeepEqual(revs, tt.wrevs) || total != tt.wtotal {
				t.Errorf("Range = %q %v %d, want %q %v %d", gotKeys, revs, total, tt.wkeys, tt.wrevs, tt.wtotal)
			}
			revs2, total2 := ti.Revisions(tt.key, tt.end, tt.atRev, tt.limit)
			if !reflect.DeepEqual(revs2, tt.wrevs) || total2 != tt.wtotal {
				t.Errorf("Revisions = %v %d, want %v %d", revs2, total2, tt.wrevs, tt.wtotal)
			}
			if n := ti.CountRevisions(tt.key, tt.end, tt.atRev); n != tt.wtotal {
				t.Errorf("CountRevisions = %d, want %d", n, tt.wtotal)
			}
		})
	}
}

func TestIndexGetAndTombstone(t *testing.T) {
	ti := newTestIndex(t)
	mod, created, ver, err := ti.Get(bs("a"), 9)
	if err != nil || mod != r(5) || created != r(2) || ver != 2 {
		t.Fatalf("Get(a, 9) = %v %v %d %v", mod, created, ver, err)
	}
	mod, created, ver, err = ti.Get(bs("b"), 9)
	if err != nil || mod != r(8) || created != r(8) || ver != 1 {
		t.Fatalf("Get(b, 9) = %v %v %d %v (new generation after the tombstone)", mod, created, ver, err)
	}
	if _, _, _, err := ti.Get(bs("b"), 6); !errors.Is(err, ErrRevisionNotFound) {
		t.Fatalf("Get(b, 6) at its tombstone: %v", err)
	}
	if err := ti.Tombstone(bs("d"), r(10)); !errors.Is(err, ErrRevisionNotFound) {
		t.Fatalf("tombstone of a deleted key: %v", err)
	}
	if err := ti.Tombstone(bs("nope"), r(10)); !errors.Is(err, ErrRevisionNotFound) {
		t.Fatalf("tombstone of a missing key: %v", err)
	}
	if err := ti.check(); err != nil {
		t.Fatal(err)
	}
}

func TestIndexRangeSince(t *testing.T) {
	ti := newTestIndex(t)
	ti.Put(bs("c"), rs(10, 0))
	ti.Put(bs("c"), rs(10, 1))
	tests := []struct {
		key, end []byte
		rev      int64
		want     []Revision
	}{
		{bs("a"), nil, 0, []Revision{r(2), r(5)}},
		{bs("b"), nil, 4, []Revision{r(6), r(8)}},
		{[]byte{0}, []byte{0}, 6, []Revision{r(6), r(7), r(8), r(9), rs(10, 1)}},
		{bs("a"), bs("c"), 3, []Revision{r(3), r(5), r(6), r(8)}},
		{bs("d"), nil, 9, []Revision{r(9)}},
		{bs("zz"), nil, 0, nil},
	}
	for _, tt := range tests {
		if got := ti.RangeSince(tt.key, tt.end, tt.rev); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("RangeSince(%q, %q, %d) = %v, want %v", tt.key, tt.end, tt.rev, got, tt.want)
		}
	}
}

func TestIndexCompactRemovesDeadKeys(t *testing.T) {
	ti := newTestIndex(t)
	keep := ti.Keep(9)
	avail := ti.Compact(9)
	want := set(r(5), r(8), r(4))
	if !reflect.DeepEqual(avail, set(r(5), r(8), r(4), r(9))) || !reflect.DeepEqual(keep, want) {
		t.Fatalf("Compact(9) = %v, Keep(9) = %v, want %v (+ d's tombstone at 9 for Compact)", avail, keep, want)
	}
	if n := ti.Len(); n != 4 {
		t.Fatalf("Len after compaction at d's tombstone = %d, want 4", n)
	}
	if got := ti.RangeSince(bs("d"), nil, 9); !reflect.DeepEqual(got, []Revision{r(9)}) {
		t.Fatalf("RangeSince(d, 9) after compaction = %v, want the tombstone", got)
	}
	if avail := ti.Compact(10); !reflect.DeepEqual(avail, want) {
		t.Fatalf("Compact(10) = %v, want %v", avail, want)
	}
	if n := ti.Len(); n != 3 {
		t.Fatalf("Len after compacting past d's tombstone = %d, want 3 (d is gone)", n)
	}
	if err := ti.check(); err != nil {
		t.Fatal(err)
	}
}

// Input keys are copied, so callers may reuse their buffers.
func TestIndexCopiesKeys(t *testing.T) {
	ti := New()
	buf := bs("k1")
	ti.Put(buf, r(2))
	buf[1] = '2'
	if _, _, _, err := ti.Get(bs("k1"), 2); err != nil {
		t.Fatalf("Get(k1) after the caller reused its buffer: %v", err)
	}
}

// event is one write in the reference model.
type event struct {
	rev  Revision
	tomb bool
}

// modelGet answers Get from the full history of one key.
func modelGet(evs []event, atRev int64) (mod, created Revision, ver int64, ok bool) {
	for _, e := range evs {
		if e.rev.Main > atRev {
			break
		}
		if e.tomb {
			mod, created, ver, ok = Revision{}, Revision{}, 0, false
			continue
		}
		if !ok {
			created = e.rev
		}
		ok, mod = true, e.rev
		ver++
	}
	return mod, created, ver, ok
}

// TestIndexCompactPreservesReads runs random histories and checks, against a
// model that never forgets, that after compacting at c every Get at c or later
// answers as before and the kept set is exactly each key's newest put <= c
// when that put is still live at c.
func TestIndexCompactPreservesReads(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	keys := []string{"a", "b", "c", "d", "e"}
	for iter := range 200 {
		ti := New()
		hist := map[string][]event{}
		main := int64(1)
		// Rounds of writes and compactions: a key compacted down to one
		// revision takes the compact form, and the next round writes to it
		// again.
		compacted := int64(0)
		for range 3 {
			for range rng.IntN(41) {
				main++
				nsub := 1 + rng.IntN(3)
				for sub := range nsub {
					k := keys[rng.IntN(len(keys))]
					rev := rs(main, int64(sub))
					if rng.IntN(3) == 0 {
						if ti.Tombstone(bs(k), rev) == nil {
							hist[k] = append(hist[k], event{rev, true})
						}
						continue
					}
					ti.Put(bs(k), rev)
					hist[k] = append(hist[k], event{rev, false})
				}
			}
			compactAt := []int64{compacted + rng.Int64N(main-compacted+1), compacted + rng.Int64N(main-compacted+1)}
			if compactAt[0] > compactAt[1] {
				compactAt[0], compactAt[1] = compactAt[1], compactAt[0]
			}
			for _, c := range compactAt {
				want, wantKept := set(), set()
				for _, evs := range hist {
					var last *event
					for i := range evs {
						if evs[i].rev.Main <= c {
							last = &evs[i]
						}
					}
					if last != nil && !last.tomb {
						want[last.rev] = struct{}{}
					}
					if last != nil && (!last.tomb || last.rev.Main == c) {
						wantKept[last.rev] = struct{}{}
					}
				}
				if keep := ti.Keep(c); !reflect.DeepEqual(keep, want) {
					t.Fatalf("iter %d: Keep(%d) = %v, want %v\n%v", iter, c, keep, want, hist)
				}
				if avail := ti.Compact(c); !reflect.DeepEqual(avail, wantKept) {
					t.Fatalf("iter %d: Compact(%d) = %v, want %v", iter, c, avail, wantKept)
				}
				if err := ti.check(); err != nil {
					t.Fatalf("iter %d: after Compact(%d): %v", iter, c, err)
				}
				for _, k := range keys {
					for at := c; at <= main+1; at++ {
						wmod, wcreated, wver, ok := modelGet(hist[k], at)
						mod, created, ver, err := ti.Get(bs(k), at)
						if ok != (err == nil) || mod != wmod || created != wcreated || ver != wver {
							t.Fatalf("iter %d: after Compact(%d) Get(%s, %d) = %v %v %d %v, want %v %v %d found=%v",
								iter, c, k, at, mod, created, ver, err, wmod, wcreated, wver, ok)
						}
					}
					var wsince []Revision
					for _, e := range hist[k] {
						if e.rev.Main < c {
							continue
						}
						if n := len(wsince); n > 0 && wsince[n-1].Main == e.rev.Main {
							wsince[n-1] = e.rev
							continue
						}
						wsince = append(wsince, e.rev)
					}
					// Since at or after the compaction point sees every event.
					if got := ti.RangeSince(bs(k), nil, c); !reflect.DeepEqual(got, wsince) {
						t.Fatalf("iter %d: RangeSince(%s, %d) = %v, want %v", iter, k, c, got, wsince)
					}
				}
			}
			compacted = compactAt[1]
		}
	}
}

// One writer, one compactor and several readers at once; under -race this
// checks the locking, and readers at a fixed revision >= the compaction point
// must always see the same answer.
func TestIndexConcurrentReadersWriterCompactor(t *testing.T) {
	ti := New()
	const nkeys = 50
	for i := range nkeys {
		ti.Put(bs(fmt.Sprintf("k%03d", i)), r(2))
	}
	const stable = int64(2)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 8)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(stop)
		for main := int64(3); main < 300; main++ {
			k := bs(fmt.Sprintf("k%03d", main%nkeys))
			ti.Put(k, r(main))
			if main%7 == 0 {
				ti.Put(bs(fmt.Sprintf("new%03d", main)), r(main))
				_ = ti.Tombstone(bs(fmt.Sprintf("new%03d", main)), rs(main, 1))
			}
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		ti.Compact(stable)
	}()
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				revs, total := ti.Revisions([]byte{0}, []byte{0}, stable, 0)
				if total != nkeys || len(revs) != nkeys {
					errs <- fmt.Errorf("Revisions at %d: %d keys (total %d), want %d", stable, len(revs), total, nkeys)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := ti.check(); err != nil {
		t.Fatal(err)
	}
}

func TestIndexRestoreTombstone(t *testing.T) {
	ti := New()
	ti.RestoreTombstone(bs("a"), r(5))
	ti.Restore(bs("b"), r(2), r(4), 3)
	ti.RestoreTombstone(bs("b"), r(6))
	if err := ti.check(); err != nil {
		t.Fatal(err)
	}
	if got := ti.RangeSince([]byte{0}, []byte{0}, 0); !reflect.DeepEqual(got, []Revision{r(4), r(5), r(6)}) {
		t.Fatalf("RangeSince = %v, want [4 5 6]", got)
	}
	if _, _, _, err := ti.Get(bs("a"), 5); !errors.Is(err, ErrRevisionNotFound) {
		t.Fatalf("Get of a restored tombstone: %v", err)
	}
	if _, created, ver, err := ti.Get(bs("b"), 5); err != nil || created != r(2) || ver != 3 {
		t.Fatalf("Get(b, 5) = %v %d %v, want created 2 version 3", created, ver, err)
	}
	ti.Put(bs("a"), r(7))
	if mod, created, ver, err := ti.Get(bs("a"), 7); err != nil || mod != r(7) || created != r(7) || ver != 1 {
		t.Fatalf("Get(a, 7) after re-put = %v %v %d %v", mod, created, ver, err)
	}
	if avail := ti.Compact(6); !reflect.DeepEqual(avail, set(r(6))) {
		t.Fatalf("Compact(6) = %v, want b's tombstone", avail)
	}
	if avail := ti.Compact(8); !reflect.DeepEqual(avail, set(r(7))) || ti.Len() != 1 {
		t.Fatalf("Compact(8) = %v (len %d), want {7} and only a left", avail, ti.Len())
	}
}

// Put answers the key's create revision and version as of the put, the
// same as a Get at the put's revision afterwards: a new key, later puts, a
// new generation after a delete, and a key restored with compacted history.
func TestIndexPutReturnsGeneration(t *testing.T) {
	ti := New()
	ti.Restore(bs("old"), r(2), r(4), 3)
	for _, tc := range []struct {
		op      string
		key     string
		rev     Revision
		created int64
		ver     int64
	}{
		{"put", "a", r(5), 5, 1},
		{"put", "a", Revision{Main: 6, Sub: 1}, 5, 2},
		{"put", "a", r(7), 5, 3},
		{"del", "a", r(8), 0, 0},
		{"put", "a", r(9), 9, 1},
		{"put", "old", r(10), 2, 4},
	} {
		if tc.op == "del" {
			if err := ti.Tombstone(bs(tc.key), tc.rev); err != nil {
				t.Fatal(err)
			}
			continue
		}
		created, ver := ti.Put(bs(tc.key), tc.rev)
		if created.Main != tc.created || ver != tc.ver {
			t.Fatalf("put %s at %v: created %v version %d, want %d and %d", tc.key, tc.rev, created, ver, tc.created, tc.ver)
		}
		_, gc, gv, err := ti.Get(bs(tc.key), tc.rev.Main)
		if err != nil || gc != created || gv != ver {
			t.Fatalf("get %s at %d: created %v version %d (%v), put said %v and %d", tc.key, tc.rev.Main, gc, gv, err, created, ver)
		}
	}
}

// A key put once, or rebuilt from the backend, takes one heap object of its
// own (the copy of the key; its key index in the compact form sits in a slab
// chunk): the memory per key of a large store. The slab's chunks, the key
// table's growth and the tree's nodes add a fraction of an object per key. A
// second put leaves the compact form with two allocations; a put to a key
// whose history has room allocates nothing.
func TestIndexObjectsPerKey(t *testing.T) {
	const n = 4096
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "key-%08d", i)
	}
	for _, tt := range []struct {
		name string
		add  func(ti *Index, i int)
	}{
		{"put", func(ti *Index, i int) { ti.Put(keys[i], r(int64(i+1))) }},
		{"restore", func(ti *Index, i int) { ti.Restore(keys[i], r(int64(i+1)), r(int64(i+1)), 1) }},
	} {
		ti := New()
		i := 0
		perKey := testing.AllocsPerRun(n-1, func() { tt.add(ti, i); i++ })
		if perKey > 1.2 {
			t.Errorf("%s: %.2f allocations per new key, want 1 (its key) and the slab's, table's and tree's shares", tt.name, perKey)
		}
	}
	ti := New()
	for i := range keys {
		ti.Put(keys[i], r(1))
	}
	// Leaving the compact form: the history and its revisions.
	i, rev := 0, int64(2)
	if second := testing.AllocsPerRun(n-1, func() { ti.Put(keys[i], r(rev)); i++; rev++ }); second != 2 {
		t.Errorf("the second put to a key allocated %.0f times, want 2", second)
	}
	if again := testing.AllocsPerRun(1, func() { ti.Put(keys[0], r(rev)); rev++ }); again != 0 {
		t.Errorf("a put to a key with history allocated %.0f times, want 0", again)
	}
}
