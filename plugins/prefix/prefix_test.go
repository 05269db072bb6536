package main

import (
	"context"
	"strings"
	"testing"

	"github.com/kvd-dev/kvd/pkg/pluginsdk"
)

func TestPrefixEnd(t *testing.T) {
	for p, want := range map[string]string{
		"/tenants/alice/": "/tenants/alice0",
		"a\xff":           "b",
		"\xff\xff":        "\x00",
	} {
		if got := string(prefixEnd([]byte(p))); got != want {
			t.Errorf("prefixEnd(%q) = %q, want %q", p, got, want)
		}
	}
}

func key(k string) pluginsdk.Access { return pluginsdk.Access{Key: []byte(k)} }
func rng(k, end string) pluginsdk.Access {
	return pluginsdk.Access{Key: []byte(k), RangeEnd: []byte(end)}
}
func write(a pluginsdk.Access) pluginsdk.Access { a.Write = true; return a }

func TestAuthorize(t *testing.T) {
	a := authorizer{root: "/tenants/"}
	for _, c := range []struct {
		name     string
		user     string
		roles    []string
		accesses []pluginsdk.Access
		deny     string // a part of the reason; "" for allow
	}{
		{"key inside", "alice", nil, []pluginsdk.Access{key("/tenants/alice/x"), write(key("/tenants/alice/y/z"))}, ""},
		{"prefix itself", "alice", nil, []pluginsdk.Access{key("/tenants/alice/")}, ""},
		{"whole prefix range", "alice", nil, []pluginsdk.Access{rng("/tenants/alice/", "/tenants/alice0")}, ""},
		{"range inside", "alice", nil, []pluginsdk.Access{rng("/tenants/alice/a", "/tenants/alice/b")}, ""},
		{"no accesses", "alice", nil, nil, ""},
		{"key outside", "alice", nil, []pluginsdk.Access{key("/tenants/alice/ok"), write(key("/tenants/bob/x"))}, `key "/tenants/bob/x" is outside "/tenants/alice/"`},
		{"tenant name prefix", "alice", nil, []pluginsdk.Access{key("/tenants/alicex/k")}, "outside"},
		{"no slash", "alice", nil, []pluginsdk.Access{key("/tenants/alice")}, "outside"},
		{"range past the prefix end", "alice", nil, []pluginsdk.Access{rng("/tenants/alice/a", "/tenants/alice1")}, `range ["/tenants/alice/a", "/tenants/alice1")`},
		{"range starting before", "alice", nil, []pluginsdk.Access{rng("/tenants/", "/tenants/alice/z")}, "outside"},
		{"range into another tenant", "alice", nil, []pluginsdk.Access{rng("/tenants/alice/", "/tenants/bob/")}, "outside"},
		{"from key to the end", "alice", nil, []pluginsdk.Access{rng("/tenants/alice/a", "\x00")}, "to the end of the keyspace"},
		{"whole keyspace", "alice", nil, []pluginsdk.Access{rng("", "\x00")}, "outside"},
		{"backwards range from another tenant", "alice", nil, []pluginsdk.Access{rng("/tenants/bob/", "/tenants/alice/z")}, "outside"},
		{"escaped bytes", "alice", nil, []pluginsdk.Access{key("\x01bin\xff")}, `key "\x01bin\xff"`},
		{"root user", "root", nil, []pluginsdk.Access{rng("", "\x00")}, ""},
		{"root role", "ops", []string{"viewer", "root"}, []pluginsdk.Access{write(key("/anything"))}, ""},
		{"other role", "ops", []string{"viewer"}, []pluginsdk.Access{key("/anything")}, "outside"},
		{"no user", "", nil, []pluginsdk.Access{key("/tenants//x")}, "no user"},
		{"user with slash", "alice/x", nil, []pluginsdk.Access{key("/tenants/alice/x/k")}, `"/"`},
		{"user with slash, no accesses", "bob/..", nil, nil, `"/"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := a.Authorize(context.Background(), pluginsdk.Request{User: c.user, Roles: c.roles, Method: "/etcdserverpb.KV/Range", Accesses: c.accesses})
			switch {
			case c.deny == "" && err != nil:
				t.Errorf("denied: %v", err)
			case c.deny != "" && err == nil:
				t.Errorf("allowed, want a deny saying %q", c.deny)
			case c.deny != "" && !strings.Contains(err.Error(), c.deny):
				t.Errorf("reason %q, want it to say %q", err, c.deny)
			}
		})
	}
}

func TestOtherRoot(t *testing.T) {
	a := authorizer{root: "t:"}
	if err := a.Authorize(context.Background(), pluginsdk.Request{User: "u", Accesses: []pluginsdk.Access{key("t:u/k")}}); err != nil {
		t.Error(err)
	}
	if err := a.Authorize(context.Background(), pluginsdk.Request{User: "u", Accesses: []pluginsdk.Access{key("/tenants/u/k")}}); err == nil {
		t.Error("a key under the default root allowed with --root t:")
	}
}
