package authz

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"go.uber.org/zap"
)

// The claims of a token, named as etcd's (server/auth/jwt.go assign), so
// that etcd and kvd accept each other's tokens given the same keys.
const (
	jwtClaimUser     = "username" // string
	jwtClaimRevision = "revision" // the auth revision, a JSON number
	jwtClaimExpires  = "exp"      // Unix seconds
	// kvd's own, for a user an authenticator plugin vouched for: the
	// plugin's name and the user's roles (etcd ignores them).
	jwtClaimVia   = "kvd_via"   // string
	jwtClaimRoles = "kvd_roles" // array of strings
)

// jwtTokens is etcd's "jwt" provider: self-contained signed tokens. It keeps
// no state, so Enable, Disable, InvalidateUser and Close do nothing; a
// token names the auth revision it was signed at, so any change to users or
// roles outdates it (the applier refuses an old revision).
type jwtTokens struct {
	lg     *zap.Logger
	key    jwtKey
	now    func() time.Time
	parser *jwt.Parser
	// foreign is set when authenticator plugins take the tokens kvd did
	// not sign.
	foreign atomic.Bool
}

func (t *jwtTokens) expectForeign() { t.foreign.Store(true) }

func newJWTTokens(lg *zap.Logger, key jwtKey, now func() time.Time) *jwtTokens {
	return &jwtTokens{
		lg:  lg,
		key: key,
		now: now,
		// Only the configured method: a token whose header names another
		// (say HS256 "signed" with the public key, or "none") is refused.
		parser: jwt.NewParser(jwt.WithValidMethods([]string{key.method.Alg()}), jwt.WithTimeFunc(now)),
	}
}

func (t *jwtTokens) Prefix() (string, error) { return "", nil }
func (t *jwtTokens) Enable()                 {}
func (t *jwtTokens) Disable()                {}
func (t *jwtTokens) InvalidateUser(string)   {}
func (t *jwtTokens) Close()                  {}

// Assign signs {username, revision, exp}; a verify-only provider refuses
// with ErrTokenVerifyOnly.
func (t *jwtTokens) Assign(who Info, _ string, _ uint64) (string, error) {
	if t.key.sign == nil {
		return "", ErrTokenVerifyOnly
	}
	user, rev := who.User, who.Revision
	claims := jwt.MapClaims{
		jwtClaimUser:     user,
		jwtClaimRevision: rev,
		jwtClaimExpires:  t.now().Add(t.key.ttl).Unix(),
	}
	if who.Via != "" {
		claims[jwtClaimVia] = who.Via
		claims[jwtClaimRoles] = who.Roles
	}
	token, err := jwt.NewWithClaims(t.key.method, claims).SignedString(t.key.sign)
	if err != nil {
		t.lg.Debug("failed to sign a JWT token",
			zap.String("user-name", user), zap.Uint64("revision", rev), zap.Error(err))
		return "", err
	}
	if ce := t.lg.Check(zap.DebugLevel, "created/assigned a new JWT token"); ce != nil {
		ce.Write(zap.String("user-name", user), zap.Uint64("revision", rev),
			zap.String("token-fingerprint", TokenFingerprint(token)))
	}
	return token, nil
}

// Info checks token's method, signature and, as etcd, its exp if it has
// one (etcd's tokens always do), and returns the user and revision it
// names; rev is not used.
func (t *jwtTokens) Info(token string, _ uint64) (Info, bool) {
	parsed, err := t.parser.Parse(token, func(*jwt.Token) (any, error) { return t.key.verify, nil })
	if err != nil {
		// With authenticator plugins, a token of another issuer is
		// expected here (the plugins are asked next): not a warning.
		lvl := zap.WarnLevel
		if t.foreign.Load() {
			lvl = zap.DebugLevel
		}
		t.lg.Log(lvl, "failed to parse a JWT token",
			zap.String("token-fingerprint", TokenFingerprint(token)), zap.Error(err))
		return Info{}, false
	}
	claims, ok := parsed.Claims.(jwt.MapClaims)
	if !ok || !parsed.Valid {
		t.lg.Warn("failed to obtain claims from a JWT token",
			zap.String("token-fingerprint", TokenFingerprint(token)))
		return Info{}, false
	}
	user, ok := claims[jwtClaimUser].(string)
	if !ok {
		t.lg.Warn("failed to obtain user claims from jwt token",
			zap.String("token-fingerprint", TokenFingerprint(token)))
		return Info{}, false
	}
	// A JSON number decodes to float64, as in etcd; a revision that is not
	// a whole number in uint64's range is refused (etcd would truncate it).
	rev, ok := claims[jwtClaimRevision].(float64)
	if !ok || rev < 0 || rev >= math.MaxUint64 || rev != math.Trunc(rev) {
		t.lg.Warn("failed to obtain revision claims from jwt token",
			zap.String("token-fingerprint", TokenFingerprint(token)))
		return Info{}, false
	}
	who := Info{User: user, Revision: uint64(rev)}
	if via, ok := claims[jwtClaimVia].(string); ok && via != "" {
		roles, ok := claims[jwtClaimRoles].([]any)
		if !ok && claims[jwtClaimRoles] != nil {
			t.lg.Warn("failed to obtain roles claims from jwt token",
				zap.String("token-fingerprint", TokenFingerprint(token)))
			return Info{}, false
		}
		who.Via = via
		for _, r := range roles {
			s, ok := r.(string)
			if !ok {
				return Info{}, false
			}
			who.Roles = append(who.Roles, s)
		}
	}
	return who, true
}
