package index

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"
	"unsafe"
)

func r(main int64) Revision       { return Revision{Main: main} }
func rs(main, sub int64) Revision { return Revision{Main: main, Sub: sub} }
func set(revs ...Revision) map[Revision]struct{} {
	m := make(map[Revision]struct{}, len(revs))
	for _, rev := range revs {
		m[rev] = struct{}{}
	}
	return m
}

// newTestKeyIndex builds the history etcd's key_index_test uses:
//
//	{2.0, 4.0, 6.0(t)} {8.0, 10.0, 12.0(t)} {14.0, 14.1, 16.0(t)} {}
func newTestKeyIndex(t *testing.T) ref {
	t.Helper()
	ki := newKeyIndex("foo")
	ki.put(r(2))
	ki.put(r(4))
	mustTombstone(t, ki, r(6))
	ki.put(r(8))
	ki.put(r(10))
	mustTombstone(t, ki, r(12))
	ki.put(r(14))
	ki.put(rs(14, 1))
	mustTombstone(t, ki, r(16))
	if err := ki.check(); err != nil {
		t.Fatal(err)
	}
	return ki
}

// generationsOf returns a copy of ki's generations, whatever its form.
func generationsOf(ki ref) []generation {
	var vr [1]Revision
	view := [1]generation{ki.compactView(&vr)}
	return slices.Clone(ki.generationsOr(view[:]))
}

func mustTombstone(t *testing.T, ki ref, rev Revision) {
	t.Helper()
	if err := ki.tombstone(rev); err != nil {
		t.Fatalf("tombstone %v: %v", rev, err)
	}
}

func TestKeyIndexGet(t *testing.T) {
	ki := newTestKeyIndex(t)
	ki.compact(4, map[Revision]struct{}{})
	tests := []struct {
		atRev         int64
		wmod, wcreate Revision
		wver          int64
		werr          error
	}{
		{17, Revision{}, Revision{}, 0, ErrRevisionNotFound},
		{16, Revision{}, Revision{}, 0, ErrRevisionNotFound},
		// third generation
		{15, rs(14, 1), r(14), 2, nil},
		{14, rs(14, 1), r(14), 2, nil},
		{13, Revision{}, Revision{}, 0, ErrRevisionNotFound},
		{12, Revision{}, Revision{}, 0, ErrRevisionNotFound},
		// second generation
		{11, r(10), r(8), 2, nil},
		{10, r(10), r(8), 2, nil},
		{9, r(8), r(8), 1, nil},
		{8, r(8), r(8), 1, nil},
		{7, Revision{}, Revision{}, 0, ErrRevisionNotFound},
		{6, Revision{}, Revision{}, 0, ErrRevisionNotFound},
		// first generation, compacted below 4: created and version survive
		{5, r(4), r(2), 2, nil},
		{4, r(4), r(2), 2, nil},
		{3, Revision{}, Revision{}, 0, ErrRevisionNotFound},
		{2, Revision{}, Revision{}, 0, ErrRevisionNotFound},
		{1, Revision{}, Revision{}, 0, ErrRevisionNotFound},
		{0, Revision{}, Revision{}, 0, ErrRevisionNotFound},
	}
	for _, tt := range tests {
		mod, create, ver, err := ki.get(tt.atRev)
		if !errors.Is(err, tt.werr) && err != tt.werr {
			t.Errorf("get(%d) err = %v, want %v", tt.atRev, err, tt.werr)
		}
		if mod != tt.wmod || create != tt.wcreate || ver != tt.wver {
			t.Errorf("get(%d) = %v %v %d, want %v %v %d", tt.atRev, mod, create, ver, tt.wmod, tt.wcreate, tt.wver)
		}
	}
}

func TestKeyIndexSince(t *testing.T) {
	ki := newTestKeyIndex(t)
	ki.compact(4, map[Revision]struct{}{})
	all := []Revision{r(4), r(6), r(8), r(10), r(12), rs(14, 1), r(16)}
	tests := []struct {
		rev   int64
		wrevs []Revision
	}{
		{17, nil},
		{16, all[6:]},
		{15, all[6:]},
		{14, all[5:]},
		{13, all[5:]},
		{12, all[4:]},
		{11, all[4:]},
		{10, all[3:]},
		{9, all[3:]},
		{8, all[2:]},
		{7, all[2:]},
		{6, all[1:]},
		{5, all[1:]},
		{4, all},
		{3, all},
		{0, all},
	}
	for _, tt := range tests {
		if got := ki.since(tt.rev); !reflect.DeepEqual(got, tt.wrevs) {
			t.Errorf("since(%d) = %v, want %v", tt.rev, got, tt.wrevs)
		}
	}
}

func TestKeyIndexPutAndTombstone(t *testing.T) {
	ki := newKeyIndex("foo")
	if err := ki.tombstone(r(1)); !errors.Is(err, ErrRevisionNotFound) {
		t.Fatalf("tombstone of a never written key: %v, want ErrRevisionNotFound", err)
	}
	ki.put(r(5))
	ki.put(r(7))
	mustTombstone(t, ki, r(9))
	if err := ki.tombstone(r(11)); !errors.Is(err, ErrRevisionNotFound) {
		t.Fatalf("second tombstone: %v, want ErrRevisionNotFound", err)
	}
	ki.put(rs(11, 2))
	want := []generation{
		{created: r(5), ver: 3, revs: []Revision{r(5), r(7), r(9)}},
		{created: rs(11, 2), ver: 1, revs: []Revision{rs(11, 2)}},
	}
	if !reflect.DeepEqual(generationsOf(ki), want) || ki.modified() != rs(11, 2) {
		t.Fatalf("generations = %+v modified %v, want %+v", generationsOf(ki), ki.modified(), want)
	}
	if err := ki.check(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("put of an older revision did not panic")
		}
	}()
	ki.put(rs(11, 1))
}

func TestKeyIndexRestore(t *testing.T) {
	ki := newKeyIndex("foo")
	ki.restore(r(3), r(7), 4)
	ki.put(r(9))
	mod, create, ver, err := ki.get(9)
	if err != nil || mod != r(9) || create != r(3) || ver != 5 {
		t.Fatalf("get(9) = %v %v %d %v, want 9 3 5", mod, create, ver, err)
	}
	if _, _, _, err := ki.get(6); !errors.Is(err, ErrRevisionNotFound) {
		t.Fatalf("get(6) before the restored revision: %v", err)
	}
}

func TestKeyIndexFindGeneration(t *testing.T) {
	ki := newTestKeyIndex(t)
	all := ki.hist().generations
	g0, g1, g2 := &all[0], &all[1], &all[2]
	tests := []struct {
		rev  int64
		want *generation
	}{
		{0, nil}, {1, nil}, {2, g0}, {3, g0}, {4, g0}, {5, g0}, {6, nil},
		{7, nil}, {8, g1}, {9, g1}, {10, g1}, {11, g1}, {12, nil},
		{13, nil}, {14, g2}, {15, g2}, {16, nil}, {17, nil},
	}
	for _, tt := range tests {
		if got := findGeneration(all, tt.rev); got != tt.want {
			t.Errorf("findGeneration(%d) = %p, want %p", tt.rev, got, tt.want)
		}
	}
}

// Each row is the state after compacting the test key index at rev.
// A tombstone exactly at the compaction revision stays in the index and in
// the compacted set (so a watch from there sees the delete) but not in Keep.
var compactTests = []struct {
	rev   int64
	wgens []generation
	wkept map[Revision]struct{} // what compact keeps
	wkeep map[Revision]struct{} // what keep reports
}{
	{1, gensFrom(0, nil), set(), set()},
	{2, gensFrom(0, nil), set(r(2)), set(r(2))},
	{3, gensFrom(0, nil), set(r(2)), set(r(2))},
	{4, gensFrom(0, []Revision{r(4), r(6)}), set(r(4)), set(r(4))},
	{5, gensFrom(0, []Revision{r(4), r(6)}), set(r(4)), set(r(4))},
	{6, gensFrom(0, []Revision{r(6)}), set(r(6)), set()},
	{7, gensFrom(1, nil), set(), set()},
	{8, gensFrom(1, nil), set(r(8)), set(r(8))},
	{9, gensFrom(1, nil), set(r(8)), set(r(8))},
	{10, gensFrom(1, []Revision{r(10), r(12)}), set(r(10)), set(r(10))},
	{11, gensFrom(1, []Revision{r(10), r(12)}), set(r(10)), set(r(10))},
	{12, gensFrom(1, []Revision{r(12)}), set(r(12)), set()},
	{13, gensFrom(2, nil), set(), set()},
	{14, gensFrom(2, []Revision{rs(14, 1), r(16)}), set(rs(14, 1)), set(rs(14, 1))},
	{15, gensFrom(2, []Revision{rs(14, 1), r(16)}), set(rs(14, 1)), set(rs(14, 1))},
	{16, gensFrom(2, []Revision{r(16)}), set(r(16)), set()},
	{17, gensFrom(3, nil), set(), set()},
}

// gensFrom returns the test key index's generations from index first on, the
// first of them with its revisions replaced by firstRevs when non-nil.
func gensFrom(first int, firstRevs []Revision) []generation {
	all := []generation{
		{created: r(2), ver: 3, revs: []Revision{r(2), r(4), r(6)}},
		{created: r(8), ver: 3, revs: []Revision{r(8), r(10), r(12)}},
		{created: r(14), ver: 3, revs: []Revision{r(14), rs(14, 1), r(16)}},
		{},
	}
	gens := all[first:]
	if firstRevs != nil {
		gens[0].revs = firstRevs
	}
	return gens
}

func TestKeyIndexCompactAndKeep(t *testing.T) {
	// Each compaction on a fresh key index.
	for _, tt := range compactTests {
		t.Run(fmt.Sprintf("fresh/%d", tt.rev), func(t *testing.T) {
			ki := newTestKeyIndex(t)
			keep := map[Revision]struct{}{}
			ki.keep(tt.rev, keep)
			if !reflect.DeepEqual(keep, tt.wkeep) {
				t.Errorf("keep = %v, want %v", keep, tt.wkeep)
			}
			if !reflect.DeepEqual(generationsOf(ki), gensFrom(0, nil)) {
				t.Errorf("keep changed the key index: %+v", generationsOf(ki))
			}
			avail := map[Revision]struct{}{}
			ki.compact(tt.rev, avail)
			if !reflect.DeepEqual(generationsOf(ki), tt.wgens) {
				t.Errorf("generations = %+v, want %+v", generationsOf(ki), tt.wgens)
			}
			if !reflect.DeepEqual(avail, tt.wkept) {
				t.Errorf("available = %v, want %v", avail, tt.wkept)
			}
			if err := ki.check(); err != nil {
				t.Error(err)
			}
		})
	}
	// Successive compactions of one key index end in the same states.
	ki := newTestKeyIndex(t)
	for _, tt := range compactTests {
		keep := map[Revision]struct{}{}
		ki.keep(tt.rev, keep)
		avail := map[Revision]struct{}{}
		ki.compact(tt.rev, avail)
		if !reflect.DeepEqual(generationsOf(ki), tt.wgens) {
			t.Errorf("incremental %d: generations = %+v, want %+v", tt.rev, generationsOf(ki), tt.wgens)
		}
		if !reflect.DeepEqual(avail, tt.wkept) || !reflect.DeepEqual(keep, tt.wkeep) {
			t.Errorf("incremental %d: available = %v keep = %v, want %v and %v", tt.rev, avail, keep, tt.wkept, tt.wkeep)
		}
	}
	if !ki.isEmpty() {
		t.Errorf("key index not empty after compacting past its last tombstone: %+v", generationsOf(ki))
	}
}

// Compacting at a revision above the key's newest live put keeps that put.
func TestKeyIndexCompactOnFurtherRev(t *testing.T) {
	ki := newKeyIndex("foo")
	ki.put(r(1))
	ki.put(r(2))
	avail := map[Revision]struct{}{}
	ki.compact(3, avail)
	want := []generation{{created: r(1), ver: 2, revs: []Revision{r(2)}}}
	if !reflect.DeepEqual(generationsOf(ki), want) || !reflect.DeepEqual(avail, set(r(2))) {
		t.Fatalf("generations %+v available %v, want %+v {2}", generationsOf(ki), avail, want)
	}
}

// Regression: a transaction that deletes a key and puts it again leaves a
// tombstone and a put with the same main revision; compacting there must
// keep the put (etcd's generation search would drop it).
func TestKeyIndexCompactDeleteAndPutInOneTxn(t *testing.T) {
	ki := newKeyIndex("foo")
	ki.put(r(2))
	mustTombstone(t, ki, rs(3, 0))
	ki.put(rs(3, 1))
	for _, c := range []int64{3, 4} {
		k := newKeyIndex("foo")
		k.put(r(2))
		mustTombstone(t, k, rs(3, 0))
		k.put(rs(3, 1))
		avail := map[Revision]struct{}{}
		k.compact(c, avail)
		if !reflect.DeepEqual(avail, set(rs(3, 1))) {
			t.Errorf("compact(%d) kept %v, want {3.1}", c, avail)
		}
		if mod, _, ver, err := k.get(c); err != nil || mod != rs(3, 1) || ver != 1 {
			t.Errorf("get(%d) after compact = %v %d %v, want 3.1 version 1", c, mod, ver, err)
		}
	}
	if !reflect.DeepEqual(generationsOf(ki)[1].revs, []Revision{rs(3, 1)}) {
		t.Fatalf("generations %+v", generationsOf(ki))
	}
}

// The compact form is 48 bytes of a slab chunk: a field added to keyIndex
// costs every key of a large store 8 bytes more.
func TestKeyIndexSize(t *testing.T) {
	if n := unsafe.Sizeof(keyIndex{}); n != 48 {
		t.Fatalf("keyIndex is %d bytes, want 48", n)
	}
}

// A key index holds no pointer, so the slab's chunks are nothing for the
// collector to scan (BenchmarkGCMark): a pointer field added to keyIndex
// would make it scan every key of a large store again.
func TestKeyIndexHasNoPointers(t *testing.T) {
	typ := reflect.TypeFor[keyIndex]()
	for i := range typ.NumField() {
		switch f := typ.Field(i); f.Type.Kind() {
		case reflect.Int64, reflect.Uint32:
		default:
			t.Errorf("keyIndex.%s is a %s; want integers only", f.Name, f.Type)
		}
	}
}

// A generation whose version or created sub revision does not fit the
// compact form's 32 bits is kept in hist, through restore, puts and
// compaction, and reads give the full values back.
func TestKeyIndexBeyondCompactForm(t *testing.T) {
	big := int64(math.MaxUint32) + 5
	for _, tc := range []struct {
		name    string
		created Revision
		ver     int64
	}{
		{"version", r(2), big},
		{"created sub", rs(2, big), 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ki := newKeyIndex("k")
			ki.restore(tc.created, rs(9, 1), tc.ver)
			if ki.hist() == nil {
				t.Fatal("restored into the compact form")
			}
			mod, created, ver, err := ki.get(9)
			if err != nil || mod != rs(9, 1) || created != tc.created || ver != tc.ver {
				t.Fatalf("get(9) = %v %v %d %v, want %v %v %d", mod, created, ver, err, rs(9, 1), tc.created, tc.ver)
			}
			ki.put(r(10))
			ki.compact(10, map[Revision]struct{}{})
			if ki.hist() == nil {
				t.Fatal("compaction deflated a generation the compact form cannot hold")
			}
			if _, created, ver, err := ki.get(10); err != nil || created != tc.created || ver != tc.ver+1 {
				t.Fatalf("get(10) after compaction = %v %d %v, want %v %d", created, ver, err, tc.created, tc.ver+1)
			}
			if err := ki.check(); err != nil {
				t.Fatal(err)
			}
		})
	}
	ki := newKeyIndex("k")
	ki.restore(r(2), r(3), math.MaxUint32)
	if ki.hist() != nil {
		t.Fatal("a version of MaxUint32 left the compact form")
	}
	if _, _, ver, _ := ki.get(3); ver != math.MaxUint32 {
		t.Fatalf("version %d, want %d", ver, int64(math.MaxUint32))
	}
}

// newKeyIndex returns the key index of key in an index of its own, outside
// the tree and the key table.
func newKeyIndex(key string) ref {
	ti := New()
	_, ki := ti.slab.alloc()
	ki.setKey(ti.keys.copy([]byte(key)))
	return ref{ki, ti}
}
