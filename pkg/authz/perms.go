package authz

import (
	"bytes"
	"sort"
	"sync"

	"go.etcd.io/etcd/api/v3/authpb"
)

// span is a key interval [begin, end). An empty end is +infinity, as etcd's
// "affine" byte intervals: a permission or request range_end of "\x00"
// (from the key on) maps to it.
type span struct{ begin, end []byte }

// affineCmp orders interval bounds with the empty bound as +infinity, as
// etcd's byte intervals do for both begin and end.
func affineCmp(a, b []byte) int {
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

// pointEnd is the end of the single-key interval [key, key+"\x00").
func pointEnd(key []byte) []byte { return append(bytes.Clone(key), 0) }

// spanSet is a user's permissions of one kind: the union of the intervals of
// all the user's roles, merged into disjoint, non-adjacent spans sorted by
// begin. A check is then one binary search.
type spanSet []span

func newSpanSet(spans []span) spanSet {
	if len(spans) == 0 {
		return nil
	}
	sort.Slice(spans, func(i, j int) bool { return bytes.Compare(spans[i].begin, spans[j].begin) < 0 })
	out := spanSet{spans[0]}
	for _, s := range spans[1:] {
		last := &out[len(out)-1]
		// Overlapping or adjacent spans merge: together they cover the
		// union, as etcd's interval tree Contains treats them.
		if affineCmp(last.end, s.begin) >= 0 {
			if affineCmp(s.end, last.end) > 0 {
				last.end = s.end
			}
			continue
		}
		out = append(out, s)
	}
	return out
}

// covers tells whether [begin, end) lies inside the union, with etcd's
// interval-tree rule: the spans that intersect the request must be
// contiguous and reach from at or before its begin to at or past its end.
// With merged spans that means one span does it.
func (ss spanSet) covers(begin, end []byte) bool {
	if len(begin) == 0 {
		// etcd's affine interval takes an empty begin as +infinity too.
		return false
	}
	// The last span starting at or before begin.
	i := sort.Search(len(ss), func(i int) bool { return bytes.Compare(ss[i].begin, begin) > 0 }) - 1
	if i < 0 {
		return false
	}
	s := ss[i]
	if affineCmp(s.end, begin) <= 0 {
		return false
	}
	return affineCmp(s.end, end) >= 0
}

// has tells whether key is inside the union.
func (ss spanSet) has(key []byte) bool {
	i := sort.Search(len(ss), func(i int) bool { return bytes.Compare(ss[i].begin, key) > 0 }) - 1
	return i >= 0 && affineCmp(ss[i].end, key) > 0
}

// userPerms are one user's merged read and write permissions.
type userPerms struct {
	root        bool
	read, write spanSet
	// etcd's trees, built on the first inverted range (see ivtree.go).
	treesOnce           sync.Once
	readTree, writeTree *ivTree
	user                *authpb.User
	roles               map[string]*authpb.Role
}

func buildPerms(u *authpb.User, roles map[string]*authpb.Role) *userPerms {
	p := &userPerms{user: u, roles: roles}
	var read, write []span
	for _, name := range u.Roles {
		if name == RootRole {
			p.root = true
		}
		r := roles[name]
		if r == nil {
			continue
		}
		for _, perm := range r.KeyPermission {
			s := permSpan(perm)
			switch perm.PermType {
			case authpb.Permission_READ:
				read = append(read, s)
			case authpb.Permission_WRITE:
				write = append(write, s)
			case authpb.Permission_READWRITE:
				read = append(read, s)
				write = append(write, s)
			}
		}
	}
	p.read, p.write = newSpanSet(read), newSpanSet(write)
	return p
}

func permSpan(p *authpb.Permission) span {
	switch {
	case len(p.RangeEnd) == 0:
		return span{p.Key, pointEnd(p.Key)}
	case isOpenEnded(p.RangeEnd):
		return span{p.Key, nil}
	}
	return span{p.Key, p.RangeEnd}
}

// allowed answers a check of [key, rangeEnd) (a single key when rangeEnd is
// empty, from key on when it is "\x00") for the permission kind.
func (p *userPerms) allowed(key, rangeEnd []byte, write bool) bool {
	set := p.read
	if write {
		set = p.write
	}
	if len(rangeEnd) == 0 {
		return set.has(key)
	}
	if inverted(key, rangeEnd) {
		p.treesOnce.Do(p.buildTrees)
		if write {
			return p.writeTree.contains(key, rangeEnd)
		}
		return p.readTree.contains(key, rangeEnd)
	}
	if isOpenEnded(rangeEnd) {
		rangeEnd = nil
	}
	return set.covers(key, rangeEnd)
}

// buildTrees inserts the permissions in etcd's order: the user's roles as
// stored (sorted), each role's permissions as stored.
func (p *userPerms) buildTrees() {
	p.readTree, p.writeTree = newIVTree(), newIVTree()
	for _, name := range p.user.Roles {
		r := p.roles[name]
		if r == nil {
			continue
		}
		for _, perm := range r.KeyPermission {
			s := permSpan(perm)
			if perm.PermType == authpb.Permission_READ || perm.PermType == authpb.Permission_READWRITE {
				p.readTree.insert(s.begin, s.end)
			}
			if perm.PermType == authpb.Permission_WRITE || perm.PermType == authpb.Permission_READWRITE {
				p.writeTree.insert(s.begin, s.end)
			}
		}
	}
}

func isOpenEnded(end []byte) bool { return len(end) == 1 && end[0] == 0 }

// validPermRange is etcd's rule for a granted range: a key, and either no
// end, an end after the key, or "\x00".
func validPermRange(key, end []byte) bool {
	if len(key) == 0 {
		return false
	}
	if len(end) == 0 || isOpenEnded(end) {
		return true
	}
	return bytes.Compare(key, end) < 0
}
