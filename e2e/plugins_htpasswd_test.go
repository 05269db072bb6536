package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// TestPluginsHtpasswdCluster: three kvd members, each running the htpasswd
// authenticator plugin. A user kvd does not know (alice, in the htpasswd
// file, group app) gets exactly the permissions of kvd's role app through
// etcdctl --user and clientv3 on every member; a wrong password is etcd's
// "authentication failed", a key outside the role is "permission denied";
// a user in neither the file nor kvd fails as before; once the group file
// no longer puts alice in app, a new authentication gives her nothing; a
// permission revoked from the role is gone at once on every member.
func TestPluginsHtpasswdCluster(t *testing.T) {
	plSkipUnlessKVD(t)
	dir := t.TempDir()
	users, groups := filepath.Join(dir, "htpasswd"), filepath.Join(dir, "groups")
	plWriteFile(t, users, plHtpasswdLine(t, "alice", "alice-pw")+plHtpasswdLine(t, "dave", "dave-pw"))
	plWriteFile(t, groups, "app: alice\nops: dave\n")
	cfg := harness.WritePluginConfig(t, harness.PluginSpec{
		Name:    "corp-htpasswd",
		Kind:    "authenticator",
		Command: harness.PluginBinary(t, "htpasswd"),
		Args:    []string{"--file", users, "--groups", groups},
		Timeout: 2 * time.Second, // bcrypt and a loaded 2-core machine
	})
	c := harness.StartCluster(t, 3, harness.ClusterOptions{Engine: "bolt", Args: plArgs(cfg)})
	members := c.Members()

	admin := c.Client(t)
	plEnableAuth(t, admin, func(ctx context.Context) error {
		if err := plAddRole(ctx, admin, "app", "/app/", clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
			return err
		}
		return plAddRole(ctx, admin, "ops", "/ops/", clientv3.PermissionType(clientv3.PermReadWrite))
	})
	root := plMustUserClient(t, "root", plRootPW, c.Endpoints()...)
	ctx := testCtx(t)

	// etcdctl --user alice: a write on each member, read back on each.
	for i, m := range members {
		r := plEtcdctl(t, m.Endpoint(), "--user", "alice:alice-pw", "put", "/app/x", fmt.Sprint(i+1))
		plWantCtlOK(t, "alice put /app/x on "+m.Name(), r, "OK")
		for _, o := range members {
			r := plEtcdctl(t, o.Endpoint(), "--user", "alice:alice-pw", "get", "/app/x", "--print-value-only")
			plWantCtlOK(t, fmt.Sprintf("alice get /app/x on %s after the put on %s", o.Name(), m.Name()), r, fmt.Sprint(i+1))
		}
	}
	m0 := members[0].Endpoint()
	plWantCtlErr(t, "alice with a wrong password", plEtcdctl(t, m0, "--user", "alice:nope", "get", "/app/x"),
		"etcdserver: authentication failed, invalid user ID or password")
	plWantCtlErr(t, "alice put /other", plEtcdctl(t, m0, "--user", "alice:alice-pw", "put", "/other", "1"),
		"etcdserver: permission denied")
	plWantCtlErr(t, "mallory (in no authenticator, not a kvd user)", plEtcdctl(t, m0, "--user", "mallory:pw", "get", "/app/x"),
		"etcdserver: authentication failed, invalid user ID or password")
	// The user itself never becomes a kvd user.
	if resp, err := root.UserList(ctx); err != nil || strings.Join(resp.Users, ",") != "root" {
		t.Errorf("user list after plugin logins: %v %v, want only root", resp, err)
	}

	// clientv3 with Username/Password, one client per member.
	for i, m := range members {
		cli := plMustUserClient(t, "alice", "alice-pw", m.Endpoint())
		key := fmt.Sprintf("/app/clientv3/%d", i)
		if _, err := cli.Put(ctx, key, "v"); err != nil {
			t.Errorf("clientv3 alice put %s on %s: %v", key, m.Name(), err)
		}
		resp, err := cli.Get(ctx, "/app/clientv3/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil || resp.Count != int64(i+1) {
			t.Errorf("clientv3 alice count /app/clientv3/ on %s: %v %v, want %d", m.Name(), resp, err, i+1)
		}
		_, err = cli.Put(ctx, "/other", "v")
		wantErr(t, "clientv3 alice put /other on "+m.Name(), err, rpctypes.ErrPermissionDenied)
		_, err = cli.Get(ctx, "/other")
		wantErr(t, "clientv3 alice get /other on "+m.Name(), err, rpctypes.ErrPermissionDenied)
	}
	if _, err := plUserClient(t, "alice", "wrong", m0); err == nil {
		t.Errorf("clientv3 alice with a wrong password: connected")
	} else {
		wantErr(t, "clientv3 alice with a wrong password", err, rpctypes.ErrAuthFailed)
	}
	if resp, err := root.Get(ctx, "/other"); err != nil || resp.Count != 0 {
		t.Errorf("/other after the denied puts: %v %v, want absent", resp, err)
	}

	// A token alice got from one member works on the others: the identity
	// the plugin vouched for travels with it.
	tokResp, err := c.ClientFor(t, m0).Authenticate(ctx, "alice", "alice-pw")
	mustOK(t, "authenticate alice on m0", err)
	for i, m := range members[1:] {
		cli := plTokenClient(t, tokResp.Token, m.Endpoint())
		if _, err := cli.Put(ctx, fmt.Sprintf("/app/token/%d", i), "v"); err != nil {
			t.Errorf("put with alice's token from m0 on %s: %v", m.Name(), err)
		}
		_, err := cli.Put(ctx, "/other", "v")
		wantErr(t, "put /other with alice's token from m0 on "+m.Name(), err, rpctypes.ErrPermissionDenied)
	}

	// dave (group ops) has role ops's permissions and nothing else.
	dave := plMustUserClient(t, "dave", "dave-pw", m0)
	if _, err := dave.Put(ctx, "/ops/x", "v"); err != nil {
		t.Errorf("dave put /ops/x: %v", err)
	}
	_, err = dave.Put(ctx, "/app/x", "dave")
	wantErr(t, "dave put /app/x (not in group app)", err, rpctypes.ErrPermissionDenied)
	_, err = dave.RoleList(ctx)
	wantErr(t, "dave role list (not root)", err, rpctypes.ErrPermissionDenied)

	// A permission revoked from a role is gone at once on every member,
	// for tokens issued before the revoke too.
	daves := make([]*clientv3.Client, len(members))
	for i, m := range members {
		daves[i] = plMustUserClient(t, "dave", "dave-pw", m.Endpoint())
		if _, err := daves[i].Get(ctx, "/ops/x"); err != nil {
			t.Fatalf("dave get /ops/x on %s before the revoke: %v", m.Name(), err)
		}
	}
	_, err = root.RoleRevokePermission(ctx, "ops", "/ops/", clientv3.GetPrefixRangeEnd("/ops/"))
	mustOK(t, "revoke ops's /ops/", err)
	for i, m := range members {
		_, err := daves[i].Get(ctx, "/ops/x")
		wantErr(t, "dave get /ops/x on "+m.Name()+" after the revoke", err, rpctypes.ErrPermissionDenied)
	}

	// alice leaves group app, dave joins group root: a new authentication
	// gives alice nothing and dave root (the plugin re-reads the group
	// file when it changes).
	plWriteFile(t, groups, "ops: dave\nroot: dave\n")
	eventually(t, "alice denied after leaving group app", 15*time.Second, func() error {
		r := plEtcdctl(t, m0, "--user", "alice:alice-pw", "get", "/app/x")
		if r.exit == 0 || !strings.Contains(r.stderr, "etcdserver: permission denied") {
			return fmt.Errorf("%s", r)
		}
		return nil
	})
	for _, m := range members {
		plWantCtlErr(t, "alice put /app/x on "+m.Name()+" without group app",
			plEtcdctl(t, m.Endpoint(), "--user", "alice:alice-pw", "put", "/app/x", "gone"), "etcdserver: permission denied")
	}
	// (Role root is granted, never added, so the list does not show it.)
	plWantCtlOK(t, "dave (group root) role list", plEtcdctl(t, m0, "--user", "dave:dave-pw", "role", "list"), "app\nops")
	if resp, err := root.Get(ctx, "/app/x"); err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "3" {
		t.Errorf("/app/x: %v %v, want 3 (alice's last permitted write)", resp, err)
	}
	for i, m := range members {
		if exited, werr := m.Exited(); exited {
			t.Errorf("member %d exited: %v", i, werr)
		}
	}
}

// TestPluginsHtpasswdJWTToken: with kvd signing JWT tokens, the token an
// htpasswd user gets carries the identity the plugin vouched for: it works
// with etcdctl --auth-jwt-token, has the groups' roles and no more, and
// still does after kvd restarts (without asking the plugin again: the
// user is removed from the htpasswd file first).
func TestPluginsHtpasswdJWTToken(t *testing.T) {
	plSkipUnlessKVD(t)
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	mustOK(t, "key", err)
	der, err := x509.MarshalECPrivateKey(key)
	mustOK(t, "marshal key", err)
	pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	mustOK(t, "marshal public key", err)
	priv, pub := filepath.Join(dir, "jwt.key"), filepath.Join(dir, "jwt.pub")
	plWriteFile(t, priv, string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})))
	plWriteFile(t, pub, string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})))
	users, groups := filepath.Join(dir, "htpasswd"), filepath.Join(dir, "groups")
	plWriteFile(t, users, plHtpasswdLine(t, "alice", "alice-pw"))
	plWriteFile(t, groups, "app: alice\n")
	cfg := harness.WritePluginConfig(t, harness.PluginSpec{
		Name: "corp-htpasswd", Kind: "authenticator", Command: harness.PluginBinary(t, "htpasswd"),
		Args: []string{"--file", users, "--groups", groups}, Timeout: 2 * time.Second,
	})
	args := append(plArgs(cfg), "--auth-token", "jwt,pub-key="+pub+",priv-key="+priv+",sign-method=ES256,ttl=10m")
	p := harness.StartKVD(t, harness.Options{Engine: "bolt", Args: args})
	admin := p.Client(t)
	plEnableAuth(t, admin, func(ctx context.Context) error {
		return plAddRole(ctx, admin, "app", "/app/", clientv3.PermissionType(clientv3.PermReadWrite))
	})
	ctx := testCtx(t)
	resp, err := admin.Authenticate(ctx, "alice", "alice-pw")
	mustOK(t, "authenticate alice", err)
	tok := resp.Token
	if strings.Count(tok, ".") != 2 {
		t.Fatalf("alice's token %q is not a JWT", tok)
	}
	check := func(when string) {
		t.Helper()
		plWantCtlOK(t, "put /app/x with alice's JWT "+when, plEtcdctl(t, p.Endpoint(), "--auth-jwt-token", tok, "put", "/app/x", "1"), "OK")
		plWantCtlOK(t, "get /app/x with alice's JWT "+when, plEtcdctl(t, p.Endpoint(), "--auth-jwt-token", tok, "get", "/app/x", "--print-value-only"), "1")
		plWantCtlErr(t, "put /other with alice's JWT "+when, plEtcdctl(t, p.Endpoint(), "--auth-jwt-token", tok, "put", "/other", "1"), "etcdserver: permission denied")
	}
	check("")
	plWriteFile(t, users, plHtpasswdLine(t, "someone-else", "pw"))
	p.Restart()
	check("after a restart")
	r := plEtcdctl(t, p.Endpoint(), "--user", "alice:alice-pw", "get", "/app/x")
	plWantCtlErr(t, "alice's password once she left the htpasswd file", r, "etcdserver: authentication failed, invalid user ID or password")
}
