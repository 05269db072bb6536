package e2e

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// TestPluginsCacheInvalidation: an htpasswd user (group app) reads /app/
// through an authorizer whose allows are cached for a minute. Before auth
// is enabled no plugin is asked anything; repeated reads are answered
// from the cache (the plugin sees no new call, cache hits are counted); a
// permission revoked from role app denies the very next read, well within
// the cache's minute; granted back, the read is allowed again and the
// plugin is asked anew, its cached allows having been dropped.
func TestPluginsCacheInvalidation(t *testing.T) {
	plSkipUnlessKVD(t)
	dir := t.TempDir()
	users, groups, calls := filepath.Join(dir, "htpasswd"), filepath.Join(dir, "groups"), filepath.Join(dir, "authz-calls")
	plWriteFile(t, users, plHtpasswdLine(t, "alice", "alice-pw"))
	plWriteFile(t, groups, "app: alice\n")
	cfg := harness.WritePluginConfig(t,
		harness.PluginSpec{
			Name: "corp-htpasswd", Kind: "authenticator", Command: harness.PluginBinary(t, "htpasswd"),
			Args: []string{"--file", users, "--groups", groups}, Timeout: 2 * time.Second, CacheTTL: plDuration(time.Minute),
		},
		harness.PluginSpec{
			Name: "authz", Kind: "authorizer", Command: harness.PluginBinary(t, "testplugin"),
			Args:     []string{"--kind", "authorizer", "--deny", "/app/denied/", "--count-file", calls},
			CacheTTL: plDuration(time.Minute),
		},
	)
	p := harness.StartKVD(t, harness.Options{Engine: "bolt", Args: plArgs(cfg)})
	ep := p.Endpoint()
	admin := p.Client(t)
	ctx := testCtx(t)

	// Auth off: the authorizer's deny does not apply and it is not asked.
	if _, err := admin.Put(ctx, "/app/denied/x", "1"); err != nil {
		t.Errorf("put /app/denied/x with auth off: %v", err)
	}
	if _, err := admin.Get(ctx, "/app/denied/x"); err != nil {
		t.Errorf("get /app/denied/x with auth off: %v", err)
	}
	if n := plCountLines(calls); n != 0 {
		t.Errorf("authorizer called %d times with auth off, want 0", n)
	}

	plEnableAuth(t, admin, func(ctx context.Context) error {
		if _, err := admin.Put(ctx, "/app/x", "1"); err != nil {
			return err
		}
		return plAddRole(ctx, admin, "app", "/app/", clientv3.PermissionType(clientv3.PermRead))
	})
	root := plMustUserClient(t, "root", plRootPW, ep)
	alice := plMustUserClient(t, "alice", "alice-pw", ep)
	read := func() error { _, err := alice.Get(ctx, "/app/x"); return err }

	mustOK(t, "alice get /app/x", read())
	asked := plCountLines(calls)
	if asked == 0 {
		t.Fatalf("the authorizer was not asked about alice's read")
	}
	for range 5 {
		mustOK(t, "alice get /app/x again", read())
	}
	if n := plCountLines(calls); n != asked {
		t.Errorf("authorizer calls after 5 repeated reads: %d, want %d (cached for a minute)", n, asked)
	}
	if n := plMetric(t, ep, "kvd_auth_plugin_cache_hits_total", "plugin", "authz"); n < 5 {
		t.Errorf("kvd_auth_plugin_cache_hits_total{plugin=authz}: %v, want at least 5", n)
	}
	_, err := alice.Get(ctx, "/app/denied/x")
	wantErr(t, "alice get /app/denied/x", err, rpctypes.ErrPermissionDenied)
	_, err = alice.Put(ctx, "/app/x", "2")
	wantErr(t, "alice put /app/x (role app reads only)", err, rpctypes.ErrPermissionDenied)

	_, err = root.RoleRevokePermission(ctx, "app", "/app/", clientv3.GetPrefixRangeEnd("/app/"))
	mustOK(t, "revoke app's /app/", err)
	wantErr(t, "alice get /app/x right after the revoke", read(), rpctypes.ErrPermissionDenied)
	wantErr(t, "alice get /app/x after the revoke, again", read(), rpctypes.ErrPermissionDenied)

	before := plCountLines(calls)
	_, err = root.RoleGrantPermission(ctx, "app", "/app/", clientv3.GetPrefixRangeEnd("/app/"), clientv3.PermissionType(clientv3.PermRead))
	mustOK(t, "grant app's /app/ back", err)
	mustOK(t, "alice get /app/x after the grant", read())
	if n := plCountLines(calls); n <= before {
		t.Errorf("authorizer calls: %d after the grant and a read, %d before: the cached allow outlived the auth revision change", n, before)
	}
}
