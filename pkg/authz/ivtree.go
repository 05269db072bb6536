package authz

import "bytes"

// etcd keeps a user's permissions in a red-black interval tree and asks it
// whether a request's range is covered. For a well-formed range that is
// exactly "the union of the permissions covers it", which the merged spans
// answer with one binary search. For an inverted range (range_end before
// key, an empty range) etcd's answer depends on the tree's shape: its
// search prunes subtrees by comparing with the range's end, so it finds a
// permission holding the key only on some paths. ivTree rebuilds that
// shape (same insertion order, same balancing, same subtree maxima) so kvd
// answers those requests as etcd v3.7.3 does; nothing else uses it.

type ivNode struct {
	begin, end, max     []byte
	red                 bool
	left, right, parent *ivNode
}

type ivTree struct {
	root, nil_ *ivNode
}

func newIVTree() *ivTree {
	s := &ivNode{}
	return &ivTree{root: s, nil_: s}
}

func (t *ivTree) isRed(x *ivNode) bool { return x != t.nil_ && x.red }

// insert adds [begin, end) as CLRS's RB-INSERT does, ties on begin ordered
// by end, keeping each node's max end of its subtree.
func (t *ivTree) insert(begin, end []byte) {
	z := &ivNode{begin: begin, end: end, max: end, red: true, left: t.nil_, right: t.nil_, parent: t.nil_}
	less := func(x *ivNode) bool {
		c := affineCmp(z.begin, x.begin)
		return c < 0 || (c == 0 && affineCmp(z.end, x.end) < 0)
	}
	y := t.nil_
	for x := t.root; x != t.nil_; {
		y = x
		if less(x) {
			x = x.left
		} else {
			x = x.right
		}
	}
	z.parent = y
	if y == t.nil_ {
		t.root = z
	} else {
		if less(y) {
			y.left = z
		} else {
			y.right = z
		}
		t.updateMax(y)
	}
	t.fixup(z)
}

func (t *ivTree) fixup(z *ivNode) {
	for t.isRed(z.parent) {
		gp := z.parent.parent
		if z.parent == gp.left {
			if u := gp.right; t.isRed(u) {
				u.red, z.parent.red, gp.red = false, false, true
				z = gp
				continue
			}
			if z == z.parent.right {
				z = z.parent
				t.rotateLeft(z)
			}
			z.parent.red, z.parent.parent.red = false, true
			t.rotateRight(z.parent.parent)
		} else {
			if u := gp.left; t.isRed(u) {
				u.red, z.parent.red, gp.red = false, false, true
				z = gp
				continue
			}
			if z == z.parent.left {
				z = z.parent
				t.rotateRight(z)
			}
			z.parent.red, z.parent.parent.red = false, true
			t.rotateLeft(z.parent.parent)
		}
	}
	t.root.red = false
}

// updateMax recomputes maxima from x up, stopping where one is unchanged
// (etcd's order of updates during rotations is kept below, so the maxima,
// and with them the searches, come out the same).
func (t *ivTree) updateMax(x *ivNode) {
	for ; x != t.nil_; x = x.parent {
		m := x.end
		if x.left != t.nil_ && affineCmp(x.left.max, m) > 0 {
			m = x.left.max
		}
		if x.right != t.nil_ && affineCmp(x.right.max, m) > 0 {
			m = x.right.max
		}
		if affineCmp(x.max, m) == 0 {
			return
		}
		x.max = m
	}
}

func (t *ivTree) replaceParent(x, y *ivNode) {
	y.parent = x.parent
	if x.parent == t.nil_ {
		t.root = y
	} else {
		if x == x.parent.left {
			x.parent.left = y
		} else {
			x.parent.right = y
		}
		t.updateMax(x.parent)
	}
	x.parent = y
}

func (t *ivTree) rotateLeft(x *ivNode) {
	if x.right == t.nil_ {
		return
	}
	y := x.right
	x.right = y.left
	if y.left != t.nil_ {
		y.left.parent = x
	}
	t.updateMax(x)
	t.replaceParent(x, y)
	y.left = x
	t.updateMax(y)
}

func (t *ivTree) rotateRight(x *ivNode) {
	if x.left == t.nil_ {
		return
	}
	y := x.left
	x.left = y.right
	if y.right != t.nil_ {
		y.right.parent = x
	}
	t.updateMax(x)
	t.replaceParent(x, y)
	y.right = x
	t.updateMax(y)
}

// relate places [b, e) against [nb, ne): -1 left of it, 1 right of it, 0
// overlapping, by etcd's interval comparison (which an inverted [b, e)
// also goes through).
func relate(b, e, nb, ne []byte) int {
	if affineCmp(b, nb) < 0 && affineCmp(e, nb) <= 0 {
		return -1
	}
	if affineCmp(b, ne) >= 0 {
		return 1
	}
	return 0
}

// visit calls fn, in order, on the nodes etcd's search reaches for [b, e).
func (t *ivTree) visit(x *ivNode, b, e []byte, fn func(*ivNode)) {
	if x == t.nil_ {
		return
	}
	switch relate(b, e, x.begin, x.end) {
	case -1:
		t.visit(x.left, b, e, fn)
	case 1:
		if relate(x.begin, x.max, b, e) == 0 {
			t.visit(x.left, b, e, fn)
			t.visit(x.right, b, e, fn)
		}
	default:
		t.visit(x.left, b, e, fn)
		fn(x)
		t.visit(x.right, b, e, fn)
	}
}

// contains is etcd's coverage test: the nodes reached must be contiguous
// and reach from at or before b to at or past e.
func (t *ivTree) contains(b, e []byte) bool {
	var minBegin, maxEnd []byte
	found, contiguous := false, true
	t.visit(t.root, b, e, func(n *ivNode) {
		if !contiguous {
			return
		}
		if !found {
			found, minBegin, maxEnd = true, n.begin, n.end
			return
		}
		if affineCmp(maxEnd, n.begin) < 0 {
			contiguous = false
			return
		}
		if affineCmp(n.end, maxEnd) > 0 {
			maxEnd = n.end
		}
	})
	return found && contiguous && affineCmp(maxEnd, e) >= 0 && affineCmp(minBegin, b) <= 0
}

// inverted tells whether a request range [key, end) ends before it starts.
func inverted(key, end []byte) bool {
	return len(end) > 0 && !isOpenEnded(end) && bytes.Compare(end, key) < 0
}
