package watchhub

import (
	"bytes"
	"math/rand/v2"
)

// group is a set of watchers indexed for matching an event's key: watchers
// of a single key by a map, range watchers by an interval treap. Matching a
// key costs O(log n) plus the matches.
type group struct {
	keys   map[string]keySet
	ranges *inode
	n      int
}

// keySet is the watchers of one key. Most keys have one watcher, held
// inline: a map of its own would cost an idle watcher about 130 bytes, an
// eighth of its memory. Once a second watcher comes, every watcher of the
// key is in more and one is nil.
type keySet struct {
	one  *watcher
	more map[*watcher]struct{}
}

func newGroup() *group { return &group{keys: map[string]keySet{}} }

func (g *group) len() int { return g.n }

func (g *group) add(w *watcher) {
	g.n++
	if w.end != nil {
		g.ranges = insert(g.ranges, w)
		return
	}
	// Only the first two watchers of a key store into g.keys: a store
	// copies the key into a new string.
	switch set, found := g.keys[string(w.key)]; {
	case !found:
		g.keys[string(w.key)] = keySet{one: w}
	case set.one != nil:
		g.keys[string(w.key)] = keySet{more: map[*watcher]struct{}{set.one: {}, w: {}}}
	default:
		set.more[w] = struct{}{}
	}
}

// remove reports whether w was in the group.
func (g *group) remove(w *watcher) bool {
	var ok bool
	if w.end == nil {
		set := g.keys[string(w.key)]
		switch {
		case set.one == w:
			ok = true
			delete(g.keys, string(w.key))
		case set.more != nil:
			if _, ok = set.more[w]; ok {
				delete(set.more, w)
				if len(set.more) == 0 {
					delete(g.keys, string(w.key))
				}
			}
		}
	} else {
		g.ranges, ok = remove(g.ranges, w)
	}
	if ok {
		g.n--
	}
	return ok
}

// match calls fn for every watcher whose key range holds key.
func (g *group) match(key []byte, fn func(*watcher)) {
	set := g.keys[string(key)]
	if set.one != nil {
		fn(set.one)
	}
	for w := range set.more {
		fn(w)
	}
	stab(g.ranges, key, fn)
}

// contains reports whether w's range holds key.
func (w *watcher) contains(key []byte) bool {
	if w.end == nil {
		return bytes.Equal(w.key, key)
	}
	return bytes.Compare(w.key, key) <= 0 && (len(w.end) == 0 || bytes.Compare(key, w.end) < 0)
}

// inode is a node of a treap of key ranges ordered by (start, end), heap
// ordered by prio. Watchers of the same range share a node.
//
// Invariant: maxEnd is the greatest end in the subtree, an empty maxEnd
// meaning +infinity (a from-key watcher: end is non-nil and empty).
type inode struct {
	start, end  []byte
	set         map[*watcher]struct{}
	prio        uint64
	left, right *inode
	maxEnd      []byte
}

// compareEnd orders range ends with the empty end (+infinity) last.
func compareEnd(a, b []byte) int {
	switch {
	case len(a) == 0 && len(b) == 0:
		return 0
	case len(a) == 0:
		return 1
	case len(b) == 0:
		return -1
	}
	return bytes.Compare(a, b)
}

func compareRange(start, end []byte, n *inode) int {
	if c := bytes.Compare(start, n.start); c != 0 {
		return c
	}
	return compareEnd(end, n.end)
}

func (n *inode) fix() {
	n.maxEnd = n.end
	for _, c := range []*inode{n.left, n.right} {
		if c != nil && compareEnd(c.maxEnd, n.maxEnd) > 0 {
			n.maxEnd = c.maxEnd
		}
	}
}

func rotateRight(n *inode) *inode {
	l := n.left
	n.left, l.right = l.right, n
	n.fix()
	l.fix()
	return l
}

func rotateLeft(n *inode) *inode {
	r := n.right
	n.right, r.left = r.left, n
	n.fix()
	r.fix()
	return r
}

func insert(n *inode, w *watcher) *inode {
	if n == nil {
		n = &inode{start: w.key, end: w.end, set: map[*watcher]struct{}{w: {}}, prio: rand.Uint64()}
		n.fix()
		return n
	}
	switch c := compareRange(w.key, w.end, n); {
	case c == 0:
		n.set[w] = struct{}{}
		return n
	case c < 0:
		n.left = insert(n.left, w)
		if n.left.prio > n.prio {
			return rotateRight(n)
		}
	default:
		n.right = insert(n.right, w)
		if n.right.prio > n.prio {
			return rotateLeft(n)
		}
	}
	n.fix()
	return n
}

func remove(n *inode, w *watcher) (*inode, bool) {
	if n == nil {
		return nil, false
	}
	var ok bool
	switch c := compareRange(w.key, w.end, n); {
	case c < 0:
		n.left, ok = remove(n.left, w)
	case c > 0:
		n.right, ok = remove(n.right, w)
	default:
		if _, ok = n.set[w]; !ok {
			return n, false
		}
		delete(n.set, w)
		if len(n.set) > 0 {
			return n, true
		}
		return deleteNode(n), true
	}
	n.fix()
	return n, ok
}

// deleteNode removes the root n, rotating it down to a leaf.
func deleteNode(n *inode) *inode {
	switch {
	case n.left == nil:
		return n.right
	case n.right == nil:
		return n.left
	case n.left.prio > n.right.prio:
		n = rotateRight(n)
		n.right = deleteNode(n.right)
	default:
		n = rotateLeft(n)
		n.left = deleteNode(n.left)
	}
	n.fix()
	return n
}

// stab calls fn for the watchers of every range in n's subtree holding key.
func stab(n *inode, key []byte, fn func(*watcher)) {
	for n != nil {
		// Nothing in this subtree ends after key.
		if len(n.maxEnd) != 0 && bytes.Compare(key, n.maxEnd) >= 0 {
			return
		}
		stab(n.left, key, fn)
		if bytes.Compare(n.start, key) > 0 {
			// This node and its right subtree start after key.
			return
		}
		if len(n.end) == 0 || bytes.Compare(key, n.end) < 0 {
			for w := range n.set {
				fn(w)
			}
		}
		n = n.right
	}
}
