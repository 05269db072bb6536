package authz

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"go.uber.org/zap"
)

// The errors of NewTokens and of the providers carry etcd's texts (etcd's
// names in the comments), so an operator who knows etcd's messages
// recognises them; NewTokens wraps them with the option at fault.
var (
	// ErrTokenOptions is etcd's ErrInvalidAuthOpts: the --auth-token value
	// cannot be parsed or names an option or token type that does not exist.
	ErrTokenOptions = errors.New("auth: invalid auth options")
	// ErrTokenSignMethod is etcd's ErrInvalidAuthMethod: sign-method is
	// missing or not one etcd accepts.
	ErrTokenSignMethod = errors.New("auth: invalid auth signature method")
	// ErrTokenMissingKey is etcd's ErrMissingKey: neither priv-key nor
	// pub-key is given.
	ErrTokenMissingKey = errors.New("auth: missing key data")
	// ErrTokenKeyMismatch is etcd's ErrKeyMismatch: pub-key is not the
	// public half of priv-key.
	ErrTokenKeyMismatch = errors.New("auth: public and private keys don't match")
	// ErrTokenVerifyOnly is etcd's ErrVerifyOnly: Assign on a JWT provider
	// given only a pub-key.
	ErrTokenVerifyOnly = errors.New("auth: token signing attempted with verify-only key")
	// ErrNopTokens is what Assign returns for an empty --auth-token: etcd's
	// ErrAuthFailed text, which is what etcd's Authenticate then fails with.
	ErrNopTokens = errors.New("auth: authentication failed, invalid user ID or password")
)

// The token types and JWT options of --auth-token, named as in etcd.
const (
	tokenKindSimple = "simple"
	tokenKindJWT    = "jwt"

	jwtOptSignMethod = "sign-method"
	jwtOptPubKey     = "pub-key"
	jwtOptPrivKey    = "priv-key"
	jwtOptTTL        = "ttl"
)

// jwtSignMethods are the sign-method values etcd accepts (those
// golang-jwt registers, less "none", which etcd refuses as unsupported).
var jwtSignMethods = map[string]jwt.SigningMethod{
	"RS256": jwt.SigningMethodRS256,
	"RS384": jwt.SigningMethodRS384,
	"RS512": jwt.SigningMethodRS512,
	"PS256": jwt.SigningMethodPS256,
	"PS384": jwt.SigningMethodPS384,
	"PS512": jwt.SigningMethodPS512,
	"ES256": jwt.SigningMethodES256,
	"ES384": jwt.SigningMethodES384,
	"ES512": jwt.SigningMethodES512,
	"EdDSA": jwt.SigningMethodEdDSA,
	// HMAC: priv-key is the file whose bytes, as they are, are the secret.
	"HS256": jwt.SigningMethodHS256,
	"HS384": jwt.SigningMethodHS384,
	"HS512": jwt.SigningMethodHS512,
}

// jwtSignMethodNames lists jwtSignMethods for error messages.
func jwtSignMethodNames() string {
	names := make([]string, 0, len(jwtSignMethods))
	for n := range jwtSignMethods {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// NewTokens makes the token provider of an --auth-token value, parsed as
// etcd parses it:
//
//	simple
//	jwt,pub-key=FILE,priv-key=FILE,sign-method=METHOD[,ttl=DURATION]
//
// METHOD is RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, ES512,
// EdDSA, or HS256, HS384, HS512 (whose secret is priv-key's bytes). A JWT
// lives DefaultTokenTTL unless ttl says otherwise. With pub-key alone the
// provider only verifies tokens (those another member or etcd signed with
// the private key). An empty value is etcd's "no tokens": Authenticate
// always fails with ErrNopTokens.
//
// ttl is --auth-token-ttl: how long a simple token lives after its last use
// (300 s when zero, as in etcd). The provider starts disabled; call Close
// when done with it.
//
// Unlike etcd, which only warns, NewTokens refuses an option the token type
// does not take (a misspelt "tll=10m" is not silently ignored), and a ttl
// that is not positive, which would make every JWT born expired.
func NewTokens(spec string, ttl time.Duration, lg *zap.Logger) (Tokens, error) {
	return newTokens(spec, ttl, lg, time.Now)
}

// newTokens is NewTokens with the clock injected.
func newTokens(spec string, ttl time.Duration, lg *zap.Logger, now func() time.Time) (Tokens, error) {
	if lg == nil {
		lg = zap.NewNop()
	}
	kind, opts, err := splitTokenSpec(spec)
	if err != nil {
		return nil, err
	}
	switch kind {
	case "":
		if err := noTokenOptions("empty", opts); err != nil {
			return nil, err
		}
		lg.Warn("auth-token is empty: no token is ever issued, so every Authenticate fails (as in etcd)")
		return nopTokens{}, nil
	case tokenKindSimple:
		if err := noTokenOptions(tokenKindSimple, opts); err != nil {
			return nil, err
		}
		lg.Warn("simple token is not cryptographically signed")
		return newSimpleTokens(lg, ttl, now, simpleTokenSweepEvery), nil
	case tokenKindJWT:
		k, err := parseJWTOptions(opts)
		if err != nil {
			return nil, err
		}
		return newJWTTokens(lg, k, now), nil
	default:
		return nil, fmt.Errorf("%w: unknown token type %q (want %q or %q)", ErrTokenOptions, kind, tokenKindSimple, tokenKindJWT)
	}
}

// splitTokenSpec splits "type,name=value,..." as etcd's decomposeOpts does:
// no trimming, every option exactly one "=", no option twice, an empty
// value allowed (and taken as absent).
func splitTokenSpec(spec string) (kind string, opts map[string]string, err error) {
	parts := strings.Split(spec, ",")
	opts = make(map[string]string, len(parts)-1)
	for _, p := range parts[1:] {
		if p == "" {
			return "", nil, fmt.Errorf("%w: an empty option (a stray comma?)", ErrTokenOptions)
		}
		kv := strings.Split(p, "=")
		if len(kv) != 2 {
			return "", nil, fmt.Errorf("%w: option %q is not of the form name=value", ErrTokenOptions, p)
		}
		if _, dup := opts[kv[0]]; dup {
			return "", nil, fmt.Errorf("%w: option %q is given twice", ErrTokenOptions, kv[0])
		}
		opts[kv[0]] = kv[1]
	}
	return parts[0], opts, nil
}

// noTokenOptions refuses any option for a token type that takes none.
func noTokenOptions(kind string, opts map[string]string) error {
	if len(opts) == 0 {
		return nil
	}
	return fmt.Errorf("%w: the %s token type takes no options, got %s", ErrTokenOptions, kind, optionNames(opts))
}

func optionNames(opts map[string]string) string {
	names := make([]string, 0, len(opts))
	for n := range opts {
		names = append(names, fmt.Sprintf("%q", n))
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// jwtKey is what parseJWTOptions makes of the jwt options.
type jwtKey struct {
	method jwt.SigningMethod
	sign   any // nil for a verify-only provider
	verify any
	ttl    time.Duration
}

// parseJWTOptions checks the options of "jwt" and loads its keys.
func parseJWTOptions(opts map[string]string) (jwtKey, error) {
	var unknown []string
	for n := range opts {
		switch n {
		case jwtOptSignMethod, jwtOptPubKey, jwtOptPrivKey, jwtOptTTL:
		default:
			unknown = append(unknown, n)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return jwtKey{}, fmt.Errorf("%w: unknown jwt option %q (jwt takes %s, %s, %s and %s)", ErrTokenOptions,
			unknown[0], jwtOptSignMethod, jwtOptPubKey, jwtOptPrivKey, jwtOptTTL)
	}

	var k jwtKey
	name := opts[jwtOptSignMethod]
	if name == "" {
		return jwtKey{}, fmt.Errorf("%w: %s is missing (want one of %s): %w", ErrTokenOptions, jwtOptSignMethod, jwtSignMethodNames(), ErrTokenSignMethod)
	}
	k.method = jwtSignMethods[name]
	if k.method == nil {
		return jwtKey{}, fmt.Errorf("%w: %s %q is not one of %s: %w", ErrTokenOptions, jwtOptSignMethod, name, jwtSignMethodNames(), ErrTokenSignMethod)
	}

	k.ttl = DefaultTokenTTL
	if s := opts[jwtOptTTL]; s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			return jwtKey{}, fmt.Errorf("%w: %s %q: %w", ErrTokenOptions, jwtOptTTL, s, err)
		}
		if d <= 0 {
			return jwtKey{}, fmt.Errorf("%w: %s %q is not positive", ErrTokenOptions, jwtOptTTL, s)
		}
		k.ttl = d
	}

	privFile, pubFile := opts[jwtOptPrivKey], opts[jwtOptPubKey]
	var privPEM, pubPEM []byte
	var err error
	if privFile != "" {
		if privPEM, err = os.ReadFile(privFile); err != nil {
			return jwtKey{}, fmt.Errorf("%w: %s: %w", ErrTokenOptions, jwtOptPrivKey, err)
		}
	}
	if pubFile != "" {
		if pubPEM, err = os.ReadFile(pubFile); err != nil {
			return jwtKey{}, fmt.Errorf("%w: %s: %w", ErrTokenOptions, jwtOptPubKey, err)
		}
	}

	if _, hmac := k.method.(*jwt.SigningMethodHMAC); hmac {
		// As etcd: the secret is priv-key's bytes as they are; pub-key is
		// not used.
		if len(privPEM) == 0 {
			return jwtKey{}, fmt.Errorf("%w: %s %s needs %s, the file holding the shared secret", ErrTokenMissingKey, jwtOptSignMethod, name, jwtOptPrivKey)
		}
		k.sign, k.verify = privPEM, privPEM
		return k, nil
	}

	var priv crypto.Signer
	var pub crypto.PublicKey
	if len(privPEM) > 0 {
		if priv, err = parsePrivateKey(k.method, privPEM); err != nil {
			return jwtKey{}, fmt.Errorf("%w: %s %q is not a private key for %s %s: %w", ErrTokenOptions, jwtOptPrivKey, privFile, jwtOptSignMethod, name, err)
		}
		if err := checkCurve(k.method, priv.Public()); err != nil {
			return jwtKey{}, fmt.Errorf("%w: %s %q: %w", ErrTokenOptions, jwtOptPrivKey, privFile, err)
		}
	}
	if len(pubPEM) > 0 {
		if pub, err = parsePublicKey(k.method, pubPEM); err != nil {
			return jwtKey{}, fmt.Errorf("%w: %s %q is not a public key for %s %s: %w", ErrTokenOptions, jwtOptPubKey, pubFile, jwtOptSignMethod, name, err)
		}
		if err := checkCurve(k.method, pub); err != nil {
			return jwtKey{}, fmt.Errorf("%w: %s %q: %w", ErrTokenOptions, jwtOptPubKey, pubFile, err)
		}
	}
	switch {
	case priv == nil && pub == nil:
		return jwtKey{}, fmt.Errorf("%w: %s %s needs %s (and %s), or %s alone to only verify tokens", ErrTokenMissingKey,
			jwtOptSignMethod, name, jwtOptPrivKey, jwtOptPubKey, jwtOptPubKey)
	case priv == nil:
		k.verify = pub
	default:
		if eq, ok := pub.(interface{ Equal(crypto.PublicKey) bool }); pub != nil && (!ok || !eq.Equal(priv.Public())) {
			return jwtKey{}, fmt.Errorf("%w: %s %q is not the public half of %s %q", ErrTokenKeyMismatch, jwtOptPubKey, pubFile, jwtOptPrivKey, privFile)
		}
		k.sign, k.verify = priv, priv.Public()
	}
	return k, nil
}

// parsePrivateKey reads a PEM private key of method's family with
// golang-jwt's parsers, so kvd accepts the same encodings as etcd.
func parsePrivateKey(method jwt.SigningMethod, data []byte) (crypto.Signer, error) {
	switch method.(type) {
	case *jwt.SigningMethodRSA, *jwt.SigningMethodRSAPSS:
		return jwt.ParseRSAPrivateKeyFromPEM(data)
	case *jwt.SigningMethodECDSA:
		return jwt.ParseECPrivateKeyFromPEM(data)
	case *jwt.SigningMethodEd25519:
		k, err := jwt.ParseEdPrivateKeyFromPEM(data)
		if err != nil {
			return nil, err
		}
		ed, ok := k.(ed25519.PrivateKey)
		if !ok {
			return nil, jwt.ErrNotEdPrivateKey
		}
		return ed, nil
	}
	return nil, fmt.Errorf("unsupported signing method %s", method.Alg())
}

// parsePublicKey is parsePrivateKey for public keys.
func parsePublicKey(method jwt.SigningMethod, data []byte) (crypto.PublicKey, error) {
	switch method.(type) {
	case *jwt.SigningMethodRSA, *jwt.SigningMethodRSAPSS:
		return jwt.ParseRSAPublicKeyFromPEM(data)
	case *jwt.SigningMethodECDSA:
		return jwt.ParseECPublicKeyFromPEM(data)
	case *jwt.SigningMethodEd25519:
		k, err := jwt.ParseEdPublicKeyFromPEM(data)
		if err != nil {
			return nil, err
		}
		ed, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, jwt.ErrNotEdPublicKey
		}
		return ed, nil
	}
	return nil, fmt.Errorf("unsupported signing method %s", method.Alg())
}

// checkCurve refuses an ECDSA key on another curve than the method's (an
// ES256 token needs P-256). etcd starts with such a key and then fails
// every Authenticate (or refuses every token); kvd says so at start-up.
func checkCurve(method jwt.SigningMethod, pub crypto.PublicKey) error {
	m, ok := method.(*jwt.SigningMethodECDSA)
	if !ok {
		return nil
	}
	var want elliptic.Curve
	switch m.CurveBits {
	case 256:
		want = elliptic.P256()
	case 384:
		want = elliptic.P384()
	case 521:
		want = elliptic.P521()
	}
	k, ok := pub.(*ecdsa.PublicKey)
	if !ok || want == nil {
		return fmt.Errorf("not an ECDSA key for %s", m.Alg())
	}
	if k.Curve != want {
		return fmt.Errorf("the key is on curve %s, %s %s needs %s", k.Curve.Params().Name, jwtOptSignMethod, m.Alg(), want.Params().Name)
	}
	return nil
}
