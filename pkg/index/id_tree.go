package index

import (
	"fmt"
	"slices"
)

// idTree is a B-tree of slab ids ordered by their keys: the index's key
// order, for ranges, encoding and compaction. Its items are 32-bit ids, not
// pointers, so the collector scans only the tree's child pointers, one per
// ~30 keys, where a tree of *keyIndex costs it a pointer per key
// (BenchmarkGCMark). It is searched by key, and no id stands for a key
// outside the index.
//
// Every node but the root holds minItems to maxItems ids, an inner node one
// child more than ids, and every leaf is at the same depth (CLRS's B-tree of
// minimum degree treeDegree: ids in inner nodes too).
//
// An idTree is not safe for concurrent use: the index lets readers search it
// together and one writer change it alone.
type idTree struct {
	root  *idNode
	n     int
	keyOf func(id uint32) string
}

const (
	treeDegree = 32
	maxItems   = 2*treeDegree - 1
	minItems   = treeDegree - 1
)

type idNode struct {
	ids      []uint32
	children []*idNode // none in a leaf
}

func (n *idNode) leaf() bool { return len(n.children) == 0 }

// len returns the number of ids in the tree.
func (t *idTree) len() int { return t.n }

// find returns the position in n of the first id whose key is >= key, and
// whether that key is key.
func (t *idTree) find(n *idNode, key string) (int, bool) {
	lo, hi := 0, len(n.ids)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if t.keyOf(n.ids[m]) < key {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(n.ids) && t.keyOf(n.ids[lo]) == key
}

// insert adds id, whose key must not be in the tree yet.
func (t *idTree) insert(id uint32) {
	key := t.keyOf(id)
	if t.root == nil {
		t.root = &idNode{ids: []uint32{id}}
		t.n = 1
		return
	}
	if len(t.root.ids) == maxItems {
		t.root = &idNode{children: []*idNode{t.root}}
		t.split(t.root, 0)
	}
	n := t.root
	for {
		i, found := t.find(n, key)
		if found {
			panic(fmt.Sprintf("index: tree: %q inserted twice", key))
		}
		if n.leaf() {
			n.ids = slices.Insert(n.ids, i, id)
			break
		}
		if len(n.children[i].ids) == maxItems {
			t.split(n, i)
			if t.keyOf(n.ids[i]) < key {
				i++
			}
		}
		n = n.children[i]
	}
	t.n++
}

// prepend adds id, whose key is less than every key in the tree: one
// comparison where insert makes a search per level. Decode adds the keys
// greatest first.
func (t *idTree) prepend(id uint32) {
	if t.root == nil {
		t.insert(id)
		return
	}
	if len(t.root.ids) == maxItems {
		t.root = &idNode{children: []*idNode{t.root}}
		t.split(t.root, 0)
	}
	n := t.root
	for !n.leaf() {
		if len(n.children[0].ids) == maxItems {
			t.split(n, 0)
		}
		n = n.children[0]
	}
	if key := t.keyOf(id); key >= t.keyOf(n.ids[0]) {
		panic(fmt.Sprintf("index: tree: %q prepended before %q", key, t.keyOf(n.ids[0])))
	}
	n.ids = slices.Insert(n.ids, 0, id)
	t.n++
}

// split moves the upper half of n's full child i to a new node beside it
// and its middle id up into n.
func (t *idTree) split(n *idNode, i int) {
	c := n.children[i]
	mid := c.ids[minItems]
	right := &idNode{ids: slices.Clone(c.ids[minItems+1:])}
	c.ids = c.ids[:minItems]
	if !c.leaf() {
		right.children = slices.Clone(c.children[minItems+1:])
		clear(c.children[minItems+1:])
		c.children = c.children[:minItems+1]
	}
	n.ids = slices.Insert(n.ids, i, mid)
	n.children = slices.Insert(n.children, i+1, right)
}

// delete removes the id of key; it reports whether there was one.
func (t *idTree) delete(key string) bool {
	if t.root == nil {
		return false
	}
	ok := t.remove(t.root, key)
	if len(t.root.ids) == 0 {
		if t.root.leaf() {
			t.root = nil
		} else {
			t.root = t.root.children[0]
		}
	}
	if ok {
		t.n--
	}
	return ok
}

// remove deletes key from the subtree at n, which is the root or holds more
// than minItems ids, so that taking one leaves it valid.
func (t *idTree) remove(n *idNode, key string) bool {
	for {
		i, found := t.find(n, key)
		if n.leaf() {
			if !found {
				return false
			}
			n.ids = slices.Delete(n.ids, i, i+1)
			return true
		}
		if found {
			switch {
			case len(n.children[i].ids) > minItems:
				n.ids[i] = t.removeEnd(n.children[i], true)
				return true
			case len(n.children[i+1].ids) > minItems:
				n.ids[i] = t.removeEnd(n.children[i+1], false)
				return true
			}
			// Both children are at the minimum: key goes down into their
			// merge, and is removed from there.
			t.merge(n, i)
			n = n.children[i]
			continue
		}
		if len(n.children[i].ids) == minItems {
			i = t.grow(n, i)
		}
		n = n.children[i]
	}
}

// removeEnd removes and returns the greatest (last) or least id of the
// subtree at n, which holds more than minItems ids.
func (t *idTree) removeEnd(n *idNode, last bool) uint32 {
	for !n.leaf() {
		i := 0
		if last {
			i = len(n.children) - 1
		}
		if len(n.children[i].ids) == minItems {
			i = t.grow(n, i)
		}
		n = n.children[i]
	}
	if last {
		id := n.ids[len(n.ids)-1]
		n.ids = n.ids[:len(n.ids)-1]
		return id
	}
	id := n.ids[0]
	n.ids = slices.Delete(n.ids, 0, 1)
	return id
}

// grow gives n's child i, at the minimum, one id more: borrowed through n
// from a sibling that can spare one, or by merging it with a sibling. It
// returns the position of the child that now holds child i's ids.
func (t *idTree) grow(n *idNode, i int) int {
	c := n.children[i]
	if i > 0 && len(n.children[i-1].ids) > minItems {
		l := n.children[i-1]
		c.ids = slices.Insert(c.ids, 0, n.ids[i-1])
		n.ids[i-1] = l.ids[len(l.ids)-1]
		l.ids = l.ids[:len(l.ids)-1]
		if !l.leaf() {
			last := len(l.children) - 1
			c.children = slices.Insert(c.children, 0, l.children[last])
			l.children[last] = nil
			l.children = l.children[:last]
		}
		return i
	}
	if i < len(n.ids) && len(n.children[i+1].ids) > minItems {
		r := n.children[i+1]
		c.ids = append(c.ids, n.ids[i])
		n.ids[i] = r.ids[0]
		r.ids = slices.Delete(r.ids, 0, 1)
		if !r.leaf() {
			c.children = append(c.children, r.children[0])
			r.children = slices.Delete(r.children, 0, 1)
		}
		return i
	}
	if i == len(n.ids) {
		i-- // the last child merges with its left sibling
	}
	t.merge(n, i)
	return i
}

// merge folds n's id i and child i+1 into child i.
func (t *idTree) merge(n *idNode, i int) {
	c, r := n.children[i], n.children[i+1]
	c.ids = append(append(c.ids, n.ids[i]), r.ids...)
	c.children = append(c.children, r.children...)
	n.ids = slices.Delete(n.ids, i, i+1)
	n.children = slices.Delete(n.children, i+1, i+2)
}

// ascend calls f with the ids whose keys are >= from (every id when all),
// in key order, until f returns false.
func (t *idTree) ascend(from string, all bool, f func(id uint32) bool) {
	if t.root != nil {
		t.ascendNode(t.root, from, all, f)
	}
}

func (t *idTree) ascendNode(n *idNode, from string, all bool, f func(id uint32) bool) bool {
	i := 0
	if !all {
		i, _ = t.find(n, from)
	}
	for ; i < len(n.ids); i++ {
		if !n.leaf() && !t.ascendNode(n.children[i], from, all, f) {
			return false
		}
		// Everything after ids[i], which is >= from, is too.
		all = true
		if !f(n.ids[i]) {
			return false
		}
	}
	if !n.leaf() {
		return t.ascendNode(n.children[len(n.ids)], from, all, f)
	}
	return true
}

// descend calls f with every id, greatest key first, until f returns false.
func (t *idTree) descend(f func(id uint32) bool) {
	if t.root != nil {
		t.descendNode(t.root, f)
	}
}

func (t *idTree) descendNode(n *idNode, f func(id uint32) bool) bool {
	for i := len(n.ids); i >= 0; i-- {
		if !n.leaf() && !t.descendNode(n.children[i], f) {
			return false
		}
		if i > 0 && !f(n.ids[i-1]) {
			return false
		}
	}
	return true
}

// check verifies the tree's invariants: node sizes, key order, leaves at
// one depth, the count.
func (t *idTree) check() error {
	if t.root == nil {
		if t.n != 0 {
			return fmt.Errorf("tree: empty, counting %d", t.n)
		}
		return nil
	}
	leafDepth, count := -1, 0
	var prev string
	var walk func(n *idNode, depth int) error
	walk = func(n *idNode, depth int) error {
		if n != t.root && (len(n.ids) < minItems || len(n.ids) > maxItems) {
			return fmt.Errorf("tree: a node of %d ids", len(n.ids))
		}
		if !n.leaf() && len(n.children) != len(n.ids)+1 {
			return fmt.Errorf("tree: %d ids, %d children", len(n.ids), len(n.children))
		}
		if n.leaf() {
			if leafDepth == -1 {
				leafDepth = depth
			} else if depth != leafDepth {
				return fmt.Errorf("tree: leaves at depths %d and %d", leafDepth, depth)
			}
		}
		for i := 0; i <= len(n.ids); i++ {
			if !n.leaf() {
				if err := walk(n.children[i], depth+1); err != nil {
					return err
				}
			}
			if i < len(n.ids) {
				key := t.keyOf(n.ids[i])
				if count > 0 && key <= prev {
					return fmt.Errorf("tree: %q after %q", key, prev)
				}
				prev = key
				count++
			}
		}
		return nil
	}
	if err := walk(t.root, 0); err != nil {
		return err
	}
	if count != t.n {
		return fmt.Errorf("tree: %d ids, counting %d", count, t.n)
	}
	return nil
}
