package api

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/kvd-dev/kvd/pkg/pluginhost"
)

// authorize asks the authorizer plugins, on this member and before the
// request is proposed or read, whether the caller may make accesses; any
// deny wins. They never grant: kvd's roles are still checked (at apply
// time for writes). Nothing is asked while auth is off or of a caller
// without an identity, whom kvd's own checks refuse.
//
// The returned context carries the caller it identified, so the proposal
// that follows does not resolve the token again.
func (s *Server) authorize(ctx context.Context, method string, accesses []pluginhost.Access) (context.Context, error) {
	if !s.Plugins.HasAuthorizers() || s.Auth == nil || !s.Auth.Enabled() {
		return ctx, nil
	}
	who, err := s.caller(ctx)
	if err != nil {
		return ctx, err
	}
	ctx = context.WithValue(ctx, callerKey{}, who)
	if who.Anonymous() {
		return ctx, nil
	}
	c := pluginhost.Caller{User: who.User, Roles: s.Auth.RolesOf(who), Authenticator: who.Via}
	return ctx, s.Plugins.Authorize(ctx, c, method, accesses, s.Auth.Revision())
}

// callerKey holds the authz.Info a request's caller was identified as.
type callerKey struct{}

// withCaller identifies the caller once, for a read that asks both kvd's
// roles and the authorizers; without authorizers it does nothing.
func (s *Server) withCaller(ctx context.Context) (context.Context, error) {
	if !s.Plugins.HasAuthorizers() || s.Auth == nil || !s.Auth.Enabled() {
		return ctx, nil
	}
	who, err := s.caller(ctx)
	if err != nil {
		return ctx, err
	}
	return context.WithValue(ctx, callerKey{}, who), nil
}

// The accesses of each KV request, as kvd's own checks see them: a prev_kv
// also reads what it returns.
func rangeAccesses(r *pb.RangeRequest) []pluginhost.Access {
	return []pluginhost.Access{{Key: r.Key, RangeEnd: r.RangeEnd}}
}

func putAccesses(r *pb.PutRequest) []pluginhost.Access {
	a := []pluginhost.Access{{Write: true, Key: r.Key}}
	if r.PrevKv {
		a = append(a, pluginhost.Access{Key: r.Key})
	}
	return a
}

func deleteAccesses(r *pb.DeleteRangeRequest) []pluginhost.Access {
	a := []pluginhost.Access{{Write: true, Key: r.Key, RangeEnd: r.RangeEnd}}
	if r.PrevKv {
		a = append(a, pluginhost.Access{Key: r.Key, RangeEnd: r.RangeEnd})
	}
	return a
}

// txnAccesses are the compares' reads and every operation of both branches,
// nested transactions included: the plugin cannot know which branch runs.
func txnAccesses(r *pb.TxnRequest) []pluginhost.Access {
	var a []pluginhost.Access
	for _, c := range r.Compare {
		a = append(a, pluginhost.Access{Key: c.Key, RangeEnd: c.RangeEnd})
	}
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			switch {
			case op.GetRequestRange() != nil:
				a = append(a, rangeAccesses(op.GetRequestRange())...)
			case op.GetRequestPut() != nil:
				a = append(a, putAccesses(op.GetRequestPut())...)
			case op.GetRequestDeleteRange() != nil:
				a = append(a, deleteAccesses(op.GetRequestDeleteRange())...)
			case op.GetRequestTxn() != nil:
				a = append(a, txnAccesses(op.GetRequestTxn())...)
			}
		}
	}
	return a
}

// watchAccesses is a watch create's range, with etcd's empty key as "\x00".
func watchAccesses(r *pb.WatchCreateRequest) []pluginhost.Access {
	key := r.Key
	if len(key) == 0 {
		key = []byte{0}
	}
	return []pluginhost.Access{{Key: key, RangeEnd: r.RangeEnd}}
}

// The gRPC methods the authorizers are told about.
const (
	methodRange       = "/etcdserverpb.KV/Range"
	methodRangeStream = "/etcdserverpb.KV/RangeStream"
	methodPut         = "/etcdserverpb.KV/Put"
	methodDeleteRange = "/etcdserverpb.KV/DeleteRange"
	methodTxn         = "/etcdserverpb.KV/Txn"
	methodWatch       = "/etcdserverpb.Watch/Watch"
)
