package authz

import (
	"math"
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
}

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
func (t *jwtTokens) Assign(user string, rev uint64, _ string, _ uint64) (string, error) {
	if t.key.sign == nil {
		return "", ErrTokenVerifyOnly
	}
	token, err := jwt.NewWithClaims(t.key.method, jwt.MapClaims{
		jwtClaimUser:     user,
		jwtClaimRevision: rev,
		jwtClaimExpires:  t.now().Add(t.key.ttl).Unix(),
	}).SignedString(t.key.sign)
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
		t.lg.Warn("failed to parse a JWT token",
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
	return Info{User: user, Revision: uint64(rev)}, true
}
