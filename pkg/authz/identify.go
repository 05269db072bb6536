package authz

import (
	"context"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.uber.org/zap"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// Identify answers who is calling: the user of the request's token (see
// TokenOf; hasToken is false when it carries none), else, when certCN is set
// (client-cert-auth), the CommonName of the verified client certificate.
// The zero Info (Anonymous) is a caller without an identity, and what every
// caller is while auth is disabled. A token that does not resolve is etcd's
// "invalid auth token".
func (s *Store) Identify(ctx context.Context, t string, hasToken, certCN bool) (Info, error) {
	st := s.cur.Load()
	if !st.enabled {
		return Info{}, nil
	}
	if hasToken {
		if s.tokens != nil {
			if info, ok := s.tokens.Info(t, st.rev); ok {
				return info, nil
			}
		}
		if s.external != nil {
			info, ok, err := s.external(ctx, t)
			if err != nil {
				return Info{}, err
			}
			if ok {
				info.Revision = st.rev
				return info, nil
			}
		}
		s.lg.Warn("invalid auth token", zap.String("token-fingerprint", TokenFingerprint(t)))
		return Info{}, rpctypes.ErrGRPCInvalidAuthToken
	}
	if !certCN {
		return Info{}, nil
	}
	return certUser(ctx, st.rev), nil
}

// RelayedMetadataKey marks a call the member makes for another caller over
// its own loopback connection (pkg/lockelection): its certificate is the
// member's, so like a gateway's it never names the user.
const RelayedMetadataKey = "kvd-relayed"

// certUser is the CommonName of the first verified chain's leaf. A request
// relayed by a gateway carries the gateway's certificate, never the user's,
// so its CN is ignored, as etcd does.
func certUser(ctx context.Context, rev uint64) Info {
	p, ok := peer.FromContext(ctx)
	if !ok || p.AuthInfo == nil {
		return Info{}
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return Info{}
	}
	for _, chain := range ti.State.VerifiedChains {
		if len(chain) == 0 {
			continue
		}
		if len(metadata.ValueFromIncomingContext(ctx, "grpcgateway-accept")) > 0 ||
			len(metadata.ValueFromIncomingContext(ctx, RelayedMetadataKey)) > 0 {
			return Info{}
		}
		return Info{User: chain[0].Subject.CommonName, Revision: rev}
	}
	return Info{}
}

// TokenOf returns the request's token, if it carries one: gRPC metadata
// "token", or "authorization" with an optional "Bearer " prefix, as etcd's
// gateway sends it. It reads the two keys without copying the metadata
// (this is on every request's path once auth is on).
func TokenOf(ctx context.Context) (string, bool) {
	tok := metadata.ValueFromIncomingContext(ctx, rpctypes.TokenFieldNameGRPC)
	if len(tok) == 0 {
		tok = metadata.ValueFromIncomingContext(ctx, rpctypes.TokenFieldNameSwagger)
	}
	if len(tok) == 0 {
		return "", false
	}
	return strings.TrimPrefix(tok[0], "Bearer "), true
}
