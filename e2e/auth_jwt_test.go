package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// TestAuthJWTEtcdctl: with the same JWT keys, a token kvd signed works with
// `etcdctl --auth-jwt-token` against kvd and against etcd v3.7.3 without
// Authenticate, and a token etcd signed works against kvd: the tokens are
// interchangeable, as etcd users moving between the two expect.
func TestAuthJWTEtcdctl(t *testing.T) {
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	mustOK(t, "key", err)
	der, err := x509.MarshalECPrivateKey(key)
	mustOK(t, "marshal key", err)
	pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	mustOK(t, "marshal public key", err)
	priv, pub := filepath.Join(dir, "jwt.key"), filepath.Join(dir, "jwt.pub")
	mustOK(t, "write key", os.WriteFile(priv, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600))
	mustOK(t, "write public key", os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644))
	args := []string{"--auth-token", "jwt,pub-key=" + pub + ",priv-key=" + priv + ",sign-method=ES256,ttl=10m", "--bcrypt-cost", "4"}

	procs := []*harness.Process{
		harness.StartKVD(t, harness.Options{Engine: "bolt", Args: args}),
		harness.StartEtcd(t, harness.Options{Args: args}),
	}
	tokens := make([]string, len(procs))
	targets := make([]*ctlTarget, len(procs))
	for i, p := range procs {
		targets[i] = newCtlTarget(t, p) // before auth: it reads the member's IDs
		c := p.Client(t)
		ctx := testCtx(t)
		for _, f := range []func() error{
			func() error { _, err := c.UserAdd(ctx, "root", "rootpw"); return err },
			func() error { _, err := c.UserGrantRole(ctx, "root", "root"); return err },
			func() error { _, err := c.RoleAdd(ctx, "reader"); return err },
			func() error {
				_, err := c.RoleGrantPermission(ctx, "reader", "/app/", clientv3.GetPrefixRangeEnd("/app/"), clientv3.PermissionType(clientv3.PermRead))
				return err
			},
			func() error { _, err := c.UserAdd(ctx, "alice", "alicepw"); return err },
			func() error { _, err := c.UserGrantRole(ctx, "alice", "reader"); return err },
			func() error { _, err := c.Put(ctx, "/app/x", "hello"); return err },
			func() error { _, err := c.AuthEnable(ctx); return err },
		} {
			mustOK(t, p.Label()+": setup", f())
		}
		resp, err := c.Authenticate(ctx, "alice", "alicepw")
		mustOK(t, p.Label()+": authenticate", err)
		tokens[i] = resp.Token
	}
	ctlBin := harness.EtcdctlBinary(t)
	for i, p := range procs {
		for j, tok := range tokens {
			tg := targets[i]
			r := tg.run(ctlBin, ctl("--auth-jwt-token", tok, "get", "/app/x", "--print-value-only"))
			if r.exit != 0 || strings.TrimSpace(r.stdout) != "hello" {
				t.Errorf("%s with a token signed by %s: %s", p.Label(), procs[j].Label(), r)
			}
			r = tg.run(ctlBin, ctl("--auth-jwt-token", tok, "put", "/app/x", "no"))
			if r.exit == 0 || !strings.Contains(r.stderr, "permission denied") {
				t.Errorf("%s: put with alice's token: %s, want permission denied", p.Label(), r)
			}
		}
	}
}
