package pluginhost

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.uber.org/zap"
	grpccodes "google.golang.org/grpc/codes"

	pb "github.com/kvd-dev/kvd/pkg/pluginsdk/authpluginpb"
)

// Caller is who a request comes from, as the authorizers see it.
type Caller struct {
	User  string
	Roles []string
	// Authenticator is the plugin that authenticated the caller, empty for
	// kvd's own users and client certificates.
	Authenticator string
}

// Access is one key (RangeEnd empty) or range a request reads or writes.
type Access struct {
	Write    bool
	Key      []byte
	RangeEnd []byte
}

// Authorize asks each authorizer whether who may make the accesses of a
// call to method; any deny wins and is etcd's "permission denied". rev is
// the auth revision: a change drops every cached allow, so a change of
// roles is seen at once. Accesses an authorizer allowed within its
// cache-ttl are not asked again.
func (h *Host) Authorize(ctx context.Context, who Caller, method string, accesses []Access, rev uint64) error {
	if !h.HasAuthorizers() || len(accesses) == 0 {
		return nil
	}
	now := time.Now()
	prefix := callerKey(who, method)
	for _, p := range h.authorizers {
		var ask []*pb.KeyAccess
		var keys []string
		for _, a := range accesses {
			k := accessKey(prefix, a)
			if p.spec.CacheTTL > 0 {
				if _, ok := p.allows.get(k, rev, now); ok {
					continue
				}
			}
			ask = append(ask, toPB(a))
			keys = append(keys, k)
		}
		if len(ask) == 0 {
			h.m.hits.WithLabelValues(p.spec.Name, p.spec.Kind).Inc()
			continue
		}
		req := &pb.AuthorizeRequest{
			Identity: &pb.Identity{User: who.User, Roles: who.Roles, Authenticator: who.Authenticator},
			Method:   method,
			Accesses: ask,
		}
		var resp *pb.AuthorizeResponse
		_, err := h.call(ctx, p, "authorize", func(ctx context.Context, r *running) (string, error) {
			var err error
			resp, err = r.authz.Authorize(ctx, req)
			if err != nil {
				return "", err
			}
			if resp.GetVerdict() == pb.Verdict_VERDICT_ALLOW {
				return "allow", nil
			}
			return "deny", nil
		})
		if err != nil {
			if ctx.Err() != nil {
				return rpctypes.ErrGRPCCanceled
			}
			if p.spec.OnFailure == OnFailureSkip {
				p.lg.Warn("auth plugin failed; skipped (on-failure: skip)", zap.String("user-name", who.User), zap.Error(err))
				continue
			}
			p.lg.Warn("auth plugin failed; denied (on-failure: deny)", zap.String("user-name", who.User), zap.Error(err))
			return failure(p, grpccodes.PermissionDenied, err)
		}
		if resp.GetVerdict() != pb.Verdict_VERDICT_ALLOW {
			reason := resp.GetReason()
			if resp.GetVerdict() != pb.Verdict_VERDICT_DENY {
				reason = fmt.Sprintf("unknown verdict %d", resp.GetVerdict())
			}
			p.lg.Info("auth plugin denied a request", zap.String("user-name", who.User), zap.String("method", method), zap.String("reason", reason))
			return rpctypes.ErrGRPCPermissionDenied
		}
		if ttl := p.spec.CacheTTL; ttl > 0 {
			for _, k := range keys {
				p.allows.put(k, struct{}{}, rev, now.Add(ttl))
			}
		}
	}
	return nil
}

func toPB(a Access) *pb.KeyAccess {
	acc := pb.Access_ACCESS_READ
	if a.Write {
		acc = pb.Access_ACCESS_WRITE
	}
	return &pb.KeyAccess{Access: acc, Key: a.Key, RangeEnd: a.RangeEnd}
}

// callerKey and accessKey build an allow's cache key: every part length-
// prefixed, since keys may hold any byte.
func callerKey(who Caller, method string) []byte {
	b := appendPart(nil, method)
	b = appendPart(b, who.User)
	b = appendPart(b, who.Authenticator)
	b = binary.AppendUvarint(b, uint64(len(who.Roles)))
	for _, r := range who.Roles {
		b = appendPart(b, r)
	}
	return b
}

func accessKey(prefix []byte, a Access) string {
	b := append([]byte(nil), prefix...)
	if a.Write {
		b = append(b, 'w')
	} else {
		b = append(b, 'r')
	}
	b = appendPart(b, string(a.Key))
	b = appendPart(b, string(a.RangeEnd))
	return string(b)
}

func appendPart(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}
