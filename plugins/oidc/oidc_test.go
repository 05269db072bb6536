package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/hashicorp/go-hclog"

	"github.com/kvd-dev/kvd/pkg/pluginsdk"
)

const (
	testIssuer   = "https://idp.example.com"
	testAudience = "kvd"
)

// Keys are made once: RSA generation is slow under -race.
var (
	keysOnce         sync.Once
	rsaKey, rsaOther *rsa.PrivateKey
	ecKey            *ecdsa.PrivateKey
)

func testKeys(t testing.TB) {
	t.Helper()
	keysOnce.Do(func() {
		var err error
		if rsaKey, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			panic(err)
		}
		if rsaOther, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			panic(err)
		}
		if ecKey, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
			panic(err)
		}
	})
}

// sign returns a compact JWS of claims signed with key.
func sign(t testing.TB, alg jose.SignatureAlgorithm, key any, kid string, claims map[string]any) string {
	t.Helper()
	opts := (&jose.SignerOptions{}).WithType("JWT")
	if kid != "" {
		opts = opts.WithHeader("kid", kid)
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, opts)
	if err != nil {
		t.Fatal(err)
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	jws, err := s.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// claims returns valid claims for user, changed by the given pairs (a nil
// value deletes the claim).
func claims(user string, kv ...any) map[string]any {
	c := map[string]any{
		"iss": testIssuer,
		"aud": testAudience,
		"sub": user,
		"iat": time.Now().Add(-time.Minute).Unix(),
		"exp": time.Now().Add(time.Hour).Unix(),
	}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(c, kv[i].(string))
		} else {
			c[kv[i].(string)] = kv[i+1]
		}
	}
	return c
}

func jwksJSON(t testing.TB, keys ...jose.JSONWebKey) []byte {
	t.Helper()
	data, err := json.Marshal(jose.JSONWebKeySet{Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// writeJWKS replaces the file as a key rotation job would (write, rename).
func writeJWKS(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func pub(key any, kid, alg string) jose.JSONWebKey {
	switch k := key.(type) {
	case *rsa.PrivateKey:
		return jose.JSONWebKey{Key: &k.PublicKey, KeyID: kid, Algorithm: alg, Use: "sig"}
	case *ecdsa.PrivateKey:
		return jose.JSONWebKey{Key: &k.PublicKey, KeyID: kid, Algorithm: alg, Use: "sig"}
	}
	panic("unknown key type")
}

func testConfig(jwksFile string) config {
	return config{issuer: testIssuer, audience: testAudience, jwksFile: jwksFile, userClaim: "sub", groupsClaim: "groups"}
}

// newTest makes an authenticator over a JWKS file with the RSA and EC keys.
func newTest(t *testing.T, interval time.Duration) (*authenticator, string) {
	t.Helper()
	testKeys(t)
	file := filepath.Join(t.TempDir(), "jwks.json")
	writeJWKS(t, file, jwksJSON(t, pub(rsaKey, "rsa1", "RS256"), pub(ecKey, "ec1", "ES256")))
	a, err := newAuthenticator(testConfig(file), interval, hclog.NewNullLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return a, file
}

func token(tok string) pluginsdk.Credential { return pluginsdk.Credential{Token: tok} }

// wantReject checks a reject whose reason holds want and not the token.
func wantReject(t *testing.T, a *authenticator, tok, want string) {
	t.Helper()
	id, err := a.Authenticate(context.Background(), token(tok))
	if err == nil || errors.Is(err, pluginsdk.ErrAbstain) {
		t.Fatalf("got %+v, %v; want a reject saying %q", id, err, want)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("reason %q, want it to say %q", err, want)
	}
	for _, part := range strings.Split(tok, ".") {
		if len(part) > 8 && strings.Contains(err.Error(), part) {
			t.Errorf("reason %q holds the token", err)
		}
	}
}

func wantAbstain(t *testing.T, a *authenticator, c pluginsdk.Credential) {
	t.Helper()
	if id, err := a.Authenticate(context.Background(), c); !errors.Is(err, pluginsdk.ErrAbstain) {
		t.Errorf("Authenticate(%+v) = %+v, %v; want ErrAbstain", c, id, err)
	}
}

func TestAccept(t *testing.T) {
	a, _ := newTest(t, time.Hour)
	exp := time.Now().Add(30 * time.Minute).Truncate(time.Second)
	for _, c := range []struct {
		name string
		tok  string
	}{
		{"RS256", sign(t, jose.RS256, rsaKey, "rsa1", claims("alice", "exp", exp.Unix(), "groups", []string{"writers", "readers"}))},
		{"ES256", sign(t, jose.ES256, ecKey, "ec1", claims("alice", "exp", exp.Unix(), "groups", []string{"writers", "readers"}))},
		{"PS256 no kid", sign(t, jose.PS256, rsaKey, "", claims("alice", "exp", exp.Unix(), "groups", []string{"writers", "readers"}))},
		{"aud array", sign(t, jose.RS256, rsaKey, "rsa1", claims("alice", "exp", exp.Unix(), "aud", []string{"other", testAudience}, "groups", []string{"writers", "readers"}))},
	} {
		t.Run(c.name, func(t *testing.T) {
			id, err := a.Authenticate(context.Background(), token(c.tok))
			if err != nil {
				t.Fatal(err)
			}
			if id.User != "alice" || !slices.Equal(id.Groups, []string{"writers", "readers"}) || !id.Expires.Equal(exp) {
				t.Errorf("got %+v, want alice [writers readers] expiring %v", id, exp)
			}
		})
	}
}

func TestGroupsClaim(t *testing.T) {
	a, _ := newTest(t, time.Hour)
	for _, c := range []struct {
		name   string
		groups any
		want   []string
	}{
		{"array", []any{"a", "b"}, []string{"a", "b"}},
		{"string", "admins", []string{"admins"}},
		{"missing", nil, nil},
		{"empty array", []any{}, []string{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			id, err := a.Authenticate(context.Background(), token(sign(t, jose.ES256, ecKey, "ec1", claims("bob", "groups", c.groups))))
			if err != nil || id.User != "bob" || !slices.Equal(id.Groups, c.want) {
				t.Errorf("got %+v, %v; want groups %v", id, err, c.want)
			}
		})
	}
	wantReject(t, a, sign(t, jose.ES256, ecKey, "ec1", claims("bob", "groups", []any{"a", 1})), `"groups" claim`)
	wantReject(t, a, sign(t, jose.ES256, ecKey, "ec1", claims("bob", "groups", 7)), `"groups" claim`)
}

func TestUserClaim(t *testing.T) {
	testKeys(t)
	file := filepath.Join(t.TempDir(), "jwks.json")
	writeJWKS(t, file, jwksJSON(t, pub(rsaKey, "rsa1", "RS256")))
	cfg := testConfig(file)
	cfg.userClaim, cfg.groupsClaim = "email", "roles"
	a, err := newAuthenticator(cfg, time.Hour, hclog.NewNullLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := a.Authenticate(context.Background(), token(sign(t, jose.RS256, rsaKey, "rsa1", claims("u1", "email", "carol@example.com", "roles", "ops", "groups", "ignored"))))
	if err != nil || id.User != "carol@example.com" || !slices.Equal(id.Groups, []string{"ops"}) {
		t.Errorf("got %+v, %v; want carol@example.com [ops]", id, err)
	}
	wantReject(t, a, sign(t, jose.RS256, rsaKey, "rsa1", claims("u1")), `"email" claim`)
	wantReject(t, a, sign(t, jose.RS256, rsaKey, "rsa1", claims("u1", "email", "")), `"email" claim`)
	wantReject(t, a, sign(t, jose.RS256, rsaKey, "rsa1", claims("u1", "email", 42)), `"email" claim`)
}

func TestReject(t *testing.T) {
	a, _ := newTest(t, time.Hour)
	testKeys(t)
	hour := time.Hour
	wantReject(t, a, sign(t, jose.RS256, rsaKey, "rsa1", claims("alice", "exp", time.Now().Add(-hour).Unix())), "token expired")
	wantReject(t, a, sign(t, jose.ES256, ecKey, "ec1", claims("alice", "exp", nil)), "no exp")
	// Signed by a key that is not the issuer's, even under its key id.
	wantReject(t, a, sign(t, jose.RS256, rsaOther, "rsa1", claims("alice")), "bad signature")
	wantReject(t, a, sign(t, jose.RS256, rsaKey, "rsa1", claims("alice", "aud", "someone-else")), "audience mismatch")
	wantReject(t, a, sign(t, jose.RS256, rsaKey, "rsa1", claims("alice", "aud", nil)), "audience mismatch")
	wantReject(t, a, sign(t, jose.RS256, rsaKey, "rsa1", claims("alice", "nbf", time.Now().Add(hour).Unix())), "not valid yet")
	// HMAC with a secret anyone could pick: never accepted.
	wantReject(t, a, sign(t, jose.HS256, []byte("0123456789abcdef0123456789abcdef"), "", claims("alice")), "unsupported signing algorithm")
	// A payload of this issuer under a broken header or signature.
	good := sign(t, jose.RS256, rsaKey, "rsa1", claims("alice"))
	parts := strings.Split(good, ".")
	wantReject(t, a, base64.RawURLEncoding.EncodeToString([]byte("not json"))+"."+parts[1]+"."+parts[2], "malformed token")
	wantReject(t, a, "e30."+parts[1]+"."+parts[2], "unsupported signing algorithm") // {}: no alg
	wantReject(t, a, parts[0]+"."+parts[1]+".AAAA", "bad signature")
}

func TestAbstain(t *testing.T) {
	a, _ := newTest(t, time.Hour)
	b64 := base64.RawURLEncoding.EncodeToString
	for _, c := range []pluginsdk.Credential{
		{User: "alice", Password: "pw"},
		{},
		token("not a jwt"),
		token("kvdsimpletoken.42"),
		token("a.b.c"),
		token("a.b.c.d.e"),
		token(b64([]byte(`{"alg":"RS256"}`)) + "." + b64([]byte(`[1,2]`)) + ".sig"),
		token(b64([]byte(`{"alg":"RS256"}`)) + "." + b64([]byte(`{"iss":1}`)) + ".sig"),
		token(sign(t, jose.RS256, rsaKey, "rsa1", claims("alice", "iss", "https://other.example.com"))),
		token(sign(t, jose.RS256, rsaKey, "rsa1", claims("alice", "iss", testIssuer+"/"))),
		token(sign(t, jose.RS256, rsaKey, "rsa1", claims("alice", "iss", nil))),
		// kvd's own JWTs (etcd's claims: username, revision, exp; no iss).
		token(sign(t, jose.RS256, rsaOther, "", map[string]any{"username": "root", "revision": 3, "exp": time.Now().Add(time.Hour).Unix()})),
	} {
		wantAbstain(t, a, c)
	}
}

// TestRotation: a key added to the file is used for the next token that
// needs it, even within the reload interval, and a removed key is no
// longer accepted once the file is looked at again.
func TestRotation(t *testing.T) {
	testKeys(t)
	file := filepath.Join(t.TempDir(), "jwks.json")
	writeJWKS(t, file, jwksJSON(t, pub(rsaKey, "k1", "RS256")))
	var logs strings.Builder
	var mu sync.Mutex
	log := hclog.New(&hclog.LoggerOptions{Output: lockedWriter{&mu, &logs}, JSONFormat: true})
	a, err := newAuthenticator(testConfig(file), time.Hour, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	old := sign(t, jose.RS256, rsaKey, "k1", claims("alice"))
	next := sign(t, jose.RS256, rsaOther, "k2", claims("alice"))
	if _, err := a.Authenticate(ctx, token(old)); err != nil {
		t.Fatal(err)
	}
	wantReject(t, a, next, "bad signature")

	// Rotate: k2 in, k1 out.
	writeJWKS(t, file, jwksJSON(t, pub(rsaOther, "k2", "RS256")))
	if id, err := a.Authenticate(ctx, token(next)); err != nil || id.User != "alice" {
		t.Fatalf("token of the new key: %+v, %v", id, err)
	}
	wantReject(t, a, old, "bad signature")

	// A broken file keeps the last good keys, and says so once.
	writeJWKS(t, file, []byte(`{"keys": [`))
	if _, err := a.Authenticate(ctx, token(next)); err != nil {
		t.Fatalf("after a broken file: %v", err)
	}
	wantReject(t, a, old, "bad signature")
	wantReject(t, a, old, "bad signature")
	mu.Lock()
	l := logs.String()
	mu.Unlock()
	if n := strings.Count(l, "cannot reload file"); n != 1 {
		t.Errorf("want one reload error, got %d; log:\n%s", n, l)
	}

	// With interval 0 a removed key stops working at the next call.
	writeJWKS(t, file, jwksJSON(t, pub(rsaOther, "k2", "RS256")))
	a0, err := newAuthenticator(testConfig(file), 0, hclog.NewNullLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a0.Authenticate(ctx, token(next)); err != nil {
		t.Fatal(err)
	}
	writeJWKS(t, file, jwksJSON(t, pub(ecKey, "ec", "ES256")))
	wantReject(t, a0, next, "bad signature")
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestParseJWKS(t *testing.T) {
	testKeys(t)
	oct := jose.JSONWebKey{Key: []byte("0123456789abcdef"), KeyID: "hmac", Algorithm: "HS256"}
	enc := jose.JSONWebKey{Key: &rsaOther.PublicKey, KeyID: "enc", Use: "enc"}
	priv := jose.JSONWebKey{Key: ecKey, KeyID: "priv", Algorithm: "ES256"}
	set := jwksJSON(t, pub(rsaKey, "rsa1", "RS256"), oct, enc, priv)
	// A key kind go-jose does not know must not hide the others.
	set = []byte(strings.Replace(string(set), `{"keys":[`, `{"keys":[{"kty":"XYZ","kid":"odd"},`, 1))
	keys, err := parseJWKS(set, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 {
		t.Fatalf("got %d keys, want the RSA key and the EC private key's public part", len(keys))
	}
	if k, ok := keys[1].(*ecdsa.PublicKey); !ok || !k.Equal(&ecKey.PublicKey) {
		t.Errorf("keys[1] = %T, want the EC public key", keys[1])
	}
	for _, bad := range []string{``, `[]`, `{"keys":[]}`, string(jwksJSON(t, oct))} {
		if _, err := parseJWKS([]byte(bad), hclog.NewNullLogger()); err == nil {
			t.Errorf("parseJWKS(%q) = nil error, want one", bad)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	testKeys(t)
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "jwks.json"), filepath.Join(dir, "bad.json")
	writeJWKS(t, good, jwksJSON(t, pub(rsaKey, "k", "RS256")))
	writeJWKS(t, bad, []byte(`{"keys":[]}`))
	ok := testConfig(good)
	for name, change := range map[string]func(*config){
		"no issuer":      func(c *config) { c.issuer = "" },
		"no audience":    func(c *config) { c.audience = "" },
		"no jwks":        func(c *config) { c.jwksFile = "" },
		"both jwks":      func(c *config) { c.jwksURL = "https://idp.example.com/jwks" },
		"missing file":   func(c *config) { c.jwksFile = filepath.Join(dir, "missing") },
		"no keys":        func(c *config) { c.jwksFile = bad },
		"bad url":        func(c *config) { c.jwksFile, c.jwksURL = "", "ftp://x/jwks" },
		"no user claim":  func(c *config) { c.userClaim = "" },
		"no group claim": func(c *config) { c.groupsClaim = "" },
	} {
		c := ok
		change(&c)
		if _, err := newAuthenticator(c, time.Hour, hclog.NewNullLogger(), nil); err == nil {
			t.Errorf("%s: nil error, want one", name)
		}
	}
}

func TestJWKSURL(t *testing.T) {
	testKeys(t)
	var mu sync.Mutex
	set := jwksJSON(t, pub(ecKey, "ec1", "ES256"))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(set)
	}))
	defer srv.Close()
	cfg := testConfig("")
	cfg.jwksURL = srv.URL
	a, err := newAuthenticator(cfg, time.Hour, hclog.NewNullLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := a.Authenticate(context.Background(), token(sign(t, jose.ES256, ecKey, "ec1", claims("dave")))); err != nil || id.User != "dave" {
		t.Fatalf("got %+v, %v", id, err)
	}
	wantReject(t, a, sign(t, jose.RS256, rsaKey, "rsa1", claims("dave")), "signature")

	// The provider rotates: a token with a new kid makes the set be fetched again.
	mu.Lock()
	set = jwksJSON(t, pub(ecKey, "ec1", "ES256"), pub(rsaKey, "rsa1", "RS256"))
	mu.Unlock()
	// go-oidc shares a fetch that has just finished with a caller that
	// comes in before it clears it: such a caller sees the old set once.
	rotated := token(sign(t, jose.RS256, rsaKey, "rsa1", claims("dave")))
	for i := 0; ; i++ {
		id, err := a.Authenticate(context.Background(), rotated)
		if err == nil && id.User == "dave" {
			break
		}
		if i == 20 {
			t.Fatalf("after rotation: %+v, %v", id, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
