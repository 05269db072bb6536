// Command go-readonly is an example kvd authorizer plugin written with
// pkg/pluginsdk (docs/plugins.md): it denies every write to a key under
// /readonly/ by anyone without the root role, and has no objection to
// anything else. kvd's roles still apply to what it allows.
//
//	go build -o bin/kvd-auth-readonly ./examples/plugins/go-readonly
package main

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/kvd-dev/kvd/pkg/pluginsdk"
)

var prefix = []byte("/readonly/")

type readonly struct{}

// Authorize denies a request if any of its writes may touch a key under
// prefix: a single key under it, or a range that overlaps it. Callers with
// kvd's root role may write there.
func (readonly) Authorize(_ context.Context, r pluginsdk.Request) error {
	if slices.Contains(r.Roles, "root") {
		return nil
	}
	for _, a := range r.Accesses {
		if a.Write && touches(a, prefix) {
			return fmt.Errorf("%s may not write %q: keys under %q are read-only", r.User, a.Key, prefix)
		}
	}
	return nil
}

// touches tells whether the key or range a overlaps the keys that start
// with p.
func touches(a pluginsdk.Access, p []byte) bool {
	switch {
	case len(a.RangeEnd) == 0: // one key
		return bytes.HasPrefix(a.Key, p)
	case bytes.Equal(a.RangeEnd, []byte{0}): // from Key to the end
		return bytes.Compare(a.Key, prefixEnd(p)) < 0
	default: // [Key, RangeEnd)
		return bytes.Compare(a.Key, prefixEnd(p)) < 0 && bytes.Compare(a.RangeEnd, p) > 0
	}
}

// prefixEnd is the first key after every key that starts with p (p does
// not end in 0xff here).
func prefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	end[len(end)-1]++
	return end
}

func main() {
	pluginsdk.Logger().Info("read-only prefix", "prefix", string(prefix))
	pluginsdk.ServeAuthorizer(readonly{})
}
