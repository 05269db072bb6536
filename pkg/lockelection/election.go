package lockelection

import (
	"context"
	"errors"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	epb "github.com/kvd-dev/kvd/pkg/lockelection/v3electionpb"
)

// ErrMissingLeaderKey is etcd's answer to a Proclaim or Resign without a
// leader key.
var ErrMissingLeaderKey = errors.New(`"leader" field must be provided`)

// electionServer is etcd's v3election server.
type electionServer struct {
	epb.UnsafeElectionServer
	s *Service
}

func (es *electionServer) Campaign(ctx context.Context, req *epb.CampaignRequest) (*epb.CampaignResponse, error) {
	ctx = asCaller(ctx)
	s, err := es.s.session(ctx, req.Lease)
	if err != nil {
		return nil, err
	}
	e := concurrency.NewElection(s, string(req.Name))
	if err := e.Campaign(ctx, string(req.Value)); err != nil {
		return nil, err
	}
	return &epb.CampaignResponse{
		Header: e.Header(),
		Leader: &epb.LeaderKey{
			Name:  req.Name,
			Key:   []byte(e.Key()),
			Rev:   e.Rev(),
			Lease: int64(s.Lease()),
		},
	}, nil
}

func (es *electionServer) Proclaim(ctx context.Context, req *epb.ProclaimRequest) (*epb.ProclaimResponse, error) {
	if req.Leader == nil {
		return nil, ErrMissingLeaderKey
	}
	ctx = asCaller(ctx)
	s, err := es.s.session(ctx, req.Leader.Lease)
	if err != nil {
		return nil, err
	}
	e := concurrency.ResumeElection(s, string(req.Leader.Name), string(req.Leader.Key), req.Leader.Rev)
	if err := e.Proclaim(ctx, string(req.Value)); err != nil {
		return nil, err
	}
	return &epb.ProclaimResponse{Header: e.Header()}, nil
}

// Observe streams the election's leader, then each new leader or value,
// until the caller goes away.
func (es *electionServer) Observe(req *epb.LeaderRequest, stream epb.Election_ObserveServer) error {
	sctx := stream.Context()
	ctx := asCaller(sctx)
	s, err := es.s.session(ctx, -1)
	if err != nil {
		return err
	}
	ch := concurrency.NewElection(s, string(req.Name)).Observe(ctx)
	for sctx.Err() == nil {
		select {
		case <-sctx.Done():
		case resp, ok := <-ch:
			if !ok {
				return nil
			}
			if err := stream.Send(&epb.LeaderResponse{Header: resp.Header, Kv: resp.Kvs[0]}); err != nil {
				return err
			}
		}
	}
	return sctx.Err()
}

func (es *electionServer) Leader(ctx context.Context, req *epb.LeaderRequest) (*epb.LeaderResponse, error) {
	ctx = asCaller(ctx)
	s, err := es.s.session(ctx, -1)
	if err != nil {
		return nil, err
	}
	l, err := concurrency.NewElection(s, string(req.Name)).Leader(ctx)
	if err != nil {
		return nil, err
	}
	return &epb.LeaderResponse{Header: l.Header, Kv: l.Kvs[0]}, nil
}

func (es *electionServer) Resign(ctx context.Context, req *epb.ResignRequest) (*epb.ResignResponse, error) {
	if req.Leader == nil {
		return nil, ErrMissingLeaderKey
	}
	ctx = asCaller(ctx)
	s, err := es.s.session(ctx, req.Leader.Lease)
	if err != nil {
		return nil, err
	}
	e := concurrency.ResumeElection(s, string(req.Leader.Name), string(req.Leader.Key), req.Leader.Rev)
	if err := e.Resign(ctx); err != nil {
		return nil, err
	}
	return &epb.ResignResponse{Header: e.Header()}, nil
}

// session is etcd's, for Lock and Election: a session on lease (a new one when 0; -1, which no
// lease has, for the calls that only read), orphaned at once so it never
// keeps the lease alive.
func (s *Service) session(ctx context.Context, lease int64) (*concurrency.Session, error) {
	c, err := s.client()
	if err != nil {
		return nil, err
	}
	ss, err := concurrency.NewSession(c,
		concurrency.WithLease(clientv3.LeaseID(lease)),
		concurrency.WithContext(ctx),
	)
	if err != nil {
		return nil, err
	}
	ss.Orphan()
	return ss, nil
}
