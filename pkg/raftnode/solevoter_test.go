package raftnode

import (
	"context"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/raftlog"
)

// A sole voter that restarts from a raft snapshot (its configuration in the
// snapshot, no conf change in the log to apply) campaigns at once, as etcd
// fast-forwards a single member's election ticks: here raft never ticks,
// so without that it would never lead.
func TestSoleVoterRestartedFromSnapshotLeadsWithoutTicks(t *testing.T) {
	dir := t.TempDir()
	h := start(t, dir)
	select {
	case <-h.node.LeaderKnown():
	case <-time.After(10 * time.Second):
		t.Fatal("sole voter did not become leader")
	}
	for range 3 {
		if err := h.node.Propose(context.Background(), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "proposals applied", func() bool { a, _ := h.app.snapshot(); return len(a) == 3 })
	_, index := h.app.snapshot()
	if err := h.group.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := h.log.CreateSnapshot(index, &raftpb.ConfState{Voters: []uint64{1}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := h.log.Close(); err != nil {
		t.Fatal(err)
	}

	l, err := raftlog.Open(raftlog.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	n, err := New(Config{ID: 1, TickInterval: time.Hour, ElectionTicks: 10, HeartbeatTicks: 1, Applied: index, Log: l, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	g := runNode(t, n, l)
	defer stopGroup(t, g)
	select {
	case <-n.LeaderKnown():
	case <-time.After(5 * time.Second):
		t.Fatal("a sole voter restarted from a snapshot did not campaign")
	}
	if n.Leader() != 1 {
		t.Fatalf("leader %d, want 1", n.Leader())
	}
}
