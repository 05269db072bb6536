package e2e

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvd-dev/kvd/e2e/harness"
)

const (
	oidcIssuer   = "https://sso.example.test"
	oidcAudience = "kvd"
)

// oidcKey is an RSA signing key with its key id.
type oidcKey struct {
	kid string
	key *rsa.PrivateKey
}

func newOIDCKey(t *testing.T, kid string) oidcKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	mustOK(t, "rsa key", err)
	return oidcKey{kid: kid, key: k}
}

// jwks is the JSON Web Key Set of keys' public halves.
func jwks(t *testing.T, keys ...oidcKey) string {
	t.Helper()
	b64 := base64.RawURLEncoding.EncodeToString
	var set struct {
		Keys []map[string]string `json:"keys"`
	}
	for _, k := range keys {
		set.Keys = append(set.Keys, map[string]string{
			"kty": "RSA", "use": "sig", "alg": "RS256", "kid": k.kid,
			"n": b64(k.key.N.Bytes()),
			"e": b64(big.NewInt(int64(k.key.E)).Bytes()),
		})
	}
	b, err := json.Marshal(set)
	mustOK(t, "jwks", err)
	return string(b)
}

// sign is an RS256 JWT with claims, signed by k.
func (k oidcKey) sign(t *testing.T, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	tok.Header["kid"] = k.kid
	s, err := tok.SignedString(k.key)
	mustOK(t, "sign token", err)
	return s
}

// oidcClaims are valid claims for user with groups, expiring after ttl
// (negative: already expired).
func oidcClaims(user string, groups []string, ttl time.Duration) jwt.MapClaims {
	now := time.Now()
	return jwt.MapClaims{
		"iss":    oidcIssuer,
		"aud":    oidcAudience,
		"sub":    user,
		"groups": groups,
		"iat":    now.Add(-time.Minute).Unix(),
		"exp":    now.Add(ttl).Unix(),
	}
}

// TestPluginsOIDC: the oidc authenticator plugin with keys made here, on 3
// members (each verifies tokens with its own plugin). A
// valid token of the issuer works with etcdctl --auth-jwt-token and with
// clientv3's Token, its groups claim naming kvd's role; a token that is
// expired, signed by another key, for another audience or of another
// issuer is "invalid auth token" and writes nothing; a valid token whose
// groups name no role may do nothing.
func TestPluginsOIDC(t *testing.T) {
	plSkipUnlessKVD(t)
	good, other := newOIDCKey(t, "k1"), newOIDCKey(t, "k2")
	keys := filepath.Join(t.TempDir(), "jwks.json")
	plWriteFile(t, keys, jwks(t, good))
	cfg := harness.WritePluginConfig(t, harness.PluginSpec{
		Name:    "corp-sso",
		Kind:    "authenticator",
		Command: harness.PluginBinary(t, "oidc"),
		Args:    []string{"--issuer", oidcIssuer, "--audience", oidcAudience, "--jwks-file", keys},
		Timeout: 2 * time.Second,
	})
	c := harness.StartCluster(t, 3, harness.ClusterOptions{Engine: "bolt", Args: plArgs(cfg)})
	m := c.Members()
	ep0, ep1, ep2 := m[0].Endpoint(), m[1].Endpoint(), m[2].Endpoint()
	admin := c.Client(t)
	plEnableAuth(t, admin, func(ctx context.Context) error {
		if _, err := admin.Put(ctx, "/app/seed", "s"); err != nil {
			return err
		}
		return plAddRole(ctx, admin, "app", "/app/", clientv3.PermissionType(clientv3.PermReadWrite))
	})
	root := plMustUserClient(t, "root", plRootPW, c.Endpoints()...)
	ctx := testCtx(t)

	carol := good.sign(t, oidcClaims("carol", []string{"app", "no-such-role"}, 10*time.Minute))
	// Each member's own plugin verifies the token.
	plWantCtlOK(t, "carol put /app/x on m1", plEtcdctl(t, ep1, "--auth-jwt-token", carol, "put", "/app/x", "1"), "OK")
	for _, ep := range c.Endpoints() {
		plWantCtlOK(t, "carol get /app/x on "+ep, plEtcdctl(t, ep, "--auth-jwt-token", carol, "get", "/app/x", "--print-value-only"), "1")
	}
	plWantCtlErr(t, "carol put /other on m0", plEtcdctl(t, ep0, "--auth-jwt-token", carol, "put", "/other", "1"), "etcdserver: permission denied")
	cli := plTokenClient(t, carol, ep2)
	if _, err := cli.Put(ctx, "/app/y", "2"); err != nil {
		t.Errorf("clientv3 with carol's token: put /app/y: %v", err)
	}
	if resp, err := cli.Get(ctx, "/app/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 3 {
		t.Errorf("clientv3 with carol's token: count /app/: %v %v, want 3", resp, err)
	}

	// A valid token whose groups are no kvd role: identified, permitted
	// nothing.
	erin := good.sign(t, oidcClaims("erin", []string{"nobody"}, 10*time.Minute))
	plWantCtlErr(t, "erin (no role) get /app/x", plEtcdctl(t, ep1, "--auth-jwt-token", erin, "get", "/app/x"), "etcdserver: permission denied")

	bad := map[string]string{
		"expired":     good.sign(t, oidcClaims("carol", []string{"app"}, -time.Minute)),
		"another key": other.sign(t, oidcClaims("carol", []string{"app"}, 10*time.Minute)),
		"another audience": good.sign(t, func() jwt.MapClaims {
			c := oidcClaims("carol", []string{"app"}, 10*time.Minute)
			c["aud"] = "not-kvd"
			return c
		}()),
		"another issuer": good.sign(t, func() jwt.MapClaims {
			c := oidcClaims("carol", []string{"app"}, 10*time.Minute)
			c["iss"] = "https://evil.example.test"
			return c
		}()),
		"not a JWT": "garbage-token",
	}
	i := 0
	for what, tok := range bad {
		ep := m[i%3].Endpoint()
		i++
		plWantCtlErr(t, what+": etcdctl put on "+ep, plEtcdctl(t, ep, "--auth-jwt-token", tok, "put", "/app/bad", what), "etcdserver: invalid auth token")
		plWantCtlErr(t, what+": etcdctl get on "+ep, plEtcdctl(t, ep, "--auth-jwt-token", tok, "get", "/app/x"), "etcdserver: invalid auth token")
		_, err := plTokenClient(t, tok, ep).Put(ctx, "/app/bad", what)
		wantErr(t, what+": clientv3 put", err, rpctypes.ErrInvalidAuthToken)
	}
	resp, err := root.Get(ctx, "/app/", clientv3.WithPrefix())
	mustOK(t, "root get /app/", err)
	var got []string
	for _, kv := range resp.Kvs {
		got = append(got, string(kv.Key)+"="+string(kv.Value))
	}
	if want := "/app/seed=s /app/x=1 /app/y=2"; strings.Join(got, " ") != want {
		t.Errorf("/app/ after the refused tokens: %s, want %s", strings.Join(got, " "), want)
	}

	// Key rotation: a token of a key the JWKS file gains is accepted once
	// the plugin has re-read the file.
	plWriteFile(t, keys, jwks(t, good, other))
	rotated := other.sign(t, oidcClaims("carol", []string{"app"}, 10*time.Minute))
	rcli := plTokenClient(t, rotated, ep2)
	eventually(t, "token of the added key accepted", 10*time.Second, func() error {
		_, err := rcli.Get(ctx, "/app/x")
		return err
	})
}
