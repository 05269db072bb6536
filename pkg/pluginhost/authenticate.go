package pluginhost

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.uber.org/zap"
	grpccodes "google.golang.org/grpc/codes"

	"github.com/kvd-dev/kvd/pkg/authz"
	pb "github.com/kvd-dev/kvd/pkg/pluginsdk/authpluginpb"
)

// Identity is who an authenticator says a caller is. Groups name kvd roles;
// Plugin is the authenticator that said so.
type Identity struct {
	User    string
	Groups  []string
	Plugin  string
	Expires time.Time
}

// Password asks the authenticators, in order, about a user name and
// password. ok is false when none claimed the user (kvd's own users
// decide). An authenticator's rejection is etcd's "authentication failed";
// a failing plugin under on-failure: deny is an Unauthenticated error
// naming it.
func (h *Host) Password(ctx context.Context, user, password string) (id Identity, ok bool, err error) {
	req := &pb.AuthenticateRequest{Credential: &pb.AuthenticateRequest_Password{Password: &pb.PasswordCredential{User: user, Password: password}}}
	return h.authenticate(ctx, req, rpctypes.ErrGRPCAuthFailed, zap.String("user-name", user))
}

// Token asks the authenticators, in order, about a token kvd did not mint.
// An accepted token is remembered (by its hash) for the accepting plugin's
// cache-ttl, never past its expiry. The cache keeps the token's SHA-256,
// never the token; logs show the hash's first 6 bytes, as authz logs it. ok is false when none claimed it; a
// rejection is etcd's "invalid auth token".
func (h *Host) Token(ctx context.Context, token string) (id Identity, ok bool, err error) {
	if !h.HasAuthenticators() {
		return Identity{}, false, nil
	}
	key := sha256.Sum256([]byte(token))
	now := time.Now()
	for _, p := range h.authenticators {
		if id, ok := p.tokens.get(key, 0, now); ok {
			p.hits.Inc()
			return id, true, nil
		}
	}
	req := &pb.AuthenticateRequest{Credential: &pb.AuthenticateRequest_Token{Token: token}}
	id, ok, err = h.authenticate(ctx, req, rpctypes.ErrGRPCInvalidAuthToken, zap.String("token-fingerprint", hex.EncodeToString(key[:6])))
	if ok && err == nil {
		p := h.byName(id.Plugin)
		if ttl := p.spec.CacheTTL; ttl > 0 {
			exp := now.Add(ttl)
			if !id.Expires.IsZero() && id.Expires.Before(exp) {
				exp = id.Expires
			}
			p.tokens.put(key, id, 0, exp)
		}
	}
	return id, ok, err
}

func (h *Host) byName(name string) *proc {
	for _, p := range h.authenticators {
		if p.spec.Name == name {
			return p
		}
	}
	return nil
}

func (h *Host) authenticate(ctx context.Context, req *pb.AuthenticateRequest, rejected error, who zap.Field) (Identity, bool, error) {
	if h == nil {
		return Identity{}, false, nil
	}
	for _, p := range h.authenticators {
		var resp *pb.AuthenticateResponse
		_, err := h.call(ctx, p, "authenticate", func(ctx context.Context, r *running) (string, error) {
			var err error
			resp, err = r.authn.Authenticate(ctx, req)
			if err != nil {
				return "", err
			}
			return decisionLabel(resp), nil
		})
		if err != nil {
			if ctx.Err() != nil {
				return Identity{}, false, rpctypes.ErrGRPCCanceled
			}
			if p.spec.OnFailure == OnFailureSkip {
				p.lg.Warn("auth plugin failed; skipped (on-failure: skip)", who, zap.Error(err))
				continue
			}
			p.lg.Warn("auth plugin failed; denied (on-failure: deny)", who, zap.Error(err))
			return Identity{}, false, failure(p, grpccodes.Unauthenticated, err)
		}
		switch resp.GetDecision() {
		case pb.Decision_DECISION_ABSTAIN:
			continue
		case pb.Decision_DECISION_ACCEPT:
			id, err := identity(p, resp)
			if err != nil {
				p.lg.Warn("auth plugin accepted a credential with an unusable identity; rejected", who, zap.Error(err))
				return Identity{}, false, rejected
			}
			return id, true, nil
		default:
			reason := resp.GetReason()
			if resp.GetDecision() != pb.Decision_DECISION_REJECT {
				reason = fmt.Sprintf("unknown decision %d", resp.GetDecision())
			}
			p.lg.Info("auth plugin rejected a credential", who, zap.String("reason", reason))
			return Identity{}, false, rejected
		}
	}
	return Identity{}, false, nil
}

// identity checks an accepting answer: a name kvd can carry, and groups
// without empty names (sorted, without repeats).
func identity(p *proc, resp *pb.AuthenticateResponse) (Identity, error) {
	user := resp.GetUser()
	if user == "" {
		return Identity{}, fmt.Errorf("empty user name")
	}
	if len(user) > authz.MaxNameBytes {
		return Identity{}, fmt.Errorf("user name of %d bytes", len(user))
	}
	groups := make([]string, 0, len(resp.GetGroups()))
	for _, g := range resp.GetGroups() {
		if g != "" && len(g) <= authz.MaxNameBytes {
			groups = append(groups, g)
		}
	}
	slices.Sort(groups)
	id := Identity{User: user, Groups: slices.Compact(groups), Plugin: p.spec.Name}
	if e := resp.GetExpiresUnix(); e > 0 {
		id.Expires = time.Unix(e, 0)
		if !time.Now().Before(id.Expires) {
			return Identity{}, fmt.Errorf("credential expired at %v", id.Expires)
		}
	}
	return id, nil
}

func decisionLabel(resp *pb.AuthenticateResponse) string {
	switch resp.GetDecision() {
	case pb.Decision_DECISION_ACCEPT:
		return "accept"
	case pb.Decision_DECISION_ABSTAIN:
		return "abstain"
	default:
		return "reject"
	}
}
