package api

import (
	"context"
	"errors"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/kvd-dev/kvd/pkg/apply"
)

// ProbeRead is the read of etcd's health checks (pkg/probes): a Range of
// one key, keys only, as root (no permission check), after a linearizable
// wait unless serializable. Its error reads as etcd's server error, the
// text /health and /readyz show: "etcdserver: request timed out", not a
// gRPC status.
func (s *Server) ProbeRead(ctx context.Context, serializable bool) error {
	if !serializable {
		if err := s.linearize(ctx); err != nil {
			return probeErr(ctx, err)
		}
	}
	rv := s.Store.Read()
	_, err := apply.Range(rv, &pb.RangeRequest{KeysOnly: true, Limit: 1})
	rv.End()
	if err != nil {
		return probeErr(ctx, mvccErr(err))
	}
	return nil
}

func probeErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		// The caller gave up first (etcd returns its context's error).
		return ctx.Err()
	}
	if errors.Is(err, rpctypes.ErrGRPCNoLeader) {
		// etcd's read index round does not fail on a missing leader: it
		// times out.
		return errors.New(rpctypes.ErrorDesc(rpctypes.ErrGRPCTimeout))
	}
	return errors.New(rpctypes.ErrorDesc(err))
}
