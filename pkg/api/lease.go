package api

import (
	"context"
	"errors"
	"io"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/raft/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-dev/kvd/pkg/leasemgr"
)

// leaseServer is the Lease service. Grant and Revoke go through raft;
// keep-alives, time-to-live and the list are served from the lease manager
// of this member, which must be the primary (the leader) for the first two.
// A follower relays keep-alives and time-to-live to the leader, as etcd.
type leaseServer struct {
	pb.UnimplementedLeaseServer
	s *Server
}

func (l *leaseServer) LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	s := l.s
	ctx, span := s.span(ctx, "lease.Grant")
	defer span.End()
	if err := s.checkQuota(ctx, r); err != nil {
		return nil, err
	}
	// A server-chosen ID is positive, as etcd's.
	for r.ID == 0 {
		r.ID = int64(s.ids.next() & (1<<63 - 1))
	}
	res, err := s.propose(ctx, &pb.InternalRaftRequest{LeaseGrant: r})
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return nil, res.Err
	}
	resp := res.Resp.(*pb.LeaseGrantResponse)
	s.fill(resp.Header)
	return resp, nil
}

func (l *leaseServer) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	s := l.s
	ctx, span := s.span(ctx, "lease.Revoke")
	defer span.End()
	res, err := s.propose(ctx, &pb.InternalRaftRequest{LeaseRevoke: r})
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return nil, res.Err
	}
	resp := res.Resp.(*pb.LeaseRevokeResponse)
	s.fill(resp.Header)
	return resp, nil
}

// LeaseTimeToLive answers TTL -1 for a lease that does not exist, as etcd.
func (l *leaseServer) LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	s := l.s
	ctx, span := s.span(ctx, "lease.TimeToLive")
	defer span.End()
	// Only a request for the keys is checked against them, as etcd.
	var checked uint64
	if r.Keys {
		var err error
		if checked, err = s.checkLeaseKeys(ctx, []int64{r.ID}); err != nil {
			return nil, err
		}
	}
	if lead, fwd := s.leaseForward(); fwd {
		// Only the leader's lessor knows the remaining TTL.
		conn, err := s.leaderConn(lead)
		if err != nil {
			return nil, err
		}
		fctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
		defer cancel()
		resp, err := pb.NewLeaseClient(conn).LeaseTimeToLive(forwardAuth(fctx), r)
		if err != nil {
			return nil, s.forwardErr(ctx, err)
		}
		s.fill(resp.Header)
		return resp, nil
	}
	if err := s.leasePrimary(ctx); err != nil {
		return nil, err
	}
	// Everything committed is applied first, so a lease granted or revoked
	// before the call is seen.
	if err := s.linearize(ctx); err != nil {
		return nil, err
	}
	st, err := s.Leases.TimeToLive(r.ID, r.Keys)
	if errors.Is(err, leasemgr.ErrNotFound) {
		return &pb.LeaseTimeToLiveResponse{Header: s.header(s.Store.Rev()), ID: r.ID, TTL: -1}, nil
	}
	if err != nil {
		return nil, err
	}
	resp := &pb.LeaseTimeToLiveResponse{Header: s.header(s.Store.Rev()), ID: st.ID, TTL: st.TTL, GrantedTTL: st.GrantedTTL}
	if r.Keys {
		resp.Keys = make([][]byte, len(st.Keys))
		for i, k := range st.Keys {
			resp.Keys[i] = []byte(k)
		}
		if err := s.readStale(checked); err != nil {
			return nil, err
		}
	}
	return resp, nil
}

func (l *leaseServer) LeaseLeases(ctx context.Context, _ *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	s := l.s
	ids := s.Leases.Leases()
	if _, err := s.checkLeaseKeys(ctx, ids); err != nil {
		return nil, err
	}
	resp := &pb.LeaseLeasesResponse{Header: s.header(s.Store.Rev()), Leases: make([]*pb.LeaseStatus, len(ids))}
	for i, id := range ids {
		resp.Leases[i] = &pb.LeaseStatus{ID: id}
	}
	return resp, nil
}

// LeaseKeepAlive renews each lease asked for and answers its TTL, 0 for a
// lease that does not exist (or expired before the renewal), as etcd.
func (l *leaseServer) LeaseKeepAlive(stream pb.Lease_LeaseKeepAliveServer) error {
	s := l.s
	ctx := stream.Context()
	var fwd keepAliveForward
	defer fwd.close()
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var ttl int64
		if lead, ok := s.leaseForward(); ok {
			// Renewals are the leader's: a follower relays them.
			ttl, err = fwd.renew(ctx, s, lead, req.ID)
		} else {
			ttl, err = s.renew(ctx, req.ID)
		}
		if err != nil {
			return err
		}
		resp := &pb.LeaseKeepAliveResponse{Header: s.header(s.Store.Rev()), ID: req.ID, TTL: ttl}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

func (s *Server) renew(ctx context.Context, id int64) (int64, error) {
	if err := s.leasePrimary(ctx); err != nil {
		return 0, err
	}
	if err := s.checkRenew(ctx, id); err != nil {
		return 0, err
	}
	if s.Leases.CheckpointedTTL(id) > 0 {
		// The checkpointed remaining TTL is cleared through raft before the
		// renewal, so a restarted member does not start the lease from it.
		res, err := s.propose(ctx, &pb.InternalRaftRequest{LeaseCheckpoint: &pb.LeaseCheckpointRequest{
			Checkpoints: []*pb.LeaseCheckpoint{{ID: id}}}})
		if err != nil {
			return 0, err
		}
		if res.Err != nil {
			return 0, res.Err
		}
	}
	ttl, err := s.Leases.Renew(ctx, id)
	if errors.Is(err, leasemgr.ErrNotFound) {
		// The grant may be committed but not applied here yet.
		if err := s.linearize(ctx); err != nil {
			return 0, err
		}
		ttl, err = s.Leases.Renew(ctx, id)
	}
	switch {
	case errors.Is(err, leasemgr.ErrNotFound):
		return 0, nil
	case errors.Is(err, leasemgr.ErrNotPrimary):
		return 0, rpctypes.ErrGRPCNotLeader
	case err != nil:
		return 0, s.raftErr(ctx, err)
	}
	return ttl, nil
}

// leaseForward reports whether lease calls that need the leader's lessor
// go to another member, and which.
func (s *Server) leaseForward() (uint64, bool) {
	if s.Leases.Primary() {
		return 0, false
	}
	lead := s.Raft.Leader()
	return lead, lead != raft.None && lead != s.Raft.ID()
}

// forwardErr turns a failure to reach the leader into etcd's errors; the
// leader's own etcd errors pass through.
func (s *Server) forwardErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return s.raftErr(ctx, ctx.Err())
	}
	if st, ok := status.FromError(err); ok && strings.HasPrefix(st.Message(), "etcdserver: ") {
		return err
	}
	return rpctypes.ErrGRPCTimeout
}

// keepAliveForward relays one client's keep-alives to the leader over one
// stream, reopened when the leader changes or the stream breaks.
type keepAliveForward struct {
	lead   uint64
	stream pb.Lease_LeaseKeepAliveClient
	cancel context.CancelFunc
}

func (f *keepAliveForward) close() {
	if f.cancel != nil {
		f.cancel()
		f.cancel, f.stream = nil, nil
	}
}

func (f *keepAliveForward) renew(ctx context.Context, s *Server, lead uint64, id int64) (int64, error) {
	if f.stream == nil || f.lead != lead {
		f.close()
		conn, err := s.leaderConn(lead)
		if err != nil {
			return 0, err
		}
		sctx, cancel := context.WithCancel(ctx)
		st, err := pb.NewLeaseClient(conn).LeaseKeepAlive(forwardAuth(sctx))
		if err != nil {
			cancel()
			return 0, s.forwardErr(ctx, err)
		}
		f.lead, f.stream, f.cancel = lead, st, cancel
	}
	resp, err := f.roundTrip(ctx, s, id)
	if err != nil {
		f.close()
		return 0, s.forwardErr(ctx, err)
	}
	return resp.TTL, nil
}

func (f *keepAliveForward) roundTrip(ctx context.Context, s *Server, id int64) (*pb.LeaseKeepAliveResponse, error) {
	type result struct {
		resp *pb.LeaseKeepAliveResponse
		err  error
	}
	done := make(chan result, 1)
	st := f.stream
	go func() {
		if err := st.Send(&pb.LeaseKeepAliveRequest{ID: id}); err != nil {
			done <- result{err: err}
			return
		}
		resp, err := st.Recv()
		done <- result{resp, err}
	}()
	t := time.NewTimer(s.cfg.RequestTimeout)
	defer t.Stop()
	select {
	case r := <-done:
		return r.resp, r.err
	case <-t.C:
		f.close()
		<-done
		return nil, status.Error(codes.DeadlineExceeded, "keep-alive forward timed out")
	case <-ctx.Done():
		f.close()
		<-done
		return nil, ctx.Err()
	}
}

// leasePrimary waits, up to the request timeout, until this member's lease
// manager is primary (it is promoted shortly after the member leads).
func (s *Server) leasePrimary(ctx context.Context) error {
	if s.Leases.Primary() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	select {
	case <-s.Leases.Promoted():
		return nil
	case <-ctx.Done():
		return s.raftErr(ctx, ctx.Err())
	}
}

// ProposeLeaseRevoke proposes the revocation of an expired lease through
// raft without waiting for it to apply (the lease-expirer actor's call).
func (s *Server) ProposeLeaseRevoke(ctx context.Context, id int64) error {
	req := &pb.InternalRaftRequest{Header: s.internalHeader(), LeaseRevoke: &pb.LeaseRevokeRequest{ID: id}}
	data, err := proto.Marshal(req)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	if err := s.Raft.Propose(ctx, data); err != nil {
		return s.raftErr(ctx, err)
	}
	return nil
}

// ProposeLeaseCheckpoints proposes the remaining TTLs of leases through raft
// and waits until they are applied (the lease-expirer actor's call when
// checkpointing is on).
func (s *Server) ProposeLeaseCheckpoints(ctx context.Context, cps []leasemgr.Checkpoint) error {
	req := &pb.LeaseCheckpointRequest{Checkpoints: make([]*pb.LeaseCheckpoint, len(cps))}
	for i, c := range cps {
		req.Checkpoints[i] = &pb.LeaseCheckpoint{ID: c.ID, Remaining_TTL: c.RemainingTTL}
	}
	res, err := s.propose(ctx, &pb.InternalRaftRequest{LeaseCheckpoint: req})
	if err != nil {
		return err
	}
	return res.Err
}
