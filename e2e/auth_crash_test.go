package e2e

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// TestAuthSurvivesKill: users, roles, permissions and the enabled flag
// written just before a SIGKILL are all there after the restart, on both
// engines, and the permissions are still enforced.
func TestAuthSurvivesKill(t *testing.T) {
	for _, engine := range harness.Engines() {
		t.Run(engine, func(t *testing.T) {
			p := harness.StartKVD(t, harness.Options{Engine: engine, Args: []string{"--bcrypt-cost", "4"}})
			c := p.Client(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			must := func(_ any, err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			must(c.UserAdd(ctx, "root", "rootpw"))
			must(c.UserGrantRole(ctx, "root", "root"))
			must(c.RoleAdd(ctx, "reader"))
			must(c.RoleGrantPermission(ctx, "reader", "/app/", clientv3.GetPrefixRangeEnd("/app/"), clientv3.PermissionType(clientv3.PermRead)))
			must(c.UserAdd(ctx, "alice", "alicepw"))
			must(c.UserGrantRole(ctx, "alice", "reader"))
			must(c.Put(ctx, "/app/x", "1"))
			must(c.AuthEnable(ctx))
			p.Kill()
			p.Restart()

			cfg := harness.ClientConfig(p.Endpoint())
			login := func(user, pw string) *clientv3.Client {
				t.Helper()
				cfg.Username, cfg.Password = user, pw
				cli, err := clientv3.New(cfg)
				if err != nil {
					t.Fatalf("login %s after the kill: %v", user, err)
				}
				t.Cleanup(func() { cli.Close() })
				return cli
			}
			alice := login("alice", "alicepw")
			if r, err := alice.Get(ctx, "/app/x"); err != nil || len(r.Kvs) != 1 {
				t.Fatalf("alice reads after the kill: %v %v", r, err)
			}
			if _, err := alice.Put(ctx, "/app/x", "2"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
				t.Fatalf("alice writes after the kill: %v, want permission denied", err)
			}
			root := login("root", "rootpw")
			st, err := root.AuthStatus(ctx)
			if err != nil || !st.Enabled {
				t.Fatalf("auth status after the kill: %v %v", st, err)
			}
			if _, err := c.Get(ctx, "/app/x"); !errors.Is(err, rpctypes.ErrUserEmpty) {
				t.Fatalf("anonymous read after the kill: %v, want user name is empty", err)
			}
		})
	}
}
