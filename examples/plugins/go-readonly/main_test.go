package main

import (
	"context"
	"testing"
	"time"

	pb "github.com/kvd-dev/kvd/pkg/pluginsdk/authpluginpb"
	"github.com/kvd-dev/kvd/pkg/pluginsdk/plugintest"
)

var pluginBin string

func TestMain(m *testing.M) { plugintest.Main(m, ".", &pluginBin) }

// The example of docs/plugins.md, run as a process over the plugin
// protocol.
func TestReadonly(t *testing.T) {
	c := plugintest.Authorizer(t, pluginBin)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	acc := func(write bool, key, end string) *pb.KeyAccess {
		a := &pb.KeyAccess{Access: pb.Access_ACCESS_READ, Key: []byte(key)}
		if write {
			a.Access = pb.Access_ACCESS_WRITE
		}
		if end != "" {
			a.RangeEnd = []byte(end)
		}
		return a
	}
	for _, tc := range []struct {
		name  string
		roles []string
		a     *pb.KeyAccess
		want  pb.Verdict
	}{
		{"write under /readonly/", nil, acc(true, "/readonly/x", ""), pb.Verdict_VERDICT_DENY},
		{"read under /readonly/", nil, acc(false, "/readonly/x", ""), pb.Verdict_VERDICT_ALLOW},
		{"write elsewhere", nil, acc(true, "/app/x", ""), pb.Verdict_VERDICT_ALLOW},
		{"write /readonly (no slash)", nil, acc(true, "/readonly", ""), pb.Verdict_VERDICT_ALLOW},
		{"delete of a range over it", nil, acc(true, "/a", "/z"), pb.Verdict_VERDICT_DENY},
		{"delete of a range ending at it", nil, acc(true, "/a", "/readonly/"), pb.Verdict_VERDICT_ALLOW},
		{"delete of a range after it", nil, acc(true, "/readonly0", "/z"), pb.Verdict_VERDICT_ALLOW},
		{"delete from a key to the end", nil, acc(true, "/a", "\x00"), pb.Verdict_VERDICT_DENY},
		{"root writes", []string{"root"}, acc(true, "/readonly/x", ""), pb.Verdict_VERDICT_ALLOW},
	} {
		resp, err := c.Authorize(ctx, &pb.AuthorizeRequest{
			Identity: &pb.Identity{User: "eve", Roles: tc.roles},
			Method:   "/etcdserverpb.KV/Txn",
			Accesses: []*pb.KeyAccess{tc.a},
		})
		if err != nil || resp.GetVerdict() != tc.want {
			t.Errorf("%s: %v %v, want %v", tc.name, resp, err, tc.want)
		}
	}
}
