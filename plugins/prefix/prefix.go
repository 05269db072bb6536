package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/kvd-dev/kvd/pkg/pluginsdk"
)

// authorizer confines each user to the keys under root + user + "/".
type authorizer struct {
	root string
}

func (a authorizer) Authorize(_ context.Context, r pluginsdk.Request) error {
	switch {
	case r.User == "root" || slices.Contains(r.Roles, "root"):
		return nil // kvd's root is exempt, as in etcd
	case r.User == "":
		return errors.New("no user: keys are confined to a per-user prefix")
	case strings.Contains(r.User, "/"):
		// root + "a/b/" would be user "a"'s sub-tree.
		return fmt.Errorf("user %q has a \"/\" in its name, which would reach into another user's prefix", r.User)
	}
	p := []byte(a.root + r.User + "/")
	end := prefixEnd(p)
	for _, acc := range r.Accesses {
		if !within(acc, p, end) {
			return fmt.Errorf("%s is outside %q, the prefix of user %q", describe(acc), p, r.User)
		}
	}
	return nil
}

// Scope is how far an allow reaches (pluginsdk.Scoper): all of the
// caller's prefix, for reads and writes (everything for root), so kvd
// caches one decision per user and method rather than one per key.
func (a authorizer) Scope(r pluginsdk.Request) []pluginsdk.Access {
	if r.User == "root" || slices.Contains(r.Roles, "root") {
		all := []byte{0}
		return []pluginsdk.Access{{Key: nil, RangeEnd: all}, {Write: true, Key: nil, RangeEnd: all}}
	}
	p := []byte(a.root + r.User + "/")
	end := prefixEnd(p)
	return []pluginsdk.Access{{Key: p, RangeEnd: end}, {Write: true, Key: p, RangeEnd: end}}
}

// within says whether the access lies in [p, end).
func within(a pluginsdk.Access, p, end []byte) bool {
	inside := bytes.Compare(a.Key, p) >= 0 && bytes.Compare(a.Key, end) < 0
	switch {
	case !inside:
		return false
	case len(a.RangeEnd) == 0:
		return true
	case bytes.Equal(a.RangeEnd, []byte{0}):
		return false // to the end of the keyspace: past every prefix
	default:
		return bytes.Compare(a.RangeEnd, end) <= 0
	}
}

// prefixEnd is the first key after every key that starts with p (etcd's
// GetPrefixRangeEnd). p always ends in "/" here, so it is never all 0xff.
func prefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return []byte{0}
}

// describe names an access for the deny reason, its bytes escaped.
func describe(a pluginsdk.Access) string {
	switch {
	case len(a.RangeEnd) == 0:
		return fmt.Sprintf("key %q", a.Key)
	case bytes.Equal(a.RangeEnd, []byte{0}):
		return fmt.Sprintf("range from key %q to the end of the keyspace", a.Key)
	default:
		return fmt.Sprintf("range [%q, %q)", a.Key, a.RangeEnd)
	}
}
