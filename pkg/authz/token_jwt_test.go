package authz

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"go.uber.org/zap"
)

// tokKeyPair is a key and another of the same kind, generated once for the
// test binary (RSA keys are slow to make).
type tokKeyPair struct{ key, other any }

var tokKeys = sync.OnceValue(func() map[string]tokKeyPair {
	rsaKey := func() any {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		return k
	}
	ecKey := func(c elliptic.Curve) any {
		k, err := ecdsa.GenerateKey(c, rand.Reader)
		if err != nil {
			panic(err)
		}
		return k
	}
	edKey := func() any {
		_, k, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			panic(err)
		}
		return k
	}
	return map[string]tokKeyPair{
		"RSA":  {rsaKey(), rsaKey()},
		"P256": {ecKey(elliptic.P256()), ecKey(elliptic.P256())},
		"P384": {ecKey(elliptic.P384()), ecKey(elliptic.P384())},
		"P521": {ecKey(elliptic.P521()), ecKey(elliptic.P521())},
		"Ed":   {edKey(), edKey()},
		"HMAC": {[]byte("the shared secret\n"), []byte("another secret\n")},
	}
})

// tokKeyKind is the key each sign method takes.
var tokKeyKind = map[string]string{
	"RS256": "RSA", "RS384": "RSA", "RS512": "RSA",
	"PS256": "RSA", "PS384": "RSA", "PS512": "RSA",
	"ES256": "P256", "ES384": "P384", "ES512": "P521",
	"EdDSA": "Ed",
	"HS256": "HMAC", "HS384": "HMAC", "HS512": "HMAC",
}

// writeTokPriv writes key as PEM (PKCS#1, SEC 1, or PKCS#8 when pkcs8 or
// for Ed25519; raw bytes for an HMAC secret) and returns the file name.
func writeTokPriv(t *testing.T, key any, pkcs8 bool) string {
	t.Helper()
	var data []byte
	switch k := key.(type) {
	case []byte:
		data = k
	default:
		var der []byte
		var typ string
		var err error
		switch k := key.(type) {
		case *rsa.PrivateKey:
			der, typ = x509.MarshalPKCS1PrivateKey(k), "RSA PRIVATE KEY"
		case *ecdsa.PrivateKey:
			der, err = x509.MarshalECPrivateKey(k)
			typ = "EC PRIVATE KEY"
		}
		if pkcs8 || der == nil {
			der, err = x509.MarshalPKCS8PrivateKey(key)
			typ = "PRIVATE KEY"
		}
		if err != nil {
			t.Fatal(err)
		}
		data = pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	}
	return writeTokFile(t, "priv", data)
}

// writeTokPub writes key's public half as PKIX PEM.
func writeTokPub(t *testing.T, key any) string {
	t.Helper()
	var pub any
	switch k := key.(type) {
	case *rsa.PrivateKey:
		pub = k.Public()
	case *ecdsa.PrivateKey:
		pub = k.Public()
	case ed25519.PrivateKey:
		pub = k.Public()
	default:
		t.Fatalf("no public half for %T", key)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return writeTokFile(t, "pub", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

var tokFileSeq struct {
	sync.Mutex
	n int
}

func writeTokFile(t *testing.T, kind string, data []byte) string {
	t.Helper()
	tokFileSeq.Lock()
	tokFileSeq.n++
	name := filepath.Join(t.TempDir(), fmt.Sprintf("%s-%d.pem", kind, tokFileSeq.n))
	tokFileSeq.Unlock()
	if err := os.WriteFile(name, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return name
}

// newTestJWT makes a provider of spec on clock c.
func newTestJWT(t *testing.T, spec string, c *tokClock) *jwtTokens {
	t.Helper()
	tk, err := newTokens(spec, 0, zap.NewNop(), c.now)
	if err != nil {
		t.Fatalf("newTokens(%q): %v", spec, err)
	}
	j, ok := tk.(*jwtTokens)
	if !ok {
		t.Fatalf("newTokens(%q) = %T, want *jwtTokens", spec, tk)
	}
	return j
}

// signers are the ways to give a signing key: priv-key alone, both keys,
// and PKCS#8 (for RSA and ECDSA, whose default here is PKCS#1 / SEC 1).
func signerSpecs(t *testing.T, method string, key any) map[string]string {
	t.Helper()
	if method[:2] == "HS" {
		return map[string]string{"secret": fmt.Sprintf("jwt,priv-key=%s,sign-method=%s", writeTokPriv(t, key, false), method)}
	}
	priv, pub := writeTokPriv(t, key, false), writeTokPub(t, key)
	return map[string]string{
		"priv-key":       fmt.Sprintf("jwt,priv-key=%s,sign-method=%s", priv, method),
		"both keys":      fmt.Sprintf("jwt,pub-key=%s,priv-key=%s,sign-method=%s,ttl=1m", pub, priv, method),
		"pkcs8 priv-key": fmt.Sprintf("jwt,sign-method=%s,priv-key=%s", method, writeTokPriv(t, key, true)),
	}
}

func TestJWTRoundTrip(t *testing.T) {
	for method, kind := range tokKeyKind {
		t.Run(method, func(t *testing.T) {
			key := tokKeys()[kind].key
			c := newTokClock()
			var verifier *jwtTokens
			if kind != "HMAC" {
				verifier = newTestJWT(t, fmt.Sprintf("jwt,pub-key=%s,sign-method=%s", writeTokPub(t, key), method), c)
				if _, err := verifier.Assign(Info{User: "alice", Revision: 1}, "", 1); !errors.Is(err, ErrTokenVerifyOnly) ||
					err.Error() != "auth: token signing attempted with verify-only key" {
					t.Fatalf("verify-only Assign: %v, want etcd's ErrVerifyOnly", err)
				}
			}
			for name, spec := range signerSpecs(t, method, key) {
				signer := newTestJWT(t, spec, c)
				tok, err := signer.Assign(Info{User: "alice", Revision: 7}, "", 99)
				if err != nil {
					t.Fatalf("%s: Assign: %v", name, err)
				}
				want := Info{User: "alice", Revision: 7} // the token's revision, not Info's rev
				for _, p := range []*jwtTokens{signer, verifier} {
					if p == nil {
						continue
					}
					if info, ok := p.Info(tok, 12); !ok || !reflect.DeepEqual(info, want) {
						t.Errorf("%s: Info = %+v, %v; want %+v", name, info, ok, want)
					}
				}
			}
		})
	}
}

// signTok signs claims with method and key, as another issuer would.
func signTok(t *testing.T, method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(method, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestJWTRefused(t *testing.T) {
	for method, kind := range tokKeyKind {
		t.Run(method, func(t *testing.T) {
			pair := tokKeys()[kind]
			c := newTokClock()
			spec := fmt.Sprintf("jwt,priv-key=%s,sign-method=%s", writeTokPriv(t, pair.key, false), method)
			p := newTestJWT(t, spec, c)
			m := jwtSignMethods[method]
			exp := c.now().Add(time.Minute).Unix()
			good := jwt.MapClaims{"username": "alice", "revision": 3, "exp": exp}
			if _, ok := p.Info(signTok(t, m, pair.key, good), 0); !ok {
				t.Fatal("a well-signed token is refused: the cases below prove nothing")
			}
			own, err := p.Assign(Info{User: "alice", Revision: 3}, "", 0)
			if err != nil {
				t.Fatal(err)
			}
			parts := strings.Split(own, ".")
			with := func(k string, v any) jwt.MapClaims {
				c := jwt.MapClaims{"username": "alice", "revision": 3, "exp": exp}
				if v == nil {
					delete(c, k)
				} else {
					c[k] = v
				}
				return c
			}
			cases := map[string]string{
				"another key":             signTok(t, m, pair.other, good),
				"empty":                   "",
				"not a JWT":               "abcdefghijklmnop.42",
				"garbage":                 "a.b.c",
				"no signature":            parts[0] + "." + parts[1] + ".",
				"signature of another":    parts[0] + "." + parts[1] + "." + strings.Split(signTok(t, m, pair.key, with("username", "bob")), ".")[2],
				"payload changed":         parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"exp":`+fmt.Sprint(exp)+`,"revision":3,"username":"root"}`)) + "." + parts[2],
				"alg none":                signTok(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, good),
				"expired":                 signTok(t, m, pair.key, with("exp", c.now().Add(-time.Second).Unix())),
				"not yet valid":           signTok(t, m, pair.key, with("nbf", c.now().Add(time.Hour).Unix())),
				"no username":             signTok(t, m, pair.key, with("username", nil)),
				"username not a string":   signTok(t, m, pair.key, with("username", 5)),
				"no revision":             signTok(t, m, pair.key, with("revision", nil)),
				"revision a string":       signTok(t, m, pair.key, with("revision", "3")),
				"revision negative":       signTok(t, m, pair.key, with("revision", -1)),
				"revision not whole":      signTok(t, m, pair.key, with("revision", 2.5)),
				"exp not a number":        signTok(t, m, pair.key, with("exp", "soon")),
				"another method, its key": signTok(t, jwt.SigningMethodHS256, []byte("x"), good),
			}
			if kind != "HMAC" {
				// The classic confusion: HS256 "signed" with the public key.
				pubPEM, err := os.ReadFile(writeTokPub(t, pair.key))
				if err != nil {
					t.Fatal(err)
				}
				cases["HS256 keyed with the public key"] = signTok(t, jwt.SigningMethodHS256, pubPEM, good)
			}
			// Another method of the same family, with the right key.
			sibling := map[string]string{"RS256": "RS384", "RS384": "RS512", "RS512": "PS512", "PS256": "RS256",
				"PS384": "PS256", "PS512": "PS384", "HS256": "HS512", "HS384": "HS256", "HS512": "HS384"}[method]
			if sibling != "" {
				cases["method "+sibling] = signTok(t, jwtSignMethods[sibling], pair.key, good)
			}
			for name, tok := range cases {
				if info, ok := p.Info(tok, 0); ok {
					t.Errorf("%s: Info = %+v, accepted", name, info)
				}
			}
			// A token of its own that outlived its ttl.
			c.add(DefaultTokenTTL + time.Second)
			if _, ok := p.Info(own, 0); ok {
				t.Error("own token past its ttl: accepted")
			}
		})
	}
}

// TestJWTClaims: a token is etcd's, claim for claim. etcd v3.7.3
// server/auth/jwt.go (tokenJWT.assign) signs
//
//	jwt.MapClaims{"username": username, "revision": revision, "exp": time.Now().Add(t.ttl).Unix()}
//
// with golang-jwt/v5's NewWithClaims, whose header is {"alg", "typ": "JWT"};
// its info reads claims["username"].(string) and claims["revision"].(float64).
func TestJWTClaims(t *testing.T) {
	c := newTokClock()
	spec := fmt.Sprintf("jwt,priv-key=%s,sign-method=ES256,ttl=90s", writeTokPriv(t, tokKeys()["P256"].key, false))
	tok, err := newTestJWT(t, spec, c).Assign(Info{User: "alice", Revision: 1 << 40}, "", 5)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("token %q: %d parts", tok, len(parts))
	}
	decode := func(s string) map[string]any {
		b, err := base64.RawURLEncoding.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		d := json.NewDecoder(strings.NewReader(string(b)))
		d.UseNumber()
		var m map[string]any
		if err := d.Decode(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	if h, want := decode(parts[0]), map[string]any{"alg": "ES256", "typ": "JWT"}; !reflect.DeepEqual(h, want) {
		t.Errorf("header = %v, want %v", h, want)
	}
	want := map[string]any{
		"username": "alice",
		"revision": json.Number(fmt.Sprint(uint64(1 << 40))),
		"exp":      json.Number(fmt.Sprint(c.now().Add(90 * time.Second).Unix())),
	}
	if got := decode(parts[1]); !reflect.DeepEqual(got, want) {
		t.Errorf("claims = %v, want %v", got, want)
	}
}

// etcdGoldenToken was minted by etcd v3.7.3 itself (auth.NewTokenProvider
// with "jwt,pub-key=…,priv-key=…,sign-method=EdDSA,ttl=700000h", then
// AuthStore.Authenticate of root at auth revision 4), with the Ed25519 key
// whose seed is the bytes 0, 1, …, 31, from a throwaway module outside this
// one. Ed25519 signatures are deterministic, so kvd must mint the very same
// string for the same claims.
const etcdGoldenToken = "eyJhbGciOiJFZERTQSIsInR5cCI6IkpXVCJ9." +
	"eyJleHAiOjQzMTYxMzQ4OTcsInJldmlzaW9uIjo0LCJ1c2VybmFtZSI6InJvb3QifQ." +
	"woIGGbYt5JjMwhztxHxsw4nUE5PDe92yjOLHjkdOgR7ymn2HOFvLovmN0pKzzEa0v1CRq-G6GdxmZ4cG4Rb5Bw"

const etcdGoldenExp = 4316134897

func TestJWTEtcdGolden(t *testing.T) {
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = byte(i)
	}
	key := ed25519.NewKeyFromSeed(seed)
	c := &tokClock{t: time.Unix(etcdGoldenExp, 0).Add(-DefaultTokenTTL)}
	for name, spec := range map[string]string{
		"signer":      fmt.Sprintf("jwt,priv-key=%s,pub-key=%s,sign-method=EdDSA", writeTokPriv(t, key, false), writeTokPub(t, key)),
		"verify-only": fmt.Sprintf("jwt,pub-key=%s,sign-method=EdDSA", writeTokPub(t, key)),
	} {
		p := newTestJWT(t, spec, c)
		if info, ok := p.Info(etcdGoldenToken, 0); !ok || !reflect.DeepEqual(info, Info{User: "root", Revision: 4}) {
			t.Errorf("%s: etcd's token: Info = %+v, %v; want root at 4", name, info, ok)
		}
		if p.key.sign == nil {
			continue
		}
		if tok, err := p.Assign(Info{User: "root", Revision: 4}, "", 0); err != nil || tok != etcdGoldenToken {
			t.Errorf("%s: Assign = %q, %v;\nwant etcd's %q", name, tok, err, etcdGoldenToken)
		}
	}
	c.add(DefaultTokenTTL)
	p := newTestJWT(t, fmt.Sprintf("jwt,pub-key=%s,sign-method=EdDSA", writeTokPub(t, key)), c)
	if _, ok := p.Info(etcdGoldenToken, 0); ok {
		t.Error("etcd's token accepted at its exp")
	}
}
