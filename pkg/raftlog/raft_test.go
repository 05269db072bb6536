package raftlog

import (
	"fmt"
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// raftNode drives a raft.RawNode with AsyncStorageWrites over a Log, the
// way kvd's driver does, but synchronously so the test is deterministic.
type raftNode struct {
	t       *testing.T
	id      uint64
	dir     string
	log     *Log
	rn      *raft.RawNode
	applied uint64
	cs      *raftpb.ConfState
	data    []string // applied normal entries with data
}

type raftCluster struct {
	t     *testing.T
	nodes map[uint64]*raftNode
	queue []*raftpb.Message
}

func (c *raftCluster) start(id uint64, dir string, bootstrap []raft.Peer) *raftNode {
	t := c.t
	t.Helper()
	l := openLog(t, dir, testOpts{segmentSize: 1024})
	st := l.Storage()
	snap, _ := st.Snapshot()
	n := &raftNode{t: t, id: id, dir: dir, log: l, applied: snap.GetMetadata().GetIndex(), cs: snap.GetMetadata().GetConfState()}
	rn, err := raft.NewRawNode(&raft.Config{
		ID:                 id,
		ElectionTick:       10,
		HeartbeatTick:      1,
		Storage:            st,
		Applied:            n.applied,
		MaxSizePerMsg:      4096,
		MaxInflightMsgs:    256,
		AsyncStorageWrites: true,
	})
	if err != nil {
		t.Fatalf("NewRawNode(%d): %v", id, err)
	}
	if l.IsNew() && bootstrap != nil {
		if err := rn.Bootstrap(bootstrap); err != nil {
			t.Fatalf("Bootstrap: %v", err)
		}
	}
	n.rn = rn
	c.nodes[id] = n
	return n
}

func (c *raftCluster) stop(id uint64) {
	if err := c.nodes[id].log.Close(); err != nil {
		c.t.Fatal(err)
	}
	delete(c.nodes, id)
}

// settle processes Ready and messages until nothing moves.
func (c *raftCluster) settle() {
	t := c.t
	t.Helper()
	for round := 0; ; round++ {
		if round > 10000 {
			t.Fatal("cluster does not settle")
		}
		moved := false
		for _, n := range c.nodes {
			if !n.rn.HasReady() {
				continue
			}
			moved = true
			rd := n.rn.Ready()
			for _, m := range rd.Messages {
				switch m.GetTo() {
				case raft.LocalAppendThread:
					n.handleAppend(m)
					c.queue = append(c.queue, m.GetResponses()...)
				case raft.LocalApplyThread:
					n.handleApply(m)
					c.queue = append(c.queue, m.GetResponses()...)
				default:
					c.queue = append(c.queue, m)
				}
			}
		}
		q := c.queue
		c.queue = nil
		for _, m := range q {
			moved = true
			if n, ok := c.nodes[m.GetTo()]; ok {
				if err := n.rn.Step(m); err != nil && err != raft.ErrStepPeerNotFound {
					t.Fatalf("node %d step %v: %v", n.id, m.GetType(), err)
				}
			}
		}
		if !moved {
			return
		}
	}
}

func (n *raftNode) handleAppend(m *raftpb.Message) {
	var hs *raftpb.HardState
	if m.Term != nil || m.Vote != nil || m.Commit != nil {
		hs = &raftpb.HardState{Term: m.Term, Vote: m.Vote, Commit: m.Commit}
	}
	if err := n.log.Save(hs, m.GetEntries(), m.GetSnapshot()); err != nil {
		n.t.Fatalf("node %d Save: %v", n.id, err)
	}
	if s := m.GetSnapshot(); !raft.IsEmptySnap(s) {
		// With async writes the append thread applies snapshots.
		n.applied = s.GetMetadata().GetIndex()
		n.cs = s.GetMetadata().GetConfState()
	}
}

func (n *raftNode) handleApply(m *raftpb.Message) {
	for _, e := range m.GetEntries() {
		switch e.GetType() {
		case raftpb.EntryConfChange:
			var cc raftpb.ConfChange
			if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
				n.t.Fatal(err)
			}
			n.cs = n.rn.ApplyConfChange(&cc)
		case raftpb.EntryNormal:
			if len(e.GetData()) > 0 {
				n.data = append(n.data, string(e.GetData()))
			}
		}
		n.applied = e.GetIndex()
	}
}

func (n *raftNode) propose(data string) {
	if err := n.rn.Propose([]byte(data)); err != nil {
		n.t.Fatalf("node %d propose: %v", n.id, err)
	}
}

// TestWithRaft runs real raft over the log: a single member writes, takes
// snapshots and restarts; then a learner joins and, because the leader's log
// is compacted, catches up through a snapshot saved by Save, and restarts
// from it.
func TestWithRaft(t *testing.T) {
	c := &raftCluster{t: t, nodes: map[uint64]*raftNode{}}
	dir1, dir2 := t.TempDir(), t.TempDir()
	n1 := c.start(1, dir1, []raft.Peer{{ID: 1}})
	c.settle()
	if err := n1.rn.Campaign(); err != nil {
		t.Fatal(err)
	}
	c.settle()
	for i := 0; i < 100; i++ {
		n1.propose(fmt.Sprintf("v%d", i))
		c.settle()
		if i == 40 || i == 80 {
			if err := n1.log.CreateSnapshot(n1.applied, n1.cs, nil); err != nil {
				t.Fatalf("CreateSnapshot(%d): %v", n1.applied, err)
			}
		}
	}
	if len(n1.data) != 100 {
		t.Fatalf("applied %d proposals, want 100", len(n1.data))
	}
	lastBefore, _ := n1.log.Storage().LastIndex()

	// Restart: raft must accept the recovered state and go on.
	c.stop(1)
	n1 = c.start(1, dir1, nil)
	if n1.log.IsNew() {
		t.Fatal("restarted member is new")
	}
	if last, _ := n1.log.Storage().LastIndex(); last != lastBefore {
		t.Fatalf("last index after restart %d, want %d", last, lastBefore)
	}
	c.settle()
	if err := n1.rn.Campaign(); err != nil {
		t.Fatal(err)
	}
	c.settle()
	if st := n1.rn.Status(); st.RaftState != raft.StateLeader {
		t.Fatalf("restarted member is %v, want leader", st.RaftState)
	}
	n1.propose("after-restart")
	c.settle()
	if got := n1.data[len(n1.data)-1]; got != "after-restart" {
		t.Fatalf("last applied %q", got)
	}
	// A learner joins; the leader's log is compacted, so it gets a snapshot.
	if err := n1.rn.ProposeConfChange(&raftpb.ConfChange{Type: raftpb.ConfChangeAddLearnerNode.Enum(), NodeId: new(uint64(2))}); err != nil {
		t.Fatal(err)
	}
	c.settle()
	if err := n1.log.CreateSnapshot(n1.applied, n1.cs, []byte("state")); err != nil {
		t.Fatal(err)
	}
	n2 := c.start(2, dir2, nil)
	for i := 0; i < 5; i++ {
		n1.rn.Tick() // a heartbeat unpauses replication to the new learner
		n1.propose(fmt.Sprintf("w%d", i))
		c.settle()
	}
	snap2, _ := n2.log.Storage().Snapshot()
	if raft.IsEmptySnap(snap2) {
		t.Fatal("learner did not receive a snapshot")
	}
	if n2.data[len(n2.data)-1] != "w4" || n2.applied != n1.applied {
		t.Fatalf("learner applied %d (%v), leader %d", n2.applied, n2.data, n1.applied)
	}
	want := viewOf(t, n2.log.Storage())
	c.stop(2)
	n2 = c.start(2, dir2, nil)
	if got := viewOf(t, n2.log.Storage()); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("learner after restart\n got %+v\nwant %+v", got, want)
	}
	c.settle()
	n1.rn.Tick()
	n1.propose("final")
	c.settle()
	if n2.data[len(n2.data)-1] != "final" {
		t.Fatalf("restarted learner did not apply the next proposal: %v", n2.data)
	}
	c.stop(1)
	c.stop(2)
}
