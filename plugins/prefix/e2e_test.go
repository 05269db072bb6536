package main

import (
	"context"
	"strings"
	"testing"
	"time"

	pb "github.com/kvd-dev/kvd/pkg/pluginsdk/authpluginpb"
	"github.com/kvd-dev/kvd/pkg/pluginsdk/plugintest"
)

// pluginBin is the plugin built once for the package's tests.
var pluginBin string

func TestMain(m *testing.M) { plugintest.Main(m, ".", &pluginBin) }

// dispense starts the plugin binary as kvd does.
func dispense(t *testing.T, args ...string) pb.AuthorizerClient {
	t.Helper()
	return plugintest.Authorizer(t, pluginBin, args...)
}

func TestEndToEnd(t *testing.T) {
	c := dispense(t, "--root", "/t/")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := func(user string, roles []string, accesses ...*pb.KeyAccess) *pb.AuthorizeRequest {
		return &pb.AuthorizeRequest{
			Identity: &pb.Identity{User: user, Roles: roles, Authenticator: "oidc"},
			Method:   "/etcdserverpb.KV/Txn",
			Accesses: accesses,
		}
	}
	read := func(k, end string) *pb.KeyAccess {
		return &pb.KeyAccess{Access: pb.Access_ACCESS_READ, Key: []byte(k), RangeEnd: []byte(end)}
	}
	put := func(k string) *pb.KeyAccess {
		return &pb.KeyAccess{Access: pb.Access_ACCESS_WRITE, Key: []byte(k)}
	}
	for _, c2 := range []struct {
		name string
		req  *pb.AuthorizeRequest
		deny string
	}{
		{"inside", req("alice", nil, put("/t/alice/a"), read("/t/alice/", "/t/alice0")), ""},
		{"outside", req("alice", nil, put("/t/alice/a"), put("/t/bob/a")), `key "/t/bob/a" is outside "/t/alice/"`},
		{"from key", req("alice", nil, read("/t/alice/a", "\x00")), "end of the keyspace"},
		{"root role", req("admin", []string{"root"}, read("", "\x00")), ""},
		{"no user", req("", nil, put("/t/alice/a")), "no user"},
	} {
		resp, err := c.Authorize(ctx, c2.req)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case c2.deny == "" && resp.GetVerdict() != pb.Verdict_VERDICT_ALLOW:
			t.Errorf("%s: %v, want allow", c2.name, resp)
		case c2.deny != "" && (resp.GetVerdict() != pb.Verdict_VERDICT_DENY || !strings.Contains(resp.GetReason(), c2.deny)):
			t.Errorf("%s: %v, want a deny saying %q", c2.name, resp, c2.deny)
		}
	}
}
