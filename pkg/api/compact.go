package api

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"
)

// AutoCompact proposes a compaction at rev through raft, as the member itself
// (the auto-compactor's call, which no client makes: no caller to identify),
// and waits until it is applied. An already compacted revision is
// rpctypes.ErrGRPCCompacted.
func (s *Server) AutoCompact(ctx context.Context, rev int64) error {
	req := &pb.InternalRaftRequest{Header: s.internalHeader(), Compaction: &pb.CompactionRequest{Revision: rev}}
	data, err := proto.Marshal(req)
	if err != nil {
		return err
	}
	if len(data) > s.cfg.MaxRequestBytes {
		return rpctypes.ErrGRPCRequestTooLarge
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	id := req.Header.ID
	ch := s.Registry.Register(ctx, id)
	if err := s.Raft.Propose(ctx, data); err != nil {
		s.Registry.Cancel(id)
		return s.raftErr(ctx, err)
	}
	select {
	case res := <-ch:
		return res.Err
	case <-ctx.Done():
		s.Registry.Cancel(id)
		return s.raftErr(ctx, ctx.Err())
	}
}
