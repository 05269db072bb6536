package raftlog

import (
	"slices"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

func confEnt(t *testing.T, index, term uint64, typ raftpb.ConfChangeType, id uint64) *raftpb.Entry {
	t.Helper()
	data, err := proto.Marshal(&raftpb.ConfChange{Type: typ.Enum(), NodeId: new(id)})
	if err != nil {
		t.Fatal(err)
	}
	return &raftpb.Entry{Index: new(index), Term: new(term), Type: raftpb.EntryConfChange.Enum(), Data: data}
}

// confChanges decodes the conf change entries of s from lo on.
func confChanges(t *testing.T, s *Storage, lo uint64) []string {
	t.Helper()
	last, _ := s.LastIndex()
	es, err := s.Entries(lo, last+1, 1<<40)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		var cc raftpb.ConfChange
		if e.GetType() != raftpb.EntryConfChange || proto.Unmarshal(e.GetData(), &cc) != nil {
			t.Fatalf("entry %d is no conf change", e.GetIndex())
		}
		out = append(out, cc.GetType().String()+" "+string(rune('0'+cc.GetNodeId())))
	}
	return out
}

// Three members bootstrapped at indexes 1-3, a learner 4 added at 5 and
// member 3 removed at 6; entries up to 8 committed, 9-10 not. Forcing a
// new cluster on member 1 drops 9-10 and removes 2 and 4 at the old term,
// committed, durably.
func TestForceNewClusterRemovesOthers(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, testOpts{})
	es := []*raftpb.Entry{
		confEnt(t, 1, 1, raftpb.ConfChangeAddNode, 1),
		confEnt(t, 2, 1, raftpb.ConfChangeAddNode, 2),
		confEnt(t, 3, 1, raftpb.ConfChangeAddNode, 3),
		ent(4, 2),
		confEnt(t, 5, 2, raftpb.ConfChangeAddLearnerNode, 4),
		confEnt(t, 6, 2, raftpb.ConfChangeRemoveNode, 3),
	}
	es = append(es, ents(7, 10, 3)...)
	mustSave(t, l, hardState(3, 2, 8), es, nil)
	l = reopen(t, l, dir, testOpts{})

	res, err := l.ForceNewCluster(1, 7, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.OldCommit != 8 || res.Commit != 10 || !slices.Equal(res.Removed, []uint64{2, 4}) || res.AddedSelf {
		t.Fatalf("result %+v", res)
	}
	for _, s := range []*Storage{l.Storage(), reopen(t, l, dir, testOpts{}).Storage()} {
		if got, want := confChanges(t, s, 9), []string{"ConfChangeRemoveNode 2", "ConfChangeRemoveNode 4"}; !slices.Equal(got, want) {
			t.Fatalf("appended %v, want %v", got, want)
		}
		hs := s.HardState()
		if hs.GetCommit() != 10 || hs.GetTerm() != 3 || hs.GetVote() != 2 {
			t.Fatalf("hard state %v", hs)
		}
		if term, _ := s.Term(9); term != 3 {
			t.Fatalf("term of 9: %d", term)
		}
	}
}

// The configuration starts at the snapshot's; a self missing from it is
// added first; a commit index behind the applied index is raised to it.
func TestForceNewClusterFromSnapshot(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, testOpts{})
	mustSave(t, l, hardState(2, 0, 5), nil, snapshot(5, 2, 2, 3))
	mustSave(t, l, hardState(2, 0, 5), ents(6, 8, 2), nil)
	res, err := l.ForceNewCluster(1, 7, []byte(`{"id":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if res.OldCommit != 5 || res.Commit != 10 || !res.AddedSelf || !slices.Equal(res.Removed, []uint64{2, 3}) {
		t.Fatalf("result %+v", res)
	}
	if got, want := confChanges(t, l.Storage(), 8), []string{"ConfChangeAddNode 1", "ConfChangeRemoveNode 2", "ConfChangeRemoveNode 3"}; !slices.Equal(got, want) {
		t.Fatalf("appended %v, want %v", got, want)
	}

	// A one-member configuration needs nothing appended.
	res, err = l.ForceNewCluster(1, 10, nil)
	if err != nil || res.Commit != 10 || len(res.Removed) != 0 || res.AddedSelf {
		t.Fatalf("second force: %+v %v", res, err)
	}
}
