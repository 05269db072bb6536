package pluginhost

import (
	"bytes"
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
// cache-ttl, or that lie within a scope it allowed, are not asked again.
func (h *Host) Authorize(ctx context.Context, who Caller, method string, accesses []Access, rev uint64) error {
	if !h.HasAuthorizers() || len(accesses) == 0 {
		return nil
	}
	now := time.Now()
	ck := string(callerKey(who, method))
	for _, p := range h.authorizers {
		ask, keys := p.uncached(ck, accesses, rev, now)
		if len(ask) == 0 {
			p.hits.Inc()
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
		p.remember(ck, keys, resp.GetScopes(), rev, now)
	}
	return nil
}

// uncached returns the accesses p must be asked about (and their cache
// keys): those neither within a scope p allowed ck nor allowed one by one.
func (p *proc) uncached(ck string, accesses []Access, rev uint64, now time.Time) ([]*pb.KeyAccess, []string) {
	ttl := p.spec.CacheTTL > 0
	var scopes []scope
	if ttl {
		scopes, _ = p.scopes.get(ck, rev, now)
	}
	var ask []*pb.KeyAccess
	var keys []string
	for _, a := range accesses {
		if ttl && covered(scopes, a, now) {
			continue
		}
		var k string
		if ttl {
			k = accessKey(ck, a)
			if _, ok := p.allows.get(k, rev, now); ok {
				continue
			}
		}
		ask = append(ask, toPB(a))
		keys = append(keys, k)
	}
	return ask, keys
}

// remember caches an allow: the scopes the plugin gave, else the accesses
// asked about one by one.
func (p *proc) remember(ck string, keys []string, scopes []*pb.KeyAccess, rev uint64, now time.Time) {
	ttl := p.spec.CacheTTL
	if ttl <= 0 {
		return
	}
	exp := now.Add(ttl)
	if len(scopes) > 0 {
		old, _ := p.scopes.get(ck, rev, now)
		merged := make([]scope, 0, len(old)+len(scopes))
		for _, s := range old {
			if now.Before(s.expires) {
				merged = append(merged, s)
			}
		}
		for _, s := range scopes {
			if s.GetAccess() == pb.Access_ACCESS_UNSPECIFIED {
				continue
			}
			merged = append(merged, scope{write: s.GetAccess() == pb.Access_ACCESS_WRITE, key: s.GetKey(), end: s.GetRangeEnd(), expires: exp})
		}
		if len(merged) > maxScopes {
			merged = merged[len(merged)-maxScopes:]
		}
		p.scopes.put(ck, merged, rev, exp)
		return
	}
	for _, k := range keys {
		p.allows.put(k, struct{}{}, rev, exp)
	}
}

// maxScopes bounds the scopes kept per caller and method; the oldest go.
const maxScopes = 16

// scope is an allowed key or range, for reads or for writes, until expires.
type scope struct {
	write    bool
	key, end []byte
	expires  time.Time
}

// covered tells whether a lies within an unexpired scope of its kind.
func covered(scopes []scope, a Access, now time.Time) bool {
	for _, s := range scopes {
		if s.write == a.Write && now.Before(s.expires) && s.contains(a.Key, a.RangeEnd) {
			return true
		}
	}
	return false
}

// contains tells whether [key, end) (one key when end is empty, from key
// on when end is "\x00") lies within the scope, by etcd's conventions for
// both.
func (s scope) contains(key, end []byte) bool {
	if bytes.Compare(key, s.key) < 0 {
		return false
	}
	switch {
	case len(s.end) == 0: // the scope is one key
		return len(end) == 0 && bytes.Equal(key, s.key)
	case isFromKey(s.end): // the scope runs to the end of the keyspace
		return true
	case len(end) == 0:
		return bytes.Compare(key, s.end) < 0
	case isFromKey(end):
		return false
	default:
		return bytes.Compare(end, s.end) <= 0
	}
}

func isFromKey(end []byte) bool { return len(end) == 1 && end[0] == 0 }

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

func accessKey(prefix string, a Access) string {
	b := make([]byte, 0, len(prefix)+len(a.Key)+len(a.RangeEnd)+8)
	b = append(b, prefix...)
	if a.Write {
		b = append(b, 'w')
	} else {
		b = append(b, 'r')
	}
	b = appendPart(b, a.Key)
	b = appendPart(b, a.RangeEnd)
	return string(b)
}

func appendPart[S ~string | ~[]byte](b []byte, s S) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}
