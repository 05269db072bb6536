package index

import (
	"fmt"
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
// compact form, hist == nil: its one revision in last, its generation's
// created and ver beside it, no other allocation than the key index and its
// key (two heap objects, 80 bytes for a 16-byte key, instead of four and 144:
// less memory, less for the collector to mark, a faster index rebuild). The
// compact form with a zero last is the key with no revisions at all. Any
// other history lives in hist; compaction brings a key back to the compact
// form when it leaves one revision.
type keyIndex struct {
	key string // a string, not a slice: 8 bytes less, a 64-byte key index
	// last holds the newest revision: the key's modified revision. An
	// array so that the compact form can lend it as its generation's revs.
	last [1]Revision
	// created and ver are the compact form's generation's (unused in hist).
	created Revision
	ver     int64
	hist    *history
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

func newKeyIndex(key string) *keyIndex {
	return &keyIndex{key: key}
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
func (ki *keyIndex) modified() Revision { return ki.last[0] }

// generations returns the key's generations for reading: hist's, or, in the
// compact form, a one-generation view built in buf (the caller's, so that a
// read allocates nothing). The result must not be modified.
func (ki *keyIndex) generations(buf *[1]generation) []generation {
	if ki.hist != nil {
		return ki.hist.generations
	}
	buf[0] = generation{}
	if ki.last[0] != (Revision{}) {
		buf[0] = generation{ver: ki.ver, created: ki.created, revs: ki.last[:]}
	}
	return buf[:]
}

// inflate moves a compact key index into hist, before a change the compact
// form cannot hold. Room for a second revision and a second generation is
// made up front: the next change is a put or a tombstone.
func (ki *keyIndex) inflate() {
	h := &history{}
	h.generations = h.first[:1]
	if ki.last[0] != (Revision{}) {
		h.first[0] = generation{ver: ki.ver, created: ki.created, revs: append(make([]Revision, 0, 2), ki.last[0])}
	}
	ki.hist = h
	ki.created, ki.ver = Revision{}, 0
}

// deflate returns a key index whose history is down to one live generation
// with one revision to the compact form.
func (ki *keyIndex) deflate() {
	if ki.hist == nil || len(ki.hist.generations) != 1 || len(ki.hist.generations[0].revs) != 1 {
		return
	}
	g := ki.hist.generations[0]
	ki.created, ki.ver, ki.hist = g.created, g.ver, nil
}

// current returns the current generation's created revision and version
// (zero when the key is not live).
func (ki *keyIndex) current() (created Revision, ver int64) {
	if ki.hist == nil {
		return ki.created, ki.ver
	}
	g := &ki.hist.generations[len(ki.hist.generations)-1]
	return g.created, g.ver
}

// put appends rev to the current generation, creating it if it is empty.
// rev must be greater than every revision already in ki.
func (ki *keyIndex) put(rev Revision) {
	if !rev.GreaterThan(ki.modified()) {
		panic(fmt.Sprintf("index: put %q at %v, not after last modification %v", ki.key, rev, ki.modified()))
	}
	if ki.hist == nil {
		if ki.last[0] == (Revision{}) {
			ki.last[0], ki.created, ki.ver = rev, rev, 1
			return
		}
		ki.inflate()
	}
	gens := ki.hist.generations
	g := &gens[len(gens)-1]
	if g.isEmpty() {
		g.created = rev
	}
	g.revs = append(g.revs, rev)
	g.ver++
	ki.last[0] = rev
}

// isLive reports whether the key's last generation is open: the key
// exists at the newest revision.
func (ki *keyIndex) isLive() bool {
	if ki.hist == nil {
		return ki.last[0] != (Revision{})
	}
	gens := ki.hist.generations
	return !gens[len(gens)-1].isEmpty()
}

// restoreTombstone adds the tombstone of a generation whose puts were all
// compacted away; its create revision is unknown (zero), as in etcd.
func (ki *keyIndex) restoreTombstone(rev Revision) {
	ki.restore(Revision{}, rev, 1)
	ki.inflate()
	ki.hist.generations = append(ki.hist.generations, generation{})
}

// restore starts a generation whose earlier revisions were compacted away:
// the key was created at created and is at version ver as of modified.
func (ki *keyIndex) restore(created, modified Revision, ver int64) {
	if !ki.isEmpty() {
		panic(fmt.Sprintf("index: restore %q into a non-empty key index", ki.key))
	}
	ki.hist = nil
	ki.last[0], ki.created, ki.ver = modified, created, ver
}

// tombstone ends the current generation with rev and opens an empty one. It
// returns ErrRevisionNotFound when the key is not live (nothing to delete).
func (ki *keyIndex) tombstone(rev Revision) error {
	if !ki.isLive() {
		return ErrRevisionNotFound
	}
	if ki.hist == nil {
		ki.inflate()
	}
	ki.put(rev)
	ki.hist.generations = append(ki.hist.generations, generation{})
	return nil
}

// get returns the last revision of the key at or before atRev, the revision
// that created its generation and its version there. ErrRevisionNotFound
// means the key did not exist at atRev.
func (ki *keyIndex) get(atRev int64) (modified, created Revision, ver int64, err error) {
	var buf [1]generation
	g := findGeneration(ki.generations(&buf), atRev)
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
func (ki *keyIndex) since(rev int64) []Revision {
	var buf [1]generation
	gens := ki.generations(&buf)
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
func (ki *keyIndex) compact(atRev int64, available map[Revision]struct{}) {
	if ki.hist == nil {
		// One live revision (or none): it is kept if it is <= atRev.
		if r := ki.last[0]; r != (Revision{}) && r.Main <= atRev {
			available[r] = struct{}{}
		}
		return
	}
	gens := ki.hist.generations
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
		ki.hist.generations = slices.Clone(gens[gi:])
	}
	ki.deflate()
}

// keep adds to available the revision compact(atRev) would keep, except a
// tombstone: etcd leaves it out so that hashes agree with versions that
// deleted it.
func (ki *keyIndex) keep(atRev int64, available map[Revision]struct{}) {
	var buf [1]generation
	gens := ki.generations(&buf)
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
func (ki *keyIndex) isEmpty() bool {
	if ki.hist == nil {
		return ki.last[0] == (Revision{})
	}
	return len(ki.hist.generations) == 1 && ki.hist.generations[0].isEmpty()
}

// check verifies the invariants documented on keyIndex.
func (ki *keyIndex) check() error {
	if ki.hist != nil && len(ki.hist.generations) == 0 {
		return fmt.Errorf("key %q: no generations", ki.key)
	}
	var buf [1]generation
	gens := ki.generations(&buf)
	var prev Revision
	first := true
	for i, g := range gens {
		last := i == len(gens)-1
		if g.isEmpty() {
			if !last {
				return fmt.Errorf("key %q: empty generation %d is not the last", ki.key, i)
			}
			continue
		}
		// The empty key holds only etcdutl's revision placeholders (see
		// mvcc.CheckKV): records without a version.
		if g.ver < int64(len(g.revs)) && len(ki.key) > 0 {
			return fmt.Errorf("key %q: generation %d has version %d < %d revisions", ki.key, i, g.ver, len(g.revs))
		}
		unknown := g.created == Revision{}
		if g.created.Main > g.revs[0].Main || (!unknown && g.ver == int64(len(g.revs)) && g.created.Main != g.revs[0].Main) {
			return fmt.Errorf("key %q: generation %d created at %v, first revision %v, version %d", ki.key, i, g.created, g.revs[0], g.ver)
		}
		for _, r := range g.revs {
			if !first && !r.GreaterThan(prev) {
				return fmt.Errorf("key %q: revision %v not after %v", ki.key, r, prev)
			}
			prev, first = r, false
		}
	}
	if !first && prev != ki.modified() {
		return fmt.Errorf("key %q: modified %v, newest revision %v", ki.key, ki.modified(), prev)
	}
	return nil
}
