package api

import (
	"context"
	"errors"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/kvd-dev/kvd/pkg/apply"
	"github.com/kvd-dev/kvd/pkg/raftnode"
)

// gapRaft is a raft whose commit index is set by the test; it records
// proposals and refuses them.
type gapRaft struct {
	Raft
	commit   uint64
	proposed int
}

func (r *gapRaft) ID() uint64          { return 1 }
func (r *gapRaft) Leader() uint64      { return 1 }
func (r *gapRaft) CommitIndex() uint64 { return r.commit }
func (r *gapRaft) Propose(context.Context, []byte) error {
	r.proposed++
	return errProposed
}
func (r *gapRaft) ProposeAsync(_ context.Context, _ []byte, id uint64, dropped raftnode.Dropped, _ bool) error {
	r.proposed++
	dropped.ProposalDropped(id, errProposed)
	return nil
}

// TestProposalsRefusedWhenApplyLagsCommit: as etcd's
// processInternalRaftRequestOnce, every proposal is refused with "too many
// requests" once the committed index is more than 5000 ahead of the
// applied index, and proposed again once the applier catches up.
func TestProposalsRefusedWhenApplyLagsCommit(t *testing.T) {
	const applied = 100
	r := &gapRaft{}
	s := New(Config{RequestTimeout: time.Second, MaxRequestBytes: 1 << 20}, Deps{
		Raft: r, Registry: apply.NewRegistry(), Applied: apply.NewApplied(applied),
	})
	reqs := map[string]func() *pb.InternalRaftRequest{
		"put": func() *pb.InternalRaftRequest { return &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("k")}} },
		"txn": func() *pb.InternalRaftRequest { return &pb.InternalRaftRequest{Txn: &pb.TxnRequest{}} },
		"delete": func() *pb.InternalRaftRequest {
			return &pb.InternalRaftRequest{DeleteRange: &pb.DeleteRangeRequest{Key: []byte("k")}}
		},
		"lease grant": func() *pb.InternalRaftRequest {
			return &pb.InternalRaftRequest{LeaseGrant: &pb.LeaseGrantRequest{TTL: 5}}
		},
		"lease revoke": func() *pb.InternalRaftRequest {
			return &pb.InternalRaftRequest{LeaseRevoke: &pb.LeaseRevokeRequest{ID: 1}}
		},
		"compaction": func() *pb.InternalRaftRequest {
			return &pb.InternalRaftRequest{Compaction: &pb.CompactionRequest{Revision: 1}}
		},
	}
	for name, req := range reqs {
		r.commit = applied + MaxGapBetweenApplyAndCommitIndex + 1
		r.proposed = 0
		if _, err := s.propose(context.Background(), req()); !errors.Is(err, rpctypes.ErrGRPCRequestTooManyRequests) {
			t.Errorf("%s with the gap over the limit: %v, want %v", name, err, rpctypes.ErrGRPCRequestTooManyRequests)
		}
		if r.proposed != 0 {
			t.Errorf("%s was proposed with the gap over the limit", name)
		}
		if got := s.Registry.Len(); got != 0 {
			t.Errorf("%s left %d waiters registered", name, got)
		}
		r.commit = applied + MaxGapBetweenApplyAndCommitIndex
		if _, err := s.propose(context.Background(), req()); !errors.Is(err, errProposed) {
			t.Errorf("%s at the limit: %v, want it proposed", name, err)
		}
		if r.proposed != 1 {
			t.Errorf("%s at the limit: proposed %d times", name, r.proposed)
		}
	}
	if got := rpctypes.ErrorDesc(rpctypes.ErrGRPCRequestTooManyRequests); got != "etcdserver: too many requests" {
		t.Fatalf("error %q", got)
	}
}
