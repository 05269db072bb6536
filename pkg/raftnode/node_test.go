package raftnode

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-dev/kvd/pkg/actors"
	"github.com/kvd-dev/kvd/pkg/entrybatch"
	"github.com/kvd-dev/kvd/pkg/raftlog"
)

// fakeApplier stands in for the applier: it records normal entries, applies
// conf changes to raft and hands the responses back.
type fakeApplier struct {
	n  *Node
	mu sync.Mutex
	// applied holds the data of applied normal entries, in order.
	applied [][]byte
	index   uint64
	changed chan struct{}
}

func (f *fakeApplier) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-f.n.Applies.Ready():
		}
		for _, m := range f.n.Applies.Take() {
			for _, e := range m.GetEntries() {
				switch e.GetType() {
				case raftpb.EntryConfChange:
					cc := &raftpb.ConfChange{}
					if err := proto.Unmarshal(e.GetData(), cc); err != nil {
						return err
					}
					if _, err := f.n.ApplyConfChange(cc); err != nil {
						return err
					}
				case raftpb.EntryNormal:
					if len(e.GetData()) > 0 {
						f.mu.Lock()
						f.applied = append(f.applied, e.GetData())
						f.mu.Unlock()
					}
				}
				f.mu.Lock()
				f.index = e.GetIndex()
				f.mu.Unlock()
			}
			f.n.Deliver(m.GetResponses())
			select {
			case f.changed <- struct{}{}:
			default:
			}
		}
	}
}

func (f *fakeApplier) snapshot() ([][]byte, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]byte(nil), f.applied...), f.index
}

type harness struct {
	node  *Node
	app   *fakeApplier
	group *actors.Group
	log   *raftlog.Log
}

func start(t *testing.T, dir string) *harness {
	t.Helper()
	l, err := raftlog.Open(raftlog.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	var peers []raft.Peer
	if l.IsNew() {
		peers = []raft.Peer{{ID: 1}}
	}
	n, err := New(Config{ID: 1, Peers: peers, TickInterval: 10 * time.Millisecond, ElectionTicks: 10, HeartbeatTicks: 1, Log: l, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{node: n, log: l, app: &fakeApplier{n: n, changed: make(chan struct{}, 1)}}
	h.group = actors.NewGroup(zap.NewNop(), func(err error) { t.Errorf("actor failed: %v", err) })
	h.group.Go("raft", n)
	h.group.Go("wal", NewWALWriter(l, n, nil))
	h.group.Go("applier", h.app)
	return h
}

func (h *harness) stop(t *testing.T) {
	t.Helper()
	if err := h.group.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := h.log.Close(); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestSoleVoterLeadsProposalsApplyInOrderAndSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	h := start(t, dir)
	select {
	case <-h.node.LeaderKnown():
	case <-time.After(10 * time.Second):
		t.Fatal("sole voter did not become leader")
	}
	if h.node.Leader() != 1 {
		t.Fatalf("leader %d, want 1", h.node.Leader())
	}

	// Concurrent proposers: every proposal is applied exactly once, each
	// proposer's in its own order.
	const proposers, each = 8, 50
	var wg sync.WaitGroup
	for p := 0; p < proposers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if err := h.node.Propose(context.Background(), []byte(fmt.Sprintf("%d/%03d", p, i))); err != nil {
					t.Errorf("propose: %v", err)
					return
				}
			}
		}(p)
	}
	wg.Wait()
	waitFor(t, "all proposals applied", func() bool { a, _ := h.app.snapshot(); return len(a) == proposers*each })
	applied, index := h.app.snapshot()
	seen := map[string]bool{}
	last := map[byte]string{}
	for _, d := range applied {
		s := string(d)
		if seen[s] {
			t.Fatalf("%s applied twice", s)
		}
		seen[s] = true
		if prev := last[s[0]]; prev > s {
			t.Fatalf("proposer %c: %s applied after %s", s[0], s, prev)
		}
		last[s[0]] = s
	}

	// A read index covers everything applied before the call.
	ri, err := h.node.ReadIndex(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if ri < index {
		t.Fatalf("read index %d below applied index %d", ri, index)
	}
	h.stop(t)

	// After a restart raft redelivers the committed log (Applied is 0: no
	// snapshot) in the same order, and the member leads again.
	h = start(t, dir)
	defer h.stop(t)
	waitFor(t, "log replayed", func() bool { a, _ := h.app.snapshot(); return len(a) == proposers*each })
	replayed, _ := h.app.snapshot()
	for i := range applied {
		if string(replayed[i]) != string(applied[i]) {
			t.Fatalf("entry %d replayed as %s, was %s", i, replayed[i], applied[i])
		}
	}
	select {
	case <-h.node.LeaderKnown():
	case <-time.After(10 * time.Second):
		t.Fatal("no leader after restart")
	}
	if err := h.node.Propose(context.Background(), []byte("after")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "proposal after restart", func() bool { a, _ := h.app.snapshot(); return len(a) == proposers*each+1 })
}

func TestMergeEntriesReplacesConflictingSuffix(t *testing.T) {
	e := func(i, term uint64) *raftpb.Entry { return &raftpb.Entry{Index: &i, Term: &term} }
	got := mergeEntries([]*raftpb.Entry{e(5, 1), e(6, 1), e(7, 1)}, []*raftpb.Entry{e(6, 2), e(7, 2)})
	if len(got) != 3 || got[1].GetTerm() != 2 || got[2].GetIndex() != 7 {
		t.Fatalf("merge = %v", got)
	}
	got = mergeEntries([]*raftpb.Entry{e(5, 1)}, []*raftpb.Entry{e(4, 2)})
	if len(got) != 1 || got[0].GetIndex() != 4 {
		t.Fatalf("merge before first = %v", got)
	}
	got = mergeEntries(nil, []*raftpb.Entry{e(1, 1)})
	if len(got) != 1 {
		t.Fatalf("merge into empty = %v", got)
	}
}

// TestBackToBackConfChangesAllApply proposes conf changes without waiting
// for the previous one: raft alone would turn all but the first into empty
// entries while the first is not applied, and their proposers would time out.
func TestBackToBackConfChangesAllApply(t *testing.T) {
	h := start(t, t.TempDir())
	defer h.stop(t)
	waitFor(t, "leadership", func() bool { return h.node.Leader() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const n = 5
	for id := uint64(2); id < 2+n; id++ {
		cc := &raftpb.ConfChange{Type: raftpb.ConfChangeType_ConfChangeAddLearnerNode.Enum(), NodeId: proto.Uint64(id)}
		if err := h.node.ProposeConfChange(ctx, cc); err != nil {
			t.Fatalf("propose learner %d: %v", id, err)
		}
	}
	waitFor(t, "all learners in the configuration", func() bool {
		st, err := h.node.Status(ctx)
		return err == nil && len(st.Config.Learners) == n
	})
}

// runNode runs n as a member's actors do: with a WAL writer on l and a fake
// applier.
func runNode(t *testing.T, n *Node, l *raftlog.Log) *actors.Group {
	g := actors.NewGroup(zap.NewNop(), func(err error) { t.Errorf("actor failed: %v", err) })
	g.Go("raft", n)
	g.Go("wal", NewWALWriter(l, n, nil))
	g.Go("applier", &fakeApplier{n: n, changed: make(chan struct{}, 1)})
	return g
}

// stopGroup stops g and fails t on an actor's error.
func stopGroup(t *testing.T, g *actors.Group) {
	if err := g.Stop(); err != nil {
		t.Error(err)
	}
}

// droppedRecorder records the proposals raft refused (Dropped).
type droppedRecorder struct {
	mu  sync.Mutex
	ids map[uint64]error
	got chan struct{}
}

func (d *droppedRecorder) ProposalDropped(id uint64, err error) {
	d.mu.Lock()
	d.ids[id] = err
	d.mu.Unlock()
	d.got <- struct{}{}
}

func TestProposeAsyncAppliesOrReportsTheDrop(t *testing.T) {
	h := start(t, t.TempDir())
	defer h.stop(t)
	waitFor(t, "leadership", func() bool { return h.node.Leader() == 1 })
	d := &droppedRecorder{ids: map[uint64]error{}, got: make(chan struct{}, 100)}
	const n = 50
	for i := 0; i < n; i++ {
		if err := h.node.ProposeAsync(context.Background(), []byte(fmt.Sprintf("a%02d", i)), uint64(i), d, false); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the proposals applied", func() bool { a, _ := h.app.snapshot(); return len(a) == n })
	applied, _ := h.app.snapshot()
	for i, data := range applied {
		if want := fmt.Sprintf("a%02d", i); string(data) != want {
			t.Fatalf("entry %d is %q, want %q", i, data, want)
		}
	}
	d.mu.Lock()
	accepted := len(d.ids) == 0
	d.mu.Unlock()
	if !accepted {
		t.Fatal("accepted proposals were reported dropped")
	}

	// A member of three that hears from no peer has no leader: raft
	// refuses, and the refusal reaches Dropped with the proposal's id.
	lone, l := leaderless(t)
	g := actors.NewGroup(zap.NewNop(), func(err error) { t.Errorf("actor failed: %v", err) })
	g.Go("raft", lone)
	g.Go("wal", NewWALWriter(l, lone, nil))
	defer stopGroup(t, g)
	if err := lone.ProposeAsync(context.Background(), []byte("x"), 77, d, false); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.got:
	case <-time.After(10 * time.Second):
		t.Fatal("no drop reported for a proposal without a leader")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err, ok := d.ids[77]; !ok || !errors.Is(err, raft.ErrProposalDropped) {
		t.Fatalf("drops %v, want id 77 with %v", d.ids, raft.ErrProposalDropped)
	}
}

// leaderless is member 1 of three that hears from no peer (not yet running):
// it has no leader, so raft refuses its proposals.
func leaderless(t *testing.T) (*Node, *raftlog.Log) {
	t.Helper()
	l, err := raftlog.Open(raftlog.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	lone, err := New(Config{ID: 1, Peers: []raft.Peer{{ID: 1}, {ID: 2}, {ID: 3}}, TickInterval: time.Hour,
		ElectionTicks: 10, HeartbeatTicks: 1, Log: l, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	return lone, l
}

// flatten returns the requests of applied entries, batched or not.
func flatten(t *testing.T, applied [][]byte) []string {
	t.Helper()
	var out []string
	for _, data := range applied {
		if !entrybatch.Is(data) {
			out = append(out, string(data))
			continue
		}
		if err := entrybatch.Split(data, func(r []byte) error { out = append(out, string(r)); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func TestBatchingSharesEntriesAndKeepsOrder(t *testing.T) {
	h := start(t, t.TempDir())
	defer h.stop(t)
	waitFor(t, "leadership", func() bool { return h.node.Leader() == 1 })
	d := &droppedRecorder{ids: map[uint64]error{}, got: make(chan struct{}, 1000)}

	// Off (the default): a batchable proposal is an entry of its own.
	for i := 0; i < 20; i++ {
		if err := h.node.ProposeAsync(context.Background(), []byte(fmt.Sprintf("off%02d", i)), uint64(i), d, true); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the proposals applied", func() bool { a, _ := h.app.snapshot(); return len(a) == 20 })
	if a, _ := h.app.snapshot(); len(flatten(t, a)) != 20 || h.node.BatchedEntries() != 0 {
		t.Fatalf("batching off: %d entries, %d batches", len(a), h.node.BatchedEntries())
	}

	// On: writers' proposals share entries; each writer's stay in its order,
	// and a proposal that is not batchable keeps an entry of its own.
	h.node.SetBatching(true)
	const writers, each = 4, 100
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				data := []byte(fmt.Sprintf("w%d/%03d", w, i))
				batchable := i%10 != 0
				if err := h.node.ProposeAsync(context.Background(), data, uint64(1000*w+i), d, batchable); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	waitFor(t, "the batched proposals applied", func() bool {
		a, _ := h.app.snapshot()
		return len(flatten(t, a)) == 20+writers*each
	})
	applied, _ := h.app.snapshot()
	next := make([]int, writers)
	for _, r := range flatten(t, applied)[20:] {
		var w, i int
		if _, err := fmt.Sscanf(r, "w%d/%03d", &w, &i); err != nil || i != next[w] {
			t.Fatalf("request %q out of order (writer %d expected %d)", r, w, next[w])
		}
		next[w]++
	}
	for _, data := range applied {
		if !entrybatch.Is(data) {
			continue
		}
		err := entrybatch.Split(data, func(r []byte) error {
			var w, i int
			if _, err := fmt.Sscanf(string(r), "w%d/%03d", &w, &i); err != nil || i%10 == 0 {
				t.Errorf("request %q, not batchable, was batched", r)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if h.node.BatchedEntries() == 0 || len(applied) >= 20+writers*each {
		t.Fatalf("%d entries for %d requests, %d batches: nothing was batched", len(applied), 20+writers*each, h.node.BatchedEntries())
	}
	d.mu.Lock()
	if len(d.ids) != 0 {
		t.Errorf("accepted proposals reported dropped: %v", d.ids)
	}
	d.mu.Unlock()
}

// A batch raft refuses is reported dropped for each of its proposals.
func TestRefusedBatchDropsEachProposal(t *testing.T) {
	lone, l := leaderless(t)
	lone.SetBatching(true)
	d := &droppedRecorder{ids: map[uint64]error{}, got: make(chan struct{}, 100)}
	// Queued before the driver runs, so its first turn takes them together.
	for i := 1; i <= 10; i++ {
		if err := lone.ProposeAsync(context.Background(), []byte("x"), uint64(i), d, true); err != nil {
			t.Fatal(err)
		}
	}
	g := actors.NewGroup(zap.NewNop(), func(err error) { t.Errorf("actor failed: %v", err) })
	g.Go("raft", lone)
	g.Go("wal", NewWALWriter(l, lone, nil))
	defer stopGroup(t, g)
	for i := 0; i < 10; i++ {
		select {
		case <-d.got:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of 10 drops reported", i)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := uint64(1); i <= 10; i++ {
		if err := d.ids[i]; !errors.Is(err, raft.ErrProposalDropped) {
			t.Errorf("proposal %d: %v, want %v", i, err, raft.ErrProposalDropped)
		}
	}
	if lone.BatchedEntries() != 1 {
		t.Errorf("%d batches proposed, want the 10 proposals in 1", lone.BatchedEntries())
	}
}

// While batching, proposals that arrive during a WAL write wait for it to
// end and then share one entry; with batching off they do not wait.
func TestBatchingHoldsProposalsDuringAWALWrite(t *testing.T) {
	h := start(t, t.TempDir())
	defer h.stop(t)
	waitFor(t, "leadership", func() bool { return h.node.Leader() == 1 })
	d := &droppedRecorder{ids: map[uint64]error{}, got: make(chan struct{}, 100)}
	applied := func() int { a, _ := h.app.snapshot(); return len(flatten(t, a)) }
	base := applied()

	// A WAL write in flight (as the driver counts them) while batching is
	// off: proposals go to raft at once.
	h.node.walPending.Add(1)
	if err := h.node.ProposeAsync(context.Background(), []byte("off"), 1, d, true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the proposal applied", func() bool { return applied() == base+1 })

	// Turned on, the driver holds from its next turn (a tick every 10 ms
	// makes one): until then it may be waiting with the queue open.
	h.node.SetBatching(true)
	time.Sleep(200 * time.Millisecond)
	for i := 0; i < 10; i++ {
		if err := h.node.ProposeAsync(context.Background(), []byte(fmt.Sprintf("held%d", i)), uint64(10+i), d, true); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	if n := applied(); n != base+1 {
		t.Fatalf("%d proposals applied during the WAL write, want none", n-base-1)
	}
	batches := h.node.BatchedEntries()
	h.node.appendsWritten(1) // the write ends
	waitFor(t, "the held proposals applied", func() bool { return applied() == base+11 })
	if got := h.node.BatchedEntries() - batches; got != 1 {
		t.Fatalf("the 10 held proposals took %d batches, want 1", got)
	}
}

// proposeBatch reuses the leader's batch buffer because a leader's raft
// copies a proposal's data into its log. If a raft upgrade stops copying,
// this fails before the log does.
func TestLeaderProposalIsCopied(t *testing.T) {
	st := raft.NewMemoryStorage()
	if err := st.ApplySnapshot(&raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{
		Index: new(uint64(1)), Term: new(uint64(1)),
		ConfState: &raftpb.ConfState{Voters: []uint64{1}},
	}}); err != nil {
		t.Fatal(err)
	}
	rn, err := raft.NewRawNode(&raft.Config{ID: 1, ElectionTick: 10, HeartbeatTick: 1, Storage: st,
		MaxSizePerMsg: 1 << 20, MaxInflightMsgs: 256, Logger: &raftLogger{s: zap.NewNop().Sugar()}})
	if err != nil {
		t.Fatal(err)
	}
	if err := rn.Campaign(); err != nil {
		t.Fatal(err)
	}
	for rn.HasReady() {
		rd := rn.Ready()
		if err := st.Append(rd.Entries); err != nil {
			t.Fatal(err)
		}
		rn.Advance(rd)
	}
	if s := rn.BasicStatus().RaftState; s != raft.StateLeader {
		t.Fatalf("state %v, want leader", s)
	}
	buf := []byte("proposal as proposed")
	if err := rn.Propose(buf); err != nil {
		t.Fatal(err)
	}
	copy(buf, "overwritten after it")
	found := false
	for rn.HasReady() && !found {
		rd := rn.Ready()
		for _, e := range rd.Entries {
			if len(e.GetData()) > 0 {
				found = true
				if got := string(e.GetData()); got != "proposal as proposed" {
					t.Fatalf("entry data %q: raft kept the proposer's buffer", got)
				}
			}
		}
		if err := st.Append(rd.Entries); err != nil {
			t.Fatal(err)
		}
		rn.Advance(rd)
	}
	if !found {
		t.Fatal("the proposal never reached a Ready")
	}
}
