package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// TestPluginsPrefixAuthorizer, on 3 members: the prefix authorizer plugin confines kvd's
// own users, whose role allows all of /tenants/, to /tenants/<user>/: alice
// may put, get, delete and watch there; another tenant's keys are
// "permission denied" for a get, a put, a delete, a range covering both, a
// watch, and a txn touching them only in a compare, in its else branch or
// in a nested txn; root is exempt; the plugin never grants what kvd's
// roles deny.
func TestPluginsPrefixAuthorizer(t *testing.T) {
	plSkipUnlessKVD(t)
	cfg := harness.WritePluginConfig(t, harness.PluginSpec{
		Name:     "tenants",
		Kind:     "authorizer",
		Command:  harness.PluginBinary(t, "prefix"),
		Args:     []string{"--root", "/tenants/"},
		CacheTTL: plDuration(0),
	})
	c := harness.StartCluster(t, 3, harness.ClusterOptions{Engine: "bolt", Args: plArgs(cfg)})
	m := c.Members()
	admin := c.Client(t)
	plEnableAuth(t, admin, func(ctx context.Context) error {
		if err := plAddRole(ctx, admin, "tenant", "/tenants/", clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
			return err
		}
		for _, u := range []string{"alice", "bob", "carl"} {
			if _, err := admin.UserAdd(ctx, u, u+"-pw"); err != nil {
				return err
			}
		}
		for _, u := range []string{"alice", "bob"} {
			if _, err := admin.UserGrantRole(ctx, u, "tenant"); err != nil {
				return err
			}
		}
		_, err := admin.Put(ctx, "/tenants/bob/secret", "b")
		return err
	})
	// alice on one member, bob on another, root on the third: each
	// member's own authorizer decides for the requests it receives.
	ep := m[1].Endpoint()
	ctx := testCtx(t)
	root := plMustUserClient(t, "root", plRootPW, m[0].Endpoint())
	alice := plMustUserClient(t, "alice", "alice-pw", ep)
	denied := func(what string, err error) {
		t.Helper()
		wantErr(t, what, err, rpctypes.ErrPermissionDenied)
	}

	// Her own prefix: everything works.
	if _, err := alice.Put(ctx, "/tenants/alice/a", "1"); err != nil {
		t.Errorf("alice put /tenants/alice/a: %v", err)
	}
	if resp, err := alice.Get(ctx, "/tenants/alice/", clientv3.WithPrefix()); err != nil || resp.Count != 1 {
		t.Errorf("alice get /tenants/alice/ prefix: %v %v", resp, err)
	}
	resp, err := alice.Txn(ctx).If(clientv3.Compare(clientv3.Value("/tenants/alice/a"), "=", "1")).
		Then(clientv3.OpPut("/tenants/alice/b", "2")).Else(clientv3.OpPut("/tenants/alice/c", "3")).Commit()
	if err != nil || !resp.Succeeded {
		t.Errorf("alice txn within her prefix: %v %v", resp, err)
	}
	if _, err := alice.Delete(ctx, "/tenants/alice/b"); err != nil {
		t.Errorf("alice delete /tenants/alice/b: %v", err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	wch := alice.Watch(wctx, "/tenants/alice/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	if wr := <-wch; wr.Err() != nil || !wr.Created {
		t.Errorf("alice watch /tenants/alice/: %+v %v", wr, wr.Err())
	} else {
		if _, err := alice.Put(ctx, "/tenants/alice/w", "w"); err != nil {
			t.Errorf("alice put /tenants/alice/w: %v", err)
		}
		if wr := <-wch; wr.Err() != nil || len(wr.Events) != 1 || string(wr.Events[0].Kv.Key) != "/tenants/alice/w" {
			t.Errorf("alice watch event: %+v %v", wr, wr.Err())
		}
	}
	wcancel()

	// Another tenant's keys, however reached.
	_, err = alice.Get(ctx, "/tenants/bob/secret")
	denied("alice get /tenants/bob/secret", err)
	_, err = alice.Put(ctx, "/tenants/bob/x", "x")
	denied("alice put /tenants/bob/x", err)
	_, err = alice.Delete(ctx, "/tenants/bob/secret")
	denied("alice delete /tenants/bob/secret", err)
	_, err = alice.Get(ctx, "/tenants/", clientv3.WithPrefix())
	denied("alice get /tenants/ prefix (both tenants)", err)
	_, err = alice.Txn(ctx).If(clientv3.Compare(clientv3.Value("/tenants/alice/a"), "=", "1")).
		Then(clientv3.OpPut("/tenants/alice/d", "4")).Else(clientv3.OpPut("/tenants/bob/x", "x")).Commit()
	denied("alice txn, else branch puts /tenants/bob/x", err)
	_, err = alice.Txn(ctx).If(clientv3.Compare(clientv3.Value("/tenants/bob/secret"), "=", "b")).
		Then(clientv3.OpPut("/tenants/alice/e", "5")).Commit()
	denied("alice txn comparing /tenants/bob/secret", err)
	_, err = alice.Txn(ctx).Then(clientv3.OpPut("/tenants/alice/f", "6"),
		clientv3.OpTxn(nil, []clientv3.Op{clientv3.OpGet("/tenants/alice/a")}, []clientv3.Op{clientv3.OpDelete("/tenants/bob/secret")})).Commit()
	denied("alice txn, nested else deletes /tenants/bob/secret", err)
	wctx, wcancel = context.WithTimeout(ctx, 10*time.Second)
	wr := <-alice.Watch(wctx, "/tenants/bob/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	if err := wr.Err(); err == nil || !strings.Contains(err.Error(), "etcdserver: permission denied") {
		t.Errorf("alice watch /tenants/bob/: %+v %v, want permission denied", wr, err)
	}
	wcancel()

	// bob in his own prefix, root anywhere.
	bob := plMustUserClient(t, "bob", "bob-pw", m[2].Endpoint())
	if resp, err := bob.Get(ctx, "/tenants/bob/secret"); err != nil || len(resp.Kvs) != 1 {
		t.Errorf("bob get /tenants/bob/secret: %v %v", resp, err)
	}
	_, err = bob.Get(ctx, "/tenants/alice/a")
	denied("bob get /tenants/alice/a", err)
	if _, err := root.Put(ctx, "/tenants/bob/by-root", "r"); err != nil {
		t.Errorf("root put /tenants/bob/by-root: %v", err)
	}
	if _, err := root.Put(ctx, "/elsewhere", "r"); err != nil {
		t.Errorf("root put /elsewhere: %v", err)
	}

	// The authorizer allows carl's own prefix, kvd's roles (none) do not.
	carl := plMustUserClient(t, "carl", "carl-pw", ep)
	_, err = carl.Put(ctx, "/tenants/carl/x", "x")
	denied("carl (no role) put /tenants/carl/x", err)

	// Nothing denied was written.
	all, err := root.Get(ctx, "/tenants/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	mustOK(t, "root get /tenants/", err)
	var keys []string
	for _, kv := range all.Kvs {
		keys = append(keys, string(kv.Key))
	}
	if got, want := strings.Join(keys, " "), "/tenants/alice/a /tenants/alice/w /tenants/bob/by-root /tenants/bob/secret"; got != want {
		t.Errorf("keys under /tenants/: %s, want %s", got, want)
	}
	if n := plMetric(t, ep, "kvd_auth_plugin_calls_total", "plugin", "tenants", "kind", "authorizer"); n < 10 {
		t.Errorf("kvd_auth_plugin_calls_total{plugin=tenants}: %v, want at least the 10 calls above", n)
	}
	if n := plMetric(t, ep, "kvd_auth_plugin_call_duration_seconds_count", "plugin", "tenants"); n < 10 {
		t.Errorf("kvd_auth_plugin_call_duration_seconds_count{plugin=tenants}: %v, want at least the 10 calls above", n)
	}
	if n := plMetric(t, ep, "kvd_auth_plugin_calls_total", "plugin", "tenants", "result", "deny"); n < 8 {
		t.Errorf("kvd_auth_plugin_calls_total{plugin=tenants,result=deny}: %v, want at least the 8 denials above", n)
	}
}
