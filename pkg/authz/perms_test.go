package authz

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"go.etcd.io/etcd/api/v3/authpb"
)

// TestPermsAgainstModel checks merged span sets against a brute-force model
// over a small key alphabet: a range is allowed when every key of it that
// exists in the alphabet's universe is inside some permission, and the
// ranges' edges (which the universe cannot show) agree with the union.
func TestPermsAgainstModel(t *testing.T) {
	keys := []string{"a", "a\x00", "ab", "b", "b\x00", "ba", "c", "d"}
	rng := rand.New(rand.NewPCG(1, 2))
	randKey := func() []byte { return []byte(keys[rng.IntN(len(keys))]) }
	for round := range 2000 {
		var perms []*authpb.Permission
		for range rng.IntN(4) {
			p := &authpb.Permission{Key: randKey(), PermType: authpb.Permission_READ}
			switch rng.IntN(3) {
			case 1:
				p.RangeEnd = []byte{0}
			case 2:
				p.RangeEnd = randKey()
				if bytes.Compare(p.Key, p.RangeEnd) >= 0 {
					continue
				}
			}
			perms = append(perms, p)
		}
		u := &authpb.User{Name: []byte("u"), Roles: []string{"r"}}
		up := buildPerms(u, map[string]*authpb.Role{"r": {Name: []byte("r"), KeyPermission: perms}})
		// A single key: allowed iff some permission holds it.
		for _, k := range keys {
			want := false
			for _, p := range perms {
				if inPerm(p, []byte(k)) {
					want = true
				}
			}
			if got := up.allowed([]byte(k), nil, false); got != want {
				t.Fatalf("round %d: perms %v: key %q: allowed=%v, want %v", round, perms, k, got, want)
			}
		}
		// A range [k, e): allowed iff one contiguous run of permissions
		// covers it, which for our universe means: every key between is
		// held and the permission holding the last key reaches e.
		k, e := randKey(), randKey()
		if bytes.Compare(k, e) >= 0 {
			continue
		}
		want := coveredByModel(perms, k, e)
		if got := up.allowed(k, e, false); got != want {
			t.Fatalf("round %d: perms %s: range [%q,%q): allowed=%v, want %v", round, fmtPerms(perms), k, e, got, want)
		}
	}
}

func inPerm(p *authpb.Permission, k []byte) bool {
	switch {
	case len(p.RangeEnd) == 0:
		return bytes.Equal(p.Key, k)
	case isOpenEnded(p.RangeEnd):
		return bytes.Compare(k, p.Key) >= 0
	}
	return bytes.Compare(k, p.Key) >= 0 && bytes.Compare(k, p.RangeEnd) < 0
}

// coveredByModel walks from k: at each point take the permission holding
// it that reaches furthest; covered if the walk reaches e.
func coveredByModel(perms []*authpb.Permission, k, e []byte) bool {
	at := k
	for {
		var best []byte
		found, inf := false, false
		for _, p := range perms {
			if !inPerm(p, at) {
				continue
			}
			found = true
			end := p.RangeEnd
			switch {
			case len(end) == 0:
				end = append(bytes.Clone(p.Key), 0)
			case isOpenEnded(end):
				inf = true
			}
			if !inf && (best == nil || bytes.Compare(end, best) > 0) {
				best = end
			}
		}
		if !found {
			return false
		}
		if inf || bytes.Compare(best, e) >= 0 {
			return true
		}
		at = best
	}
}

func fmtPerms(ps []*authpb.Permission) string {
	var b bytes.Buffer
	for _, p := range ps {
		fmt.Fprintf(&b, "[%q,%q) ", p.Key, p.RangeEnd)
	}
	return b.String()
}

func TestValidPermRange(t *testing.T) {
	for _, c := range []struct {
		key, end string
		ok       bool
	}{
		{"a", "", true}, {"a", "\x00", true}, {"a", "b", true},
		{"", "", false}, {"b", "a", false}, {"a", "a", false},
	} {
		if got := validPermRange([]byte(c.key), []byte(c.end)); got != c.ok {
			t.Errorf("validPermRange(%q, %q) = %v, want %v", c.key, c.end, got, c.ok)
		}
	}
}
