package raftnode

import (
	"context"
	"errors"
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
	return p.startWith(t, id, 0)
}

// startWith starts member id with a read index timeout.
func (p *pair) startWith(t *testing.T, id uint64, readTimeout time.Duration) *Node {
	t.Helper()
	l, err := raftlog.Open(raftlog.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	n, err := New(Config{ID: id, Peers: []raft.Peer{{ID: 1}, {ID: 2}}, TickInterval: 10 * time.Millisecond,
		ElectionTicks: 10, HeartbeatTicks: 1, Log: l, Logger: zap.NewNop(), Send: p.send, ReadIndexTimeout: readTimeout})
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
	// The sweep drops the rounds nobody waits for: no retries for them.
	waitFor(t, "abandoned rounds dropped", func() bool { return n1.openRounds() == 0 })
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

// TestReadIndexRoundTimesOut: a round raft does not answer (no leader)
// ends after ReadIndexTimeout for every caller in it, long before their own
// deadlines, with an error that is context.DeadlineExceeded; the caller's
// context is not what ended it.
func TestReadIndexRoundTimesOut(t *testing.T) {
	var p pair
	defer p.stop(t)
	n1 := p.startWith(t, 1, 300*time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const callers = 50
	errs := make(chan error, callers)
	started := time.Now()
	for i := 0; i < callers; i++ {
		go func() {
			_, err := n1.ReadIndex(ctx)
			errs <- err
		}()
	}
	for i := 0; i < callers; i++ {
		select {
		case err := <-errs:
			if !errors.Is(err, ErrReadIndexTimeout) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("caller %d: %v, want %v", i, err, ErrReadIndexTimeout)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of %d callers timed out", i, callers)
		}
	}
	if d := time.Since(started); d < 300*time.Millisecond {
		t.Fatalf("round ended after %v, before its timeout", d)
	}
	if ctx.Err() != nil {
		t.Fatal("the callers' own deadline passed")
	}
	if got := n1.PendingReads(); got != 0 {
		t.Fatalf("%d readers still pending", got)
	}
}

// TestReadIndexConcurrentCallersShareRounds: many callers at once all get
// an index at least the commit index before they called, in fewer rounds
// than callers.
func TestReadIndexConcurrentCallersShareRounds(t *testing.T) {
	var p pair
	defer p.stop(t)
	n1 := p.start(t, 1)
	p.start(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := n1.ReadIndex(ctx); err != nil {
		t.Fatalf("first read index: %v", err)
	}
	before := n1.CommitIndex()
	seq := n1.readRounds()
	const callers = 500
	var wg sync.WaitGroup
	for i := 0; i < callers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			idx, err := n1.ReadIndex(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			if idx < before {
				t.Errorf("read index %d below the commit index %d before the call", idx, before)
			}
		}()
	}
	wg.Wait()
	if rounds := n1.readRounds() - seq; rounds >= callers {
		t.Errorf("%d callers took %d rounds", callers, rounds)
	} else {
		t.Logf("%d callers, %d rounds", callers, rounds)
	}
}

// readRounds is how many read index rounds the driver has started.
func (n *Node) readRounds() uint64 {
	var seq uint64
	if err := n.do(context.Background(), func() { seq = n.readSeq }); err != nil {
		panic(err)
	}
	return seq
}

// openRounds is how many started read index rounds are unanswered.
func (n *Node) openRounds() int {
	var open int
	if err := n.do(context.Background(), func() { open = len(n.readers) }); err != nil {
		panic(err)
	}
	return open
}
