package authz

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v5"
	"go.uber.org/zap"
)

var fuzzJWTSecret = []byte("fuzz-secret")

func fuzzJWT() *jwtTokens {
	now := func() time.Time { return time.Unix(1_700_000_000, 0) }
	return newJWTTokens(zap.NewNop(), jwtKey{method: jwt.SigningMethodHS256, sign: fuzzJWTSecret, verify: fuzzJWTSecret, ttl: time.Minute}, now)
}

// signHS256 signs header.payload as golang-jwt does, so fuzzed claims reach
// the claim checks behind the signature.
func signHS256(header, payload []byte) string {
	enc := base64.RawURLEncoding
	s := enc.EncodeToString(header) + "." + enc.EncodeToString(payload)
	m := hmac.New(sha256.New, fuzzJWTSecret)
	m.Write([]byte(s))
	return s + "." + enc.EncodeToString(m.Sum(nil))
}

// FuzzJWTInfo: a token from a client resolves to an identity or to nothing,
// never a panic, whether it is raw bytes or correctly signed fuzzed claims;
// and a token Assign makes resolves to the identity it was made for.
func FuzzJWTInfo(f *testing.F) {
	tk := fuzzJWT()
	tok, err := tk.Assign(Info{User: "alice", Revision: 7}, "", 0)
	if err != nil {
		f.Fatal(err)
	}
	parts := strings.Split(tok, ".")
	hdr, _ := base64.RawURLEncoding.DecodeString(parts[0])
	claims, _ := base64.RawURLEncoding.DecodeString(parts[1])
	f.Add(tok, hdr, claims, "alice", uint64(7), "", "")
	f.Add("", hdr, []byte(`{"username":"u","revision":1e300,"exp":1800000000}`), "", uint64(0), "oidc", "r1")
	f.Add("a.b.c", []byte(`{"alg":"none"}`), []byte(`{"username":"u","revision":-1,"kvd_via":"p","kvd_roles":[1]}`), "bob", uint64(1)<<53, "p", "")
	f.Add("x", hdr, []byte(`{"username":"u","revision":2,"exp":"soon","kvd_via":"p","kvd_roles":"r"}`), "", uint64(1), "", "")
	f.Fuzz(func(t *testing.T, raw string, header, payload []byte, user string, rev uint64, via, role string) {
		if len(raw) > 1<<16 || len(header)+len(payload) > 1<<16 {
			return
		}
		tk.Info(raw, 0)
		if who, ok := tk.Info(signHS256(header, payload), 0); ok && !utf8.ValidString(who.User) {
			t.Fatalf("signed claims resolved to user %q, not UTF-8", who.User)
		}
		// Round trip of what Assign signs. JSON carries valid UTF-8 only
		// (the API's proto3 strings are) and numbers exactly up to 2^53.
		if !utf8.ValidString(user) || !utf8.ValidString(via) || !utf8.ValidString(role) || rev > 1<<53 {
			return
		}
		in := Info{User: user, Revision: rev}
		if via != "" {
			in.Via, in.Roles = via, []string{role}
		}
		tok, err := tk.Assign(in, "", 0)
		if err != nil {
			t.Fatalf("Assign(%+v): %v", in, err)
		}
		out, ok := tk.Info(tok, 0)
		if !ok || out.User != in.User || out.Revision != in.Revision || out.Via != in.Via || !slices.Equal(out.Roles, in.Roles) {
			t.Fatalf("Assign(%+v) resolves to %+v, %v", in, out, ok)
		}
	})
}

// FuzzSimpleToken: a simple token from a client is parsed for its index
// without panicking, only tokens Assign made resolve, and the index read
// back is the one assigned.
func FuzzSimpleToken(f *testing.F) {
	s := newSimpleTokens(zap.NewNop(), time.Minute, time.Now, time.Hour)
	s.Enable()
	f.Cleanup(s.Close)
	prefix, err := s.Prefix()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(prefix+".12", uint64(12))
	f.Add("abc.18446744073709551615", uint64(1))
	f.Add("abc.-1", uint64(0))
	f.Add("a.b.c", uint64(3))
	f.Add("", uint64(0))
	f.Fuzz(func(t *testing.T, token string, index uint64) {
		if idx, ok := SimpleTokenIndex(token); ok {
			_, num, _ := strings.Cut(token, ".")
			if n, err := strconv.ParseUint(num, 10, 64); err != nil || n != idx || strings.Count(token, ".") != 1 {
				t.Fatalf("SimpleTokenIndex(%q) = %d: not a simple token", token, idx)
			}
		}
		if who, ok := s.Info(token, 5); ok {
			t.Fatalf("unassigned token %q resolved to %+v", token, who)
		}
		tok, err := s.Assign(Info{User: "u"}, prefix, index)
		if err != nil {
			return // already assigned in an earlier run
		}
		if idx, ok := SimpleTokenIndex(tok); !ok || idx != index {
			t.Fatalf("SimpleTokenIndex(%q) = %d, %v; assigned at %d", tok, idx, ok, index)
		}
		if who, ok := s.Info(tok, 5); !ok || who.User != "u" || who.Revision != 5 {
			t.Fatalf("Info(%q) = %+v, %v", tok, who, ok)
		}
		s.InvalidateUser("u")
	})
}

// FuzzParseKeys: the jwt key files (PEM from disk) parse to a key or an
// error for every method family.
func FuzzParseKeys(f *testing.F) {
	f.Add([]byte("-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIG3V\n-----END PRIVATE KEY-----\n"))
	f.Add([]byte("-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n"))
	f.Add([]byte("-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA\n-----END PUBLIC KEY-----\n"))
	f.Add([]byte("not pem"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, m := range []jwt.SigningMethod{jwt.SigningMethodRS256, jwt.SigningMethodPS256, jwt.SigningMethodES256, jwt.SigningMethodEdDSA} {
			if k, err := parsePrivateKey(m, data); err == nil {
				_ = checkCurve(m, k.Public())
			}
			if k, err := parsePublicKey(m, data); err == nil {
				_ = checkCurve(m, k)
			}
		}
	})
}
