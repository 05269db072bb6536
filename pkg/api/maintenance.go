package api

import (
	"context"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

type maintenanceServer struct {
	pb.UnimplementedMaintenanceServer
	s *Server
}

// storageVersion is the storage schema version etcd v3.7 reports once its
// schema migration ran.
const storageVersion = "3.7.0"

func (m *maintenanceServer) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.StatusResponse, error) {
	s := m.s
	be := s.Store.Backend()
	return &pb.StatusResponse{
		Header:           s.header(s.Store.Rev()),
		Version:          s.cfg.Version,
		DbSize:           be.Size(),
		DbSizeInUse:      be.SizeInUse(),
		IsLearner:        s.Cluster.IsLearner(s.Raft.ID()),
		Leader:           s.Raft.Leader(),
		RaftIndex:        s.Raft.CommitIndex(),
		RaftTerm:         s.Raft.Term(),
		RaftAppliedIndex: s.Applied.Index(),
		StorageVersion:   storageVersion,
		DbSizeQuota:      s.cfg.QuotaBytes,
		DowngradeInfo:    &pb.DowngradeInfo{},
		Errors:           s.statusErrors(),
	}, nil
}

// Defragment runs the backend's online defragment: writes go on while it
// copies (see backend.Backend.Defrag). It logs as etcd does.
func (m *maintenanceServer) Defragment(ctx context.Context, _ *pb.DefragmentRequest) (*pb.DefragmentResponse, error) {
	be, lg := m.s.Store.Backend(), m.s.Logger
	m.s.defrags.Add(1)
	defer m.s.defrags.Add(-1)
	start := time.Now()
	size, inUse := be.Size(), be.SizeInUse()
	lg.Info("starting defragment", zap.Int64("current-db-size-bytes", size), zap.Int64("current-db-size-in-use-bytes", inUse))
	if err := be.Defrag(); err != nil {
		lg.Warn("failed to defragment", zap.Duration("took", time.Since(start)), zap.Error(err))
		return nil, status.Errorf(codes.Internal, "etcdserver: defragment: %v", err)
	}
	if d := m.s.DefragDuration; d != nil {
		d.Observe(time.Since(start).Seconds()) // as etcd, successful ones only
	}
	after, afterInUse := be.Size(), be.SizeInUse()
	lg.Info("finished defragment",
		zap.Int64("current-db-size-bytes-diff", after-size),
		zap.Int64("current-db-size-bytes", after),
		zap.Int64("current-db-size-in-use-bytes-diff", afterInUse-inUse),
		zap.Int64("current-db-size-in-use-bytes", afterInUse),
		zap.Duration("took", time.Since(start)))
	// etcd answers a defragment with an empty response, no header.
	return &pb.DefragmentResponse{}, nil
}

// Hash is etcd's whole-backend hash, for tests: it depends on the engine's
// contents only, so members agree on it whichever engine they run.
func (m *maintenanceServer) Hash(ctx context.Context, _ *pb.HashRequest) (*pb.HashResponse, error) {
	h, rev, err := m.s.Store.Hash()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "etcdserver: hash: %v", err)
	}
	return &pb.HashResponse{Header: m.s.header(rev), Hash: h}, nil
}

func (m *maintenanceServer) HashKV(ctx context.Context, r *pb.HashKVRequest) (*pb.HashKVResponse, error) {
	s := m.s
	h, rev, compactRev, err := s.Store.HashByRev(r.Revision)
	if err != nil {
		return nil, mvccErr(err)
	}
	// hash_revision is the revision hashed: the one asked for, or the
	// current one for 0.
	hashRev := rev
	if r.Revision > 0 {
		hashRev = r.Revision
	}
	return &pb.HashKVResponse{Header: s.header(rev), Hash: h, CompactRevision: compactRev, HashRevision: hashRev}, nil
}
