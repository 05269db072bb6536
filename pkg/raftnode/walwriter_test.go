package raftnode

import (
	"context"
	"slices"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/kvd-dev/kvd/pkg/raftlog"
)

// When snapshots pile up behind a slow install, one batch holds several:
// only the newest is installed and saved, then what follows it, and the
// hard state lands after the snapshot it may point into.
func TestWALWriterInstallsOnlyNewestSnapshot(t *testing.T) {
	dir := t.TempDir()
	l, err := raftlog.Open(raftlog.Options{Dir: dir, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	var installed []uint64
	w := &WALWriter{log: l, node: &Node{}, InstallSnapshot: func(_ context.Context, s *raftpb.Snapshot) error {
		installed = append(installed, s.GetMetadata().GetIndex())
		return nil
	}}
	snap := func(i uint64) *raftpb.Message {
		return &raftpb.Message{
			Term: new(uint64(2)), Vote: new(uint64(0)), Commit: new(i),
			Snapshot: &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: new(i), Term: new(uint64(2)),
				ConfState: &raftpb.ConfState{Voters: []uint64{1}}}},
		}
	}
	ents := &raftpb.Message{Term: new(uint64(2)), Vote: new(uint64(0)), Commit: new(uint64(22)), Entries: []*raftpb.Entry{
		{Index: new(uint64(21)), Term: new(uint64(2)), Type: raftpb.EntryNormal.Enum()},
		{Index: new(uint64(22)), Term: new(uint64(2)), Type: raftpb.EntryNormal.Enum()},
	}}
	batch := []Append{{Msg: snap(10)}, {Msg: snap(20)}, {Msg: ents}}
	if err := w.write(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(installed, []uint64{20}) {
		t.Fatalf("installed snapshots %v, want only the newest, 20", installed)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, err = raftlog.Open(raftlog.Options{Dir: dir, NoSync: true})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer l.Close()
	st := l.Storage()
	s, _ := st.Snapshot()
	last, _ := st.LastIndex()
	hs, _, _ := st.InitialState()
	if s.GetMetadata().GetIndex() != 20 || last != 22 || hs.GetCommit() != 22 {
		t.Fatalf("after reopen: snapshot %d, last index %d, commit %d; want 20, 22, 22", s.GetMetadata().GetIndex(), last, hs.GetCommit())
	}
}
