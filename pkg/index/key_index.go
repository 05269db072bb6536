package index

import (
	"fmt"
	"math"
	"slices"
)

// keyIndex holds the history of one user key as a list of generations.
//
// A generation is the life of the key from a put that (re)creates it up to
// and including the tombstone that deletes it. The last generation is the
// current one; it is empty when the key is deleted (or was never written).
//
// Example, key "foo" put at 1.0, 2.0, deleted at 3.0, put at 4.0, deleted at
// 5.0:
//
//	generations: {1.0, 2.0, 3.0(t)} {4.0, 5.0(t)} {}
//
// Invariants:
//   - len(generations) >= 1; only the last generation may be empty.
//   - every generation but the last ends with its tombstone revision.
//   - revisions increase strictly across the whole list, and modified is the
//     greatest of them (the zero Revision when none was ever added).
//   - in a non-empty generation, ver counts the puts and the tombstone added
//     to it since created, including any that compaction removed, so the
//     version of revs[i] is ver - (len(revs) - 1 - i).
//
// Most keys of a large store are in one generation with one revision: put
// once, or compacted down to their newest put. Such a key is kept in the
// compact form, without a history (histID 0): its one revision as the
// modified revision, its generation's created revision and version beside
// it, nothing besides the key index and its key (48 bytes and the key's,
// where a history takes two more objects and ~100 bytes). The compact form
// with a zero modified revision is the key with no revisions at all. Any
// other history lives in a history; compaction brings a key back to the
// compact form when it leaves one revision.
//
// The fields are packed into 48 bytes, without a pointer: the key is a
// place in the index's key arena (a chunk number, an offset and a 32-bit
// length) and the history an id among the index's histories (0: the
// compact form), so the slab chunks holding key indexes are nothing for the
// garbage collector to scan. Sub revisions and the compact version take 32
// bits. A sub revision numbers the writes of one transaction, which a
// request of at most 2 GiB cannot take past 32 bits; a generation whose
// version or created sub revision does not fit stays in a history.
//
// Reading or changing a key index takes its index too, which holds its key
// and history: the methods are on ref.
type keyIndex struct {
	keyChunk, keyOff uint32
	// lastMain and lastSub are the newest revision: the key's modified
	// revision.
	lastMain int64
	// createdMain, createdSub and ver are the compact form's generation's
	// (unused with a history).
	createdMain int64
	keyLen      uint32
	lastSub     uint32
	createdSub  uint32
	ver         uint32
	histID      uint32
}

// ref is a key index with the index holding its key and its history.
type ref struct {
	*keyIndex
	ix *Index
}

// key returns the key without copying it.
func (ki ref) key() string { return ki.ix.keyOf(ki.keyIndex) }

// hist returns the key's history, nil in the compact form.
func (ki ref) hist() *history {
	if ki.histID == 0 {
		return nil
	}
	return ki.ix.hists.list[ki.histID]
}

// setHist gives the key history h, or the compact form when h is nil.
func (ki ref) setHist(h *history) {
	switch {
	case h == nil && ki.histID != 0:
		ki.ix.hists.release(ki.histID)
		ki.histID = 0
	case h != nil && ki.histID == 0:
		ki.histID = ki.ix.hists.add(h)
	case h != nil:
		ki.ix.hists.list[ki.histID] = h
	}
}

// history is the full list of generations of a key not in the compact form.
type history struct {
	generations []generation
	// first backs generations until a third generation is needed: leaving
	// the compact form costs one allocation for the list, one for revs.
	first [2]generation
}

type generation struct {
	ver     int64
	created Revision // the put that created this generation
	revs    []Revision
}

// setKey sets a new key index's key, which the arena holds at at.
func (ki *keyIndex) setKey(at keyPlace) {
	ki.keyChunk, ki.keyOff, ki.keyLen = at.chunk, at.off, at.n
}

// fitsCompact reports whether a generation created at created and at
// version ver can be held in the compact form's 32-bit fields.
func fitsCompact(created Revision, ver int64) bool {
	return created.Sub >= 0 && created.Sub <= MaxSub && ver >= 0 && ver <= math.MaxUint32
}

// setModified records rev as the key's newest revision.
func (ki ref) setModified(rev Revision) {
	if rev.Sub < 0 || rev.Sub > MaxSub {
		panic(fmt.Sprintf("index: %q at %v: sub revision out of 32 bits", ki.key(), rev))
	}
	ki.lastMain, ki.lastSub = rev.Main, uint32(rev.Sub)
}

// setCompact sets the compact form's generation; fitsCompact must hold.
func (ki *keyIndex) setCompact(created Revision, ver int64) {
	ki.createdMain, ki.createdSub, ki.ver = created.Main, uint32(created.Sub), uint32(ver)
}

func (g *generation) isEmpty() bool { return len(g.revs) == 0 }

// walk visits g.revs from the newest to the oldest until f returns false and
// returns the index where it stopped, or -1 if f never returned false.
func (g *generation) walk(f func(rev Revision) bool) int {
	for i := len(g.revs) - 1; i >= 0; i-- {
		if !f(g.revs[i]) {
			return i
		}
	}
	return -1
}

// modified returns the key's newest revision (zero: none was ever added).
func (ki *keyIndex) modified() Revision {
	return Revision{Main: ki.lastMain, Sub: int64(ki.lastSub)}
}

// compactCreated returns the compact form's generation's created revision.
func (ki *keyIndex) compactCreated() Revision {
	return Revision{Main: ki.createdMain, Sub: int64(ki.createdSub)}
}

// hasRevisions reports whether a compact key index holds its one revision.
func (ki *keyIndex) hasRevisions() bool { return ki.lastMain != 0 || ki.lastSub != 0 }

// compactView returns the compact form's generation for reading, its one
// revision in vr: the zero generation when the key has no revisions (or is
// in hist). With generationsOr it gives a read the key's generations in
// either form without allocating: the caller keeps both in its own frame,
// as a view stored through a pointer would move to the heap.
func (ki ref) compactView(vr *[1]Revision) generation {
	if ki.histID != 0 || !ki.hasRevisions() {
		return generation{}
	}
	vr[0] = ki.modified()
	return generation{ver: int64(ki.ver), created: ki.compactCreated(), revs: vr[:]}
}

// generationsOr returns hist's generations, or view (compactView's
// generation) in the compact form. The result must not be modified.
func (ki ref) generationsOr(view []generation) []generation {
	if h := ki.hist(); h != nil {
		return h.generations
	}
	return view
}

// inflate moves a compact key index into hist, before a change the compact
// form cannot hold. Room for a second revision and a second generation is
// made up front: the next change is a put or a tombstone.
func (ki ref) inflate() {
	h := &history{}
	h.generations = h.first[:1]
	if ki.hasRevisions() {
		h.first[0] = generation{ver: int64(ki.ver), created: ki.compactCreated(), revs: append(make([]Revision, 0, 2), ki.modified())}
	}
	ki.setHist(h)
	ki.setCompact(Revision{}, 0)
}

// deflate returns a key index whose history is down to one live generation
// with one revision to the compact form, when that generation fits it.
func (ki ref) deflate() {
	if ki.histID == 0 {
		return
	}
	gens := ki.hist().generations
	if len(gens) != 1 || len(gens[0].revs) != 1 {
		return
	}
	g := gens[0]
	if !fitsCompact(g.created, g.ver) {
		return
	}
	ki.setCompact(g.created, g.ver)
	ki.setHist(nil)
}

// current returns the current generation's created revision and version
// (zero when the key is not live).
func (ki ref) current() (created Revision, ver int64) {
	if ki.histID == 0 {
		return ki.compactCreated(), int64(ki.ver)
	}
	gens := ki.hist().generations
	g := &gens[len(gens)-1]
	return g.created, g.ver
}

// put appends rev to the current generation, creating it if it is empty.
// rev must be greater than every revision already in ki.
func (ki ref) put(rev Revision) {
	if !rev.GreaterThan(ki.modified()) {
		panic(fmt.Sprintf("index: put %q at %v, not after last modification %v", ki.key(), rev, ki.modified()))
	}
	if ki.histID == 0 {
		if !ki.hasRevisions() {
			ki.setModified(rev)
			ki.setCompact(rev, 1)
			return
		}
		ki.inflate()
	}
	gens := ki.hist().generations
	g := &gens[len(gens)-1]
	if g.isEmpty() {
		g.created = rev
	}
	g.revs = append(g.revs, rev)
	g.ver++
	ki.setModified(rev)
}

// isLive reports whether the key's last generation is open: the key
// exists at the newest revision.
func (ki ref) isLive() bool {
	if ki.histID == 0 {
		return ki.hasRevisions()
	}
	gens := ki.hist().generations
	return !gens[len(gens)-1].isEmpty()
}

// restoreTombstone adds the tombstone of a generation whose puts were all
// compacted away; its create revision is unknown (zero), as in etcd.
func (ki ref) restoreTombstone(rev Revision) {
	ki.restore(Revision{}, rev, 1)
	ki.inflate()
	h := ki.hist()
	h.generations = append(h.generations, generation{})
}

// restore starts a generation whose earlier revisions were compacted away:
// the key was created at created and is at version ver as of modified.
func (ki ref) restore(created, modified Revision, ver int64) {
	if !ki.isEmpty() {
		panic(fmt.Sprintf("index: restore %q into a non-empty key index", ki.key()))
	}
	ki.setModified(modified)
	if fitsCompact(created, ver) {
		ki.setHist(nil)
		ki.setCompact(created, ver)
		return
	}
	h := &history{}
	h.first[0] = generation{ver: ver, created: created, revs: []Revision{modified}}
	h.generations = h.first[:1]
	ki.setHist(h)
}

// tombstone ends the current generation with rev and opens an empty one. It
// returns ErrRevisionNotFound when the key is not live (nothing to delete).
func (ki ref) tombstone(rev Revision) error {
	if !ki.isLive() {
		return ErrRevisionNotFound
	}
	if ki.histID == 0 {
		ki.inflate()
	}
	ki.put(rev)
	h := ki.hist()
	h.generations = append(h.generations, generation{})
	return nil
}

// get returns the last revision of the key at or before atRev, the revision
// that created its generation and its version there. ErrRevisionNotFound
// means the key did not exist at atRev.
func (ki ref) get(atRev int64) (modified, created Revision, ver int64, err error) {
	var vr [1]Revision
	view := [1]generation{ki.compactView(&vr)}
	g := findGeneration(ki.generationsOr(view[:]), atRev)
	if g == nil || g.isEmpty() {
		return Revision{}, Revision{}, 0, ErrRevisionNotFound
	}
	n := g.walk(func(rev Revision) bool { return rev.Main > atRev })
	if n == -1 {
		return Revision{}, Revision{}, 0, ErrRevisionNotFound
	}
	return g.revs[n], g.created, g.ver - int64(len(g.revs)-n-1), nil
}

// findGeneration returns the generation of gens the key was in at rev, or
// nil when the key did not exist at rev (before its first revision, or in
// the gap between a tombstone and the next put).
func findGeneration(gens []generation, rev int64) *generation {
	last := len(gens) - 1
	for cg := last; cg >= 0; cg-- {
		g := &gens[cg]
		if g.isEmpty() {
			continue
		}
		if cg != last {
			if tomb := g.revs[len(g.revs)-1].Main; tomb <= rev {
				return nil
			}
		}
		if g.revs[0].Main <= rev {
			return g
		}
	}
	return nil
}

// since returns the revisions with Main >= rev in ascending order. When
// several share a main revision only the greatest sub revision is returned:
// the earlier ones are invisible outside their transaction.
func (ki ref) since(rev int64) []Revision {
	var vr [1]Revision
	view := [1]generation{ki.compactView(&vr)}
	gens := ki.generationsOr(view[:])
	since := Revision{Main: rev}
	gi := len(gens) - 1
	for ; gi > 0; gi-- {
		g := &gens[gi]
		if g.isEmpty() {
			continue
		}
		if since.GreaterThan(g.created) {
			break
		}
	}
	var revs []Revision
	var last int64
	for ; gi < len(gens); gi++ {
		for _, r := range gens[gi].revs {
			if since.GreaterThan(r) {
				continue
			}
			if r.Main == last && len(revs) > 0 {
				revs[len(revs)-1] = r
				continue
			}
			revs = append(revs, r)
			last = r.Main
		}
	}
	return revs
}

// compact removes the history no read at atRev or later needs: every
// revision with Main <= atRev except the newest one, and every generation
// that ended before atRev. The newest revision <= atRev survives when the key
// is live at atRev, or when it is a tombstone exactly at atRev (etcd >= 3.5.16
// keeps it so that a watch from atRev still gets the delete); it is added to
// available. Afterwards get and since answer as before for every rev >= atRev.
func (ki ref) compact(atRev int64, available map[Revision]struct{}) {
	if ki.histID == 0 {
		// One live revision (or none): it is kept if it is <= atRev.
		if r := ki.modified(); ki.hasRevisions() && r.Main <= atRev {
			available[r] = struct{}{}
		}
		return
	}
	gens := ki.hist().generations
	gi, ri, live := locate(gens, atRev)
	if ri == -1 {
		return
	}
	g := &gens[gi]
	if live || g.revs[ri].Main == atRev {
		available[g.revs[ri]] = struct{}{}
		g.revs = g.revs[ri:]
	} else {
		gi++
	}
	if gi > 0 {
		// Copy so the dropped generations' revisions can be freed.
		ki.hist().generations = slices.Clone(gens[gi:])
	}
	ki.deflate()
}

// keep adds to available the revision compact(atRev) would keep, except a
// tombstone: etcd leaves it out so that hashes agree with versions that
// deleted it.
func (ki ref) keep(atRev int64, available map[Revision]struct{}) {
	var vr [1]Revision
	view := [1]generation{ki.compactView(&vr)}
	gens := ki.generationsOr(view[:])
	if gi, ri, live := locate(gens, atRev); live {
		available[gens[gi].revs[ri]] = struct{}{}
	}
}

// locate finds in gens the newest revision with Main <= atRev: generation
// gi, index ri in it (ri == -1: the key has no revision <= atRev). live is
// false when that revision is a tombstone, i.e. the key did not exist at
// atRev.
//
// etcd instead picks the first generation whose tombstone is >= atRev; the
// two agree unless one transaction deletes and re-puts a key, where etcd's
// choice would drop the put that is live at atRev (etcd-io/etcd#22376).
func locate(gens []generation, atRev int64) (gi, ri int, live bool) {
	last := len(gens) - 1
	for gi = last; gi >= 0; gi-- {
		g := &gens[gi]
		if g.isEmpty() || g.revs[0].Main > atRev {
			continue
		}
		ri = g.walk(func(rev Revision) bool { return rev.Main > atRev })
		return gi, ri, gi == last || ri != len(g.revs)-1
	}
	return 0, -1, false
}

// isEmpty reports whether the key has no revisions left at all; such a key
// index is removed from the tree.
func (ki ref) isEmpty() bool {
	if ki.histID == 0 {
		return !ki.hasRevisions()
	}
	gens := ki.hist().generations
	return len(gens) == 1 && gens[0].isEmpty()
}

// check verifies the invariants documented on keyIndex.
func (ki ref) check() error {
	if ki.histID != 0 && len(ki.hist().generations) == 0 {
		return fmt.Errorf("key %q: no generations", ki.key())
	}
	var vr [1]Revision
	view := [1]generation{ki.compactView(&vr)}
	gens := ki.generationsOr(view[:])
	var prev Revision
	first := true
	for i, g := range gens {
		last := i == len(gens)-1
		if g.isEmpty() {
			if !last {
				return fmt.Errorf("key %q: empty generation %d is not the last", ki.key(), i)
			}
			continue
		}
		// The empty key holds only etcdutl's revision placeholders (see
		// mvcc.CheckKV): records without a version.
		if g.ver < int64(len(g.revs)) && len(ki.key()) > 0 {
			return fmt.Errorf("key %q: generation %d has version %d < %d revisions", ki.key(), i, g.ver, len(g.revs))
		}
		unknown := g.created == Revision{}
		if g.created.Main > g.revs[0].Main || (!unknown && g.ver == int64(len(g.revs)) && g.created.Main != g.revs[0].Main) {
			return fmt.Errorf("key %q: generation %d created at %v, first revision %v, version %d", ki.key(), i, g.created, g.revs[0], g.ver)
		}
		for _, r := range g.revs {
			if !first && !r.GreaterThan(prev) {
				return fmt.Errorf("key %q: revision %v not after %v", ki.key(), r, prev)
			}
			prev, first = r, false
		}
	}
	if !first && prev != ki.modified() {
		return fmt.Errorf("key %q: modified %v, newest revision %v", ki.key(), ki.modified(), prev)
	}
	return nil
}
