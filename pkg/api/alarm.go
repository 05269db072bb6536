package api

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.uber.org/zap"
)

// checkQuota is etcd's quotaAlarmer.check, run first in Put, Txn and
// LeaseGrant: a request that would grow the backend past the quota is
// refused with "etcdserver: mvcc: database space exceeded", and this member
// raises NOSPACE through raft (once: not again while it is raised).
func (s *Server) checkQuota(ctx context.Context, req any) error {
	if s.Quota.Available(req) {
		return nil
	}
	if !s.Alarms.Has(s.Raft.ID(), pb.AlarmType_NOSPACE) {
		s.Logger.Warn("request would exceed the backend quota; raising the NOSPACE alarm",
			zap.Int64("quota-size-bytes", s.Quota.Limit), zap.Int64("db-size", s.Store.Backend().Size()))
		// As etcd, the error of the alarm's proposal is not the caller's.
		_, _ = s.propose(ctx, &pb.InternalRaftRequest{Alarm: s.noSpaceAlarm()})
	}
	return rpctypes.ErrGRPCNoSpace
}

func (s *Server) noSpaceAlarm() *pb.AlarmRequest {
	return &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: s.Raft.ID(), Alarm: pb.AlarmType_NOSPACE}
}

// RaiseNoSpace proposes this member's NOSPACE alarm in the background: the
// applier calls it when an applied request exceeded the quota.
func (s *Server) RaiseNoSpace() {
	go func() {
		_, err := s.propose(context.Background(), &pb.InternalRaftRequest{Alarm: s.noSpaceAlarm()})
		if err != nil {
			s.Logger.Warn("raising the NOSPACE alarm failed", zap.Error(err))
		}
	}()
}

// Alarm lists (GET), raises (ACTIVATE) or clears (DEACTIVATE) alarms, all
// through raft as etcd does, so a GET is linearizable.
func (m *maintenanceServer) Alarm(ctx context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	s := m.s
	res, err := s.propose(ctx, &pb.InternalRaftRequest{Alarm: r})
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return nil, res.Err
	}
	resp := res.Resp.(*pb.AlarmResponse)
	s.fill(resp.Header)
	return resp, nil
}

// statusErrors are etcd's Status errors: no leader, then every alarm raised.
func (s *Server) statusErrors() []string {
	var errs []string
	if s.Raft.Leader() == 0 {
		errs = append(errs, "etcdserver: no leader")
	}
	for _, a := range s.Alarms.Get(pb.AlarmType_NONE) {
		errs = append(errs, a.String())
	}
	return errs
}
