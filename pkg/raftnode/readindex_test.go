package raftnode

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/actors"
	"github.com/kvd-dev/kvd/pkg/raftlog"
)

// pair is member 1 of a two-voter cluster whose member 2 may be started
// later: until then member 1 has no leader and raft drops its read index
// requests without an answer.
type pair struct {
	nodes  [3]atomic.Pointer[Node]
	groups []*actors.Group
	logs   []*raftlog.Log
}

func (p *pair) send(msgs []*raftpb.Message) {
	for _, m := range msgs {
		if n := p.nodes[m.GetTo()].Load(); n != nil {
			n.Step(m)
		}
	}
}

func (p *pair) start(t *testing.T, id uint64) *Node {
	t.Helper()
	l, err := raftlog.Open(raftlog.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	n, err := New(Config{ID: id, Peers: []raft.Peer{{ID: 1}, {ID: 2}}, TickInterval: 10 * time.Millisecond,
		ElectionTicks: 10, HeartbeatTicks: 1, Log: l, Logger: zap.NewNop(), Send: p.send})
	if err != nil {
		t.Fatal(err)
	}
	g := runNode(t, n, l)
	p.nodes[id].Store(n)
	p.groups = append(p.groups, g)
	p.logs = append(p.logs, l)
	return n
}

func (p *pair) stop(t *testing.T) {
	for i, g := range p.groups {
		if err := g.Stop(); err != nil {
			t.Error(err)
		}
		if err := p.logs[i].Close(); err != nil {
			t.Error(err)
		}
	}
}

// TestReadIndexRetriedAfterDrop: a read index request raft dropped (no
// leader yet) is sent again, and answered once a leader is elected, long
// before the caller's own deadline.
func TestReadIndexRetriedAfterDrop(t *testing.T) {
	var p pair
	defer p.stop(t)
	n1 := p.start(t, 1)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type answer struct {
		idx uint64
		err error
	}
	done := make(chan answer, 1)
	go func() {
		idx, err := n1.ReadIndex(ctx)
		done <- answer{idx, err}
	}()
	waitFor(t, "read index request queued", func() bool { return n1.PendingReads() == 1 })
	// Let raft drop it: member 1 alone cannot elect a leader.
	time.Sleep(2 * ReadIndexRetry)
	select {
	case a := <-done:
		t.Fatalf("read index answered without a leader: %+v", a)
	default:
	}

	started := time.Now()
	p.start(t, 2)
	select {
	case a := <-done:
		if a.err != nil {
			t.Fatalf("read index: %v", a.err)
		}
		if a.idx == 0 {
			t.Fatal("read index 0")
		}
		t.Logf("answered %v after the second member started", time.Since(started))
	case <-time.After(15 * time.Second):
		t.Fatal("dropped read index request was never retried")
	}
	if got := n1.PendingReads(); got != 0 {
		t.Fatalf("%d readers still pending", got)
	}
}

// TestReadIndexWaitersForgottenWhenContextsEnd: while raft cannot answer
// (no leader), callers that gave up leave the waiting set; it holds only
// callers still waiting.
func TestReadIndexWaitersForgottenWhenContextsEnd(t *testing.T) {
	var p pair
	defer p.stop(t)
	n1 := p.start(t, 1)

	const callers = 200
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := 0; i < callers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := n1.ReadIndex(ctx); err == nil {
				t.Error("read index answered without a leader")
			}
		}()
	}
	// One caller outlives the others.
	lctx, lcancel := context.WithCancel(context.Background())
	defer lcancel()
	ldone := make(chan error, 1)
	go func() { _, err := n1.ReadIndex(lctx); ldone <- err }()
	waitFor(t, "all readers queued", func() bool { return n1.PendingReads() == callers+1 })
	cancel()
	wg.Wait()
	waitFor(t, "cancelled readers forgotten", func() bool { return n1.PendingReads() == 1 })
	lcancel()
	<-ldone
	waitFor(t, "every reader forgotten", func() bool { return n1.PendingReads() == 0 })
	// Raft's drops do not bring them back, and a new reader is served
	// normally once a leader exists.
	p.start(t, 2)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel2()
	if _, err := n1.ReadIndex(ctx2); err != nil {
		t.Fatalf("read index with a leader: %v", err)
	}
	if got := n1.PendingReads(); got != 0 {
		t.Fatalf("%d readers still pending", got)
	}
}
