package api

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
)

// LinearizableReadNotify waits until this member applied everything
// committed before the call (the periodic corruption check's read point).
func (s *Server) LinearizableReadNotify(ctx context.Context) error { return s.linearize(ctx) }

// RaiseCorrupt proposes the CORRUPT alarm for member id through raft, as the
// member itself (etcd's triggerCorruptAlarm), and waits until it is applied.
func (s *Server) RaiseCorrupt(ctx context.Context, id uint64) error {
	req := &pb.InternalRaftRequest{Header: s.internalHeader(),
		Alarm: &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: id, Alarm: pb.AlarmType_CORRUPT}}
	data, err := proto.Marshal(req)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	rid := req.Header.ID
	ch := s.Registry.Register(ctx, rid)
	if err := s.Raft.Propose(ctx, data); err != nil {
		s.Registry.Cancel(rid)
		return s.raftErr(ctx, err)
	}
	select {
	case res := <-ch:
		return res.Err
	case <-ctx.Done():
		s.Registry.Cancel(rid)
		return s.raftErr(ctx, ctx.Err())
	}
}
