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

// A proposal's shared timeout never fires before the request timeout has
// passed since the proposal asked for it, nor much later; proposals asking
// within one grain share the channel.
func TestSharedTimeoutsNeverEarly(t *testing.T) {
	const timeout = 150 * time.Millisecond
	ts := sharedTimeouts{timeout: timeout}
	type asked struct {
		at time.Time
		ch <-chan struct{}
	}
	var all []asked
	for i := 0; i < 12; i++ {
		all = append(all, asked{time.Now(), ts.expiry()})
		time.Sleep(timeoutGrain / 4)
	}
	if all[0].ch != all[1].ch {
		t.Error("proposals a moment apart got different timeouts")
	}
	if all[0].ch == all[len(all)-1].ch {
		t.Error("proposals far apart share one timeout")
	}
	for i, a := range all {
		<-a.ch
		waited := time.Since(a.at)
		if waited < timeout {
			t.Errorf("proposal %d timed out after %v, before the request timeout %v", i, waited, timeout)
		}
		if waited > timeout+timeoutGrain+time.Second {
			t.Errorf("proposal %d timed out only after %v", i, waited)
		}
	}
}

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
