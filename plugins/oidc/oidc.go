package main

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"
	"github.com/hashicorp/go-hclog"

	"github.com/kvd-dev/kvd/pkg/pluginsdk"
	"github.com/kvd-dev/kvd/plugins/internal/filewatch"
)

// reloadInterval is how often, at most, the JWKS file is stat'ed for
// changes on the call path.
const reloadInterval = time.Second

// signingAlgs are the asymmetric algorithms a token may be signed with.
// HMAC and "none" are never accepted: the keys here are public.
var signingAlgs = []string{
	oidc.RS256, oidc.RS384, oidc.RS512,
	oidc.ES256, oidc.ES384, oidc.ES512,
	oidc.PS256, oidc.PS384, oidc.PS512,
	oidc.EdDSA,
}

type config struct {
	issuer      string
	audience    string
	jwksFile    string
	jwksURL     string
	userClaim   string
	groupsClaim string
}

func (c config) validate() error {
	switch {
	case c.issuer == "":
		return errors.New("--issuer is required")
	case c.audience == "":
		return errors.New("--audience is required")
	case (c.jwksFile == "") == (c.jwksURL == ""):
		return errors.New("exactly one of --jwks-file and --jwks-url is required")
	case c.userClaim == "":
		return errors.New("--user-claim must not be empty")
	case c.groupsClaim == "":
		return errors.New("--groups-claim must not be empty")
	}
	if c.jwksURL != "" {
		u, err := url.Parse(c.jwksURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return fmt.Errorf("--jwks-url %q is not an http(s) URL", c.jwksURL)
		}
	}
	return nil
}

// authenticator verifies JWTs of one issuer (an OIDC provider's ID or
// access tokens) and abstains on every other credential.
type authenticator struct {
	cfg      config
	verifier *oidc.IDTokenVerifier
}

// newAuthenticator checks the configuration and, with --jwks-file, loads
// the keys; an error is a start-up error. now is the clock (nil: time.Now).
func newAuthenticator(cfg config, interval time.Duration, log hclog.Logger, now func() time.Time) (*authenticator, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var keys oidc.KeySet
	if cfg.jwksFile != "" {
		w := filewatch.New(cfg.jwksFile, interval, log, func(data []byte) ([]crypto.PublicKey, error) {
			return parseJWKS(data, log)
		})
		if err := w.Load(); err != nil {
			return nil, fmt.Errorf("--jwks-file: %w", err)
		}
		keys = fileKeySet{w}
	} else {
		// The remote set caches the keys and fetches them again when a
		// token names a key id it does not have (rotation).
		keys = oidc.NewRemoteKeySet(context.Background(), cfg.jwksURL)
	}
	v := oidc.NewVerifier(cfg.issuer, keys, &oidc.Config{
		ClientID:             cfg.audience,
		SupportedSigningAlgs: signingAlgs,
		Now:                  now,
	})
	return &authenticator{cfg: cfg, verifier: v}, nil
}

func (a *authenticator) Authenticate(ctx context.Context, c pluginsdk.Credential) (pluginsdk.Identity, error) {
	if c.Token == "" {
		return pluginsdk.Identity{}, pluginsdk.ErrAbstain
	}
	// The issuer is read unverified only to tell this issuer's tokens from
	// the others (kvd's own, other providers'), which are not ours to judge.
	if iss, ok := unverifiedIssuer(c.Token); !ok || iss != a.cfg.issuer {
		return pluginsdk.Identity{}, pluginsdk.ErrAbstain
	}
	tok, err := a.verifier.Verify(ctx, c.Token)
	if err != nil {
		return pluginsdk.Identity{}, verifyError(err)
	}
	var claims map[string]any
	if err := tok.Claims(&claims); err != nil {
		return pluginsdk.Identity{}, fmt.Errorf("cannot read the token's claims: %v", err)
	}
	user, _ := claims[a.cfg.userClaim].(string)
	if user == "" {
		return pluginsdk.Identity{}, fmt.Errorf("the token's %q claim (the user) is missing, empty or not a string", a.cfg.userClaim)
	}
	groups, err := groupsOf(claims[a.cfg.groupsClaim])
	if err != nil {
		return pluginsdk.Identity{}, fmt.Errorf("the token's %q claim (the groups) %v", a.cfg.groupsClaim, err)
	}
	return pluginsdk.Identity{User: user, Groups: groups, Expires: tok.Expiry}, nil
}

// unverifiedIssuer returns the "iss" of a compact JWS without checking
// anything else; ok is false when the token is not shaped like a JWT.
func unverifiedIssuer(token string) (iss string, ok bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "", false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", false
	}
	var claims struct {
		Iss any `json:"iss"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		return "", false
	}
	iss, ok = claims.Iss.(string)
	return iss, ok
}

// groupsOf reads a groups claim: an array of strings, a single string, or
// nothing.
func groupsOf(v any) ([]string, error) {
	switch g := v.(type) {
	case nil:
		return nil, nil
	case string:
		if g == "" {
			return nil, nil
		}
		return []string{g}, nil
	case []any:
		groups := make([]string, 0, len(g))
		for _, e := range g {
			s, ok := e.(string)
			if !ok {
				return nil, errors.New("holds something other than strings")
			}
			if s != "" {
				groups = append(groups, s)
			}
		}
		return groups, nil
	default:
		return nil, errors.New("is neither a string nor an array of strings")
	}
}

// verifyError turns go-oidc's error into a short reason for kvd's log. The
// library's texts never hold the token; the known cases get plain words.
func verifyError(err error) error {
	var expired *oidc.TokenExpiredError
	msg := err.Error()
	switch {
	case errors.As(err, &expired) && expired.Expiry.IsZero():
		return errors.New("token has no exp claim")
	case errors.As(err, &expired):
		return fmt.Errorf("token expired at %s", expired.Expiry.UTC().Format(time.RFC3339))
	case strings.Contains(msg, "expected audience"):
		return errors.New("audience mismatch: " + msg)
	case strings.Contains(msg, "unexpected signature algorithm"):
		return errors.New("unsupported signing algorithm")
	case strings.Contains(msg, "malformed jwt"):
		return errors.New("malformed token")
	case strings.Contains(msg, "fetching keys"):
		return errors.New("cannot fetch the JWKS to check the signature: " + msg)
	case strings.Contains(msg, "failed to verify signature"):
		return errors.New("bad signature (no key of the issuer verifies it)")
	case strings.Contains(msg, "nbf"):
		return errors.New("token not valid yet (nbf)")
	default:
		return errors.New("token rejected: " + msg)
	}
}

// fileKeySet is go-oidc's StaticKeySet over the current contents of the
// JWKS file.
type fileKeySet struct {
	w *filewatch.File[[]crypto.PublicKey]
}

func (s fileKeySet) VerifySignature(ctx context.Context, jwt string) ([]byte, error) {
	payload, err := (&oidc.StaticKeySet{PublicKeys: s.w.Get()}).VerifySignature(ctx, jwt)
	if err == nil {
		return payload, nil
	}
	// Maybe signed with a key the file got since the last look.
	if keys, changed := s.w.Recheck(); changed {
		return (&oidc.StaticKeySet{PublicKeys: keys}).VerifySignature(ctx, jwt)
	}
	return nil, err
}

// parseJWKS reads a JSON Web Key Set ({"keys": [...]}) into the public
// keys that may sign tokens. Keys it cannot use (encryption keys,
// symmetric or unknown kinds) are skipped with a warning; a set with no
// usable key is an error.
func parseJWKS(data []byte, log hclog.Logger) ([]crypto.PublicKey, error) {
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, fmt.Errorf("not a JWKS: %v", err)
	}
	var keys []crypto.PublicKey
	for i, raw := range set.Keys {
		var k jose.JSONWebKey
		if err := k.UnmarshalJSON(raw); err != nil {
			// One key of a kind go-jose does not know must not hide the others.
			log.Warn("skipping a JWKS key that cannot be read", "index", i, "error", err)
			continue
		}
		if k.Use == "enc" {
			continue
		}
		if !k.IsPublic() {
			log.Warn("the JWKS holds a private key: only its public part is used", "index", i, "kid", k.KeyID)
			k = k.Public()
		}
		switch k.Key.(type) {
		case *rsa.PublicKey, *ecdsa.PublicKey, ed25519.PublicKey:
			keys = append(keys, k.Key)
		default:
			log.Warn("skipping a JWKS key that cannot verify signatures", "index", i, "kid", k.KeyID)
		}
	}
	if len(keys) == 0 {
		return nil, errors.New("no signing key in the JWKS")
	}
	return keys, nil
}
