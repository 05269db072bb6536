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
type keyIndex struct {
	key         []byte
	modified    Revision
	generations []generation
}

type generation struct {
	ver     int64
	created Revision // the put that created this generation
	revs    []Revision
}

func newKeyIndex(key []byte) *keyIndex {
	return &keyIndex{key: key, generations: []generation{{}}}
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

// put appends rev to the current generation, creating it if it is empty.
// rev must be greater than every revision already in ki.
func (ki *keyIndex) put(rev Revision) {
	if !rev.GreaterThan(ki.modified) {
		panic(fmt.Sprintf("index: put %q at %v, not after last modification %v", ki.key, rev, ki.modified))
	}
	g := &ki.generations[len(ki.generations)-1]
	if g.isEmpty() {
		g.created = rev
	}
	g.revs = append(g.revs, rev)
	g.ver++
	ki.modified = rev
}

// isLive reports whether the key's last generation is open: the key
// exists at the newest revision.
func (ki *keyIndex) isLive() bool {
	return len(ki.generations) > 0 && !ki.generations[len(ki.generations)-1].isEmpty()
}

// restoreTombstone adds the tombstone of a generation whose puts were all
// compacted away; its create revision is unknown (zero), as in etcd.
func (ki *keyIndex) restoreTombstone(rev Revision) {
	ki.restore(Revision{}, rev, 1)
	ki.generations = append(ki.generations, generation{})
}

// restore starts a generation whose earlier revisions were compacted away:
// the key was created at created and is at version ver as of modified.
func (ki *keyIndex) restore(created, modified Revision, ver int64) {
	if len(ki.generations) != 1 || !ki.generations[0].isEmpty() {
		panic(fmt.Sprintf("index: restore %q into a non-empty key index", ki.key))
	}
	ki.modified = modified
	ki.generations[0] = generation{created: created, ver: ver, revs: []Revision{modified}}
}

// tombstone ends the current generation with rev and opens an empty one. It
// returns ErrRevisionNotFound when the key is not live (nothing to delete).
func (ki *keyIndex) tombstone(rev Revision) error {
	if ki.generations[len(ki.generations)-1].isEmpty() {
		return ErrRevisionNotFound
	}
	ki.put(rev)
	ki.generations = append(ki.generations, generation{})
	return nil
}

// get returns the last revision of the key at or before atRev, the revision
// that created its generation and its version there. ErrRevisionNotFound
// means the key did not exist at atRev.
func (ki *keyIndex) get(atRev int64) (modified, created Revision, ver int64, err error) {
	g := ki.findGeneration(atRev)
	if g == nil || g.isEmpty() {
		return Revision{}, Revision{}, 0, ErrRevisionNotFound
	}
	n := g.walk(func(rev Revision) bool { return rev.Main > atRev })
	if n == -1 {
		return Revision{}, Revision{}, 0, ErrRevisionNotFound
	}
	return g.revs[n], g.created, g.ver - int64(len(g.revs)-n-1), nil
}

// findGeneration returns the generation the key was in at rev, or nil when
// the key did not exist at rev (before its first revision, or in the gap
// between a tombstone and the next put).
func (ki *keyIndex) findGeneration(rev int64) *generation {
	last := len(ki.generations) - 1
	for cg := last; cg >= 0; cg-- {
		g := &ki.generations[cg]
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
	since := Revision{Main: rev}
	gi := len(ki.generations) - 1
	for ; gi > 0; gi-- {
		g := &ki.generations[gi]
		if g.isEmpty() {
			continue
		}
		if since.GreaterThan(g.created) {
			break
		}
	}
	var revs []Revision
	var last int64
	for ; gi < len(ki.generations); gi++ {
		for _, r := range ki.generations[gi].revs {
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
	gi, ri, live := ki.locate(atRev)
	if ri == -1 {
		return
	}
	g := &ki.generations[gi]
	if live || g.revs[ri].Main == atRev {
		available[g.revs[ri]] = struct{}{}
		g.revs = g.revs[ri:]
	} else {
		gi++
	}
	if gi > 0 {
		// Copy so the dropped generations' revisions can be freed.
		ki.generations = slices.Clone(ki.generations[gi:])
	}
}

// keep adds to available the revision compact(atRev) would keep, except a
// tombstone: etcd leaves it out so that hashes agree with versions that
// deleted it.
func (ki *keyIndex) keep(atRev int64, available map[Revision]struct{}) {
	if gi, ri, live := ki.locate(atRev); live {
		available[ki.generations[gi].revs[ri]] = struct{}{}
	}
}

// locate finds the newest revision with Main <= atRev: generation gi, index
// ri in it (ri == -1: the key has no revision <= atRev). live is false when
// that revision is a tombstone, i.e. the key did not exist at atRev.
//
// etcd instead picks the first generation whose tombstone is >= atRev; the
// two agree unless one transaction deletes and re-puts a key, where etcd's
// choice would drop the put that is live at atRev (etcd-io/etcd#22376).
func (ki *keyIndex) locate(atRev int64) (gi, ri int, live bool) {
	last := len(ki.generations) - 1
	for gi = last; gi >= 0; gi-- {
		g := &ki.generations[gi]
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
	return len(ki.generations) == 1 && ki.generations[0].isEmpty()
}

// check verifies the invariants documented on keyIndex.
func (ki *keyIndex) check() error {
	if len(ki.generations) == 0 {
		return fmt.Errorf("key %q: no generations", ki.key)
	}
	var prev Revision
	first := true
	for i, g := range ki.generations {
		last := i == len(ki.generations)-1
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
	if !first && prev != ki.modified {
		return fmt.Errorf("key %q: modified %v, newest revision %v", ki.key, ki.modified, prev)
	}
	return nil
}
