package authz

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestNewTokensKinds(t *testing.T) {
	keys := tokKeys()
	priv := writeTokPriv(t, keys["Ed"].key, false)
	for _, tc := range []struct {
		spec string
		want string // the provider's type
		ttl  time.Duration
	}{
		{"simple", "*authz.simpleTokens", 0},
		{"jwt,priv-key=" + priv + ",sign-method=EdDSA", "*authz.jwtTokens", DefaultTokenTTL},
		{"jwt,sign-method=EdDSA,priv-key=" + priv + ",ttl=90s", "*authz.jwtTokens", 90 * time.Second},
		{"jwt,sign-method=EdDSA,priv-key=" + priv + ",ttl=", "*authz.jwtTokens", DefaultTokenTTL},
		{"jwt,sign-method=EdDSA,priv-key=" + priv + ",pub-key=", "*authz.jwtTokens", DefaultTokenTTL},
		{"", "authz.nopTokens", 0},
	} {
		tk, err := NewTokens(tc.spec, time.Minute, nil)
		if err != nil {
			t.Errorf("NewTokens(%q): %v", tc.spec, err)
			continue
		}
		if got := fmt.Sprintf("%T", tk); got != tc.want {
			t.Errorf("NewTokens(%q) = %s, want %s", tc.spec, got, tc.want)
		}
		if j, ok := tk.(*jwtTokens); ok && j.key.ttl != tc.ttl {
			t.Errorf("NewTokens(%q): ttl %v, want %v", tc.spec, j.key.ttl, tc.ttl)
		}
		tk.Close()
	}

	// etcd's empty --auth-token mints nothing and resolves nothing.
	nop, _ := NewTokens("", 0, nil)
	nop.Enable()
	if p, err := nop.Prefix(); p != "" || err != nil {
		t.Errorf("nop Prefix = %q, %v", p, err)
	}
	if _, err := nop.Assign(Info{User: "root", Revision: 1}, "", 1); !errors.Is(err, ErrNopTokens) ||
		err.Error() != "auth: authentication failed, invalid user ID or password" {
		t.Errorf("nop Assign: %v, want etcd's ErrAuthFailed", err)
	}
	if _, ok := nop.Info("abcdefghijklmnop.1", 1); ok {
		t.Error("nop Info resolves")
	}
}

func TestNewTokensErrors(t *testing.T) {
	keys := tokKeys()
	rsaPriv, rsaPub := writeTokPriv(t, keys["RSA"].key, false), writeTokPub(t, keys["RSA"].key)
	rsaOtherPub := writeTokPub(t, keys["RSA"].other)
	p256Priv, p256Pub := writeTokPriv(t, keys["P256"].key, false), writeTokPub(t, keys["P256"].key)
	p256OtherPub := writeTokPub(t, keys["P256"].other)
	p384Priv, p384Pub := writeTokPriv(t, keys["P384"].key, false), writeTokPub(t, keys["P384"].key)
	edPriv, edOtherPub := writeTokPriv(t, keys["Ed"].key, false), writeTokPub(t, keys["Ed"].other)
	garbage := writeTokFile(t, "priv", []byte("not a key\n"))
	missing := t.TempDir() + "/missing.pem"

	for _, tc := range []struct {
		name string
		spec string
		is   []error  // errors.Is each
		has  []string // in the message: the option at fault
	}{
		{"unknown type", "bogus", []error{ErrTokenOptions}, []string{`unknown token type "bogus"`}},
		{"type is case-sensitive", "JWT,sign-method=RS256,priv-key=" + rsaPriv, []error{ErrTokenOptions}, []string{`"JWT"`}},
		{"space before the type", " simple", []error{ErrTokenOptions}, []string{`" simple"`}},
		{"simple takes no options", "simple,ttl=5m", []error{ErrTokenOptions}, []string{`"ttl"`}},
		{"empty takes no options", ",ttl=5m", []error{ErrTokenOptions}, []string{`"ttl"`}},
		{"no value", "jwt,priv-key", []error{ErrTokenOptions}, []string{`"priv-key"`, "name=value"}},
		{"two =", "jwt,priv-key=a=b", []error{ErrTokenOptions}, []string{`"priv-key=a=b"`}},
		{"trailing comma", "jwt,sign-method=RS256,priv-key=" + rsaPriv + ",", []error{ErrTokenOptions}, []string{"empty option"}},
		{"given twice", "jwt,sign-method=RS256,sign-method=RS384", []error{ErrTokenOptions}, []string{`"sign-method" is given twice`}},
		{"unknown option", "jwt,sign-method=RS256,priv-key=" + rsaPriv + ",tll=5m", []error{ErrTokenOptions}, []string{`unknown jwt option "tll"`}},
		{"no sign-method", "jwt,priv-key=" + rsaPriv, []error{ErrTokenOptions, ErrTokenSignMethod}, []string{"sign-method is missing"}},
		{"sign-method is case-sensitive", "jwt,sign-method=rs256,priv-key=" + rsaPriv, []error{ErrTokenOptions, ErrTokenSignMethod}, []string{`sign-method "rs256"`}},
		{"sign-method none", "jwt,sign-method=none,priv-key=" + rsaPriv, []error{ErrTokenOptions, ErrTokenSignMethod}, []string{`sign-method "none"`}},
		{"ttl not a duration", "jwt,sign-method=RS256,priv-key=" + rsaPriv + ",ttl=5", []error{ErrTokenOptions}, []string{`ttl "5"`}},
		{"ttl zero", "jwt,sign-method=RS256,priv-key=" + rsaPriv + ",ttl=0s", []error{ErrTokenOptions}, []string{`ttl "0s" is not positive`}},
		{"ttl negative", "jwt,sign-method=RS256,priv-key=" + rsaPriv + ",ttl=-1m", []error{ErrTokenOptions}, []string{`ttl "-1m"`}},
		{"priv-key missing", "jwt,sign-method=RS256,priv-key=" + missing, []error{ErrTokenOptions, fs.ErrNotExist}, []string{"priv-key", missing}},
		{"pub-key missing", "jwt,sign-method=RS256,pub-key=" + missing, []error{ErrTokenOptions, fs.ErrNotExist}, []string{"pub-key", missing}},
		{"no key", "jwt,sign-method=RS256", []error{ErrTokenMissingKey}, []string{"priv-key", "pub-key"}},
		{"no key, empty values", "jwt,sign-method=ES256,priv-key=,pub-key=", []error{ErrTokenMissingKey}, []string{"priv-key"}},
		{"HMAC without its secret", "jwt,sign-method=HS256,pub-key=" + rsaPub, []error{ErrTokenMissingKey}, []string{"priv-key"}},
		{"priv-key not a key", "jwt,sign-method=RS256,priv-key=" + garbage, []error{ErrTokenOptions}, []string{"priv-key", garbage}},
		{"pub-key not a key", "jwt,sign-method=EdDSA,pub-key=" + garbage, []error{ErrTokenOptions}, []string{"pub-key", garbage}},
		{"RSA method, EC key", "jwt,sign-method=RS256,priv-key=" + p256Priv, []error{ErrTokenOptions}, []string{"priv-key", p256Priv}},
		{"EdDSA method, RSA key", "jwt,sign-method=EdDSA,priv-key=" + rsaPriv, []error{ErrTokenOptions}, []string{"priv-key", rsaPriv}},
		{"ECDSA method, RSA pub-key", "jwt,sign-method=ES256,pub-key=" + rsaPub, []error{ErrTokenOptions}, []string{"pub-key", rsaPub}},
		{"ES256 with a P-384 priv-key", "jwt,sign-method=ES256,priv-key=" + p384Priv, []error{ErrTokenOptions}, []string{"priv-key", "P-384", "P-256"}},
		{"ES384 with a P-256 pub-key", "jwt,sign-method=ES384,pub-key=" + p256Pub, []error{ErrTokenOptions}, []string{"pub-key", "P-256", "P-384"}},
		{"ES256 with a P-384 pub-key", "jwt,sign-method=ES256,priv-key=" + p256Priv + ",pub-key=" + p384Pub, []error{ErrTokenOptions}, []string{"pub-key", "P-384"}},
		{"RSA keys that don't match", "jwt,sign-method=PS256,priv-key=" + rsaPriv + ",pub-key=" + rsaOtherPub, []error{ErrTokenKeyMismatch}, []string{"pub-key", rsaOtherPub, rsaPriv}},
		{"EC keys that don't match", "jwt,sign-method=ES256,priv-key=" + p256Priv + ",pub-key=" + p256OtherPub, []error{ErrTokenKeyMismatch}, []string{"pub-key", p256OtherPub}},
		{"Ed25519 keys that don't match", "jwt,sign-method=EdDSA,priv-key=" + edPriv + ",pub-key=" + edOtherPub, []error{ErrTokenKeyMismatch}, []string{"pub-key", edOtherPub}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tk, err := NewTokens(tc.spec, 0, nil)
			if err == nil {
				tk.Close()
				t.Fatalf("NewTokens(%q): no error", tc.spec)
			}
			t.Log(err)
			for _, target := range tc.is {
				if !errors.Is(err, target) {
					t.Errorf("error %q is not %q", err, target)
				}
			}
			// The first sentinel is etcd's error for the case: its text
			// starts the message.
			if !strings.HasPrefix(err.Error(), tc.is[0].Error()) && tc.is[0] != fs.ErrNotExist {
				t.Errorf("error %q does not start with etcd's %q", err, tc.is[0])
			}
			for _, s := range tc.has {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not name %q", err, s)
				}
			}
		})
	}
}

func TestTokenFingerprint(t *testing.T) {
	const tok = "abcdefghijklmnop.42"
	sum := sha256.Sum256([]byte(tok))
	if got, want := TokenFingerprint(tok), hex.EncodeToString(sum[:])[:12]; got != want {
		t.Fatalf("TokenFingerprint = %q, want etcd's redactToken %q", got, want)
	}
}

// TestTokensLogNoToken runs every path that logs, at debug level, and looks
// for the tokens in the lines.
func TestTokensLogNoToken(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	lg := zap.New(core)
	c := newTokClock()
	var secrets []string

	tk, err := newTokens("simple", time.Second, lg, c.now)
	if err != nil {
		t.Fatal(err)
	}
	s := tk.(*simpleTokens)
	s.Enable()
	for i, user := range []string{"alice", "bob", "carol"} {
		tok, err := s.Assign(Info{User: user, Revision: 1}, "abcdefghijklmnop", uint64(i))
		if err != nil {
			t.Fatal(err)
		}
		secrets = append(secrets, tok)
	}
	s.Assign(Info{User: "alice", Revision: 1}, "abcdefghijklmnop", 0) // assigned twice: logged
	s.Info(secrets[0], 1)
	s.InvalidateUser("bob")
	c.add(2 * time.Second)
	s.Info(secrets[0], 1) // expired at Info
	s.sweep()             // expired at the sweep
	s.Close()

	priv := writeTokPriv(t, tokKeys()["HMAC"].key, false)
	tk, err = newTokens("jwt,sign-method=HS256,priv-key="+priv, 0, lg, c.now)
	if err != nil {
		t.Fatal(err)
	}
	jt, err := tk.Assign(Info{User: "alice", Revision: 1}, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	secrets = append(secrets, jt, string(tokKeys()["HMAC"].key.([]byte)))
	tk.Info(jt, 0)
	parts := strings.Split(jt, ".")
	tk.Info(parts[0]+"."+parts[1]+".AAAA", 0)                          // bad signature
	tk.Info(signTok(t, jwtSignMethods["HS256"], tokKeys()["HMAC"].key, // no username
		map[string]any{"revision": 1, "exp": c.now().Add(time.Minute).Unix()}), 0)
	c.add(DefaultTokenTTL + time.Second)
	tk.Info(jt, 0) // expired

	if logs.Len() < 6 {
		t.Fatalf("only %d log lines: the paths that log were not taken", logs.Len())
	}
	for _, e := range logs.All() {
		line := e.Message
		for k, v := range e.ContextMap() {
			line += fmt.Sprintf(" %s=%v", k, v)
		}
		for _, secret := range secrets {
			if strings.Contains(line, strings.TrimSpace(secret)) {
				t.Errorf("log line %q has a token or key", line)
			}
		}
		for _, part := range parts {
			if strings.Contains(line, part) {
				t.Errorf("log line %q has part of a JWT", line)
			}
		}
	}
}
