package api

import (
	"context"
	"errors"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/raft/v3"

	"github.com/kvd-dev/kvd/pkg/apply"
	"github.com/kvd-dev/kvd/pkg/raftnode"
)

// stuckRaft takes proposals and never commits them.
type stuckRaft struct{ gapRaft }

func (r *stuckRaft) Propose(context.Context, []byte) error { return nil }
func (r *stuckRaft) ProposeAsync(context.Context, []byte, uint64, raftnode.Dropped, bool) error {
	return nil
}

// A proposal that is never applied fails with "request timed out" after
// the request timeout, without a deadline of the caller's, is counted as
// failed, and leaves no waiter behind.
func TestProposalTimesOut(t *testing.T) {
	const timeout = 200 * time.Millisecond
	failed := &countingCounter{}
	s := New(Config{RequestTimeout: timeout, MaxRequestBytes: 1 << 20}, Deps{
		Raft: &stuckRaft{}, Registry: apply.NewRegistry(), Applied: apply.NewApplied(0), ProposalsFailed: failed,
	})
	start := time.Now()
	_, err := s.propose(context.Background(), &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("k")}})
	if !errors.Is(err, rpctypes.ErrGRPCTimeout) {
		t.Fatalf("propose: %v, want %v", err, rpctypes.ErrGRPCTimeout)
	}
	if d := time.Since(start); d < timeout {
		t.Fatalf("timed out after %v, before the request timeout", d)
	}
	if failed.n != 1 {
		t.Errorf("%d proposals counted failed, want 1", failed.n)
	}
	if n := s.Registry.Len(); n != 0 {
		t.Errorf("%d waiters left", n)
	}
}

// A proposal whose caller gives up (its context canceled) ends soon after,
// with the context's error, counted as failed, leaving no waiter behind.
func TestProposalEndsWithItsContext(t *testing.T) {
	failed := &countingCounter{}
	s := New(Config{RequestTimeout: time.Hour, MaxRequestBytes: 1 << 20}, Deps{
		Raft: &stuckRaft{}, Registry: apply.NewRegistry(), Applied: apply.NewApplied(0), ProposalsFailed: failed,
	})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err := s.propose(ctx, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("k")}})
	if !errors.Is(err, rpctypes.ErrGRPCCanceled) {
		t.Fatalf("propose: %v, want %v", err, rpctypes.ErrGRPCCanceled)
	}
	if failed.n != 1 {
		t.Errorf("%d proposals counted failed, want 1", failed.n)
	}
	if n := s.Registry.Len(); n != 0 {
		t.Errorf("%d waiters left", n)
	}
}

type countingCounter struct{ n int }

func (c *countingCounter) Inc() { c.n++ }

// droppingRaft refuses every proposal as raft does (ErrProposalDropped),
// through the driver's drop report; leader is who it says leads.
type droppingRaft struct {
	gapRaft
	leader uint64
}

func (r *droppingRaft) Leader() uint64 { return r.leader }
func (r *droppingRaft) ProposeAsync(_ context.Context, _ []byte, id uint64, dropped raftnode.Dropped, _ bool) error {
	dropped.ProposalDropped(id, raft.ErrProposalDropped)
	return nil
}

// A proposal raft refuses fails at once, as etcd's: "no leader" without a
// leader, "request timed out" with one (a leadership transfer); it is
// counted as failed and leaves no waiter behind.
func TestDroppedProposalFailsAtOnce(t *testing.T) {
	for _, tc := range []struct {
		leader uint64
		want   error
	}{{0, rpctypes.ErrGRPCNoLeader}, {2, rpctypes.ErrGRPCTimeout}} {
		failed := &countingCounter{}
		// A proposal left waiting would hang the test, not pass it.
		s := New(Config{RequestTimeout: time.Hour, MaxRequestBytes: 1 << 20}, Deps{
			Raft: &droppingRaft{leader: tc.leader}, Registry: apply.NewRegistry(), Applied: apply.NewApplied(0), ProposalsFailed: failed,
		})
		_, err := s.propose(context.Background(), &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("k")}})
		if !errors.Is(err, tc.want) {
			t.Errorf("leader %d: %v, want %v", tc.leader, err, tc.want)
		}
		if failed.n != 1 {
			t.Errorf("leader %d: %d proposals counted failed, want 1", tc.leader, failed.n)
		}
		if n := s.Registry.Len(); n != 0 {
			t.Errorf("leader %d: %d waiters left", tc.leader, n)
		}
	}
}
