package raftlog

import (
	"fmt"
	"math"
	"slices"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// ForceNewResult is what ForceNewCluster did.
type ForceNewResult struct {
	// OldCommit is the commit index of the hard state found; Commit the one
	// written (the last conf change appended, or the old commit index
	// raised to the applied index).
	OldCommit, Commit uint64
	// Removed are the voters and learners removed; AddedSelf is set when
	// self was not in the configuration and was added first.
	Removed   []uint64
	AddedSelf bool
}

// ForceNewCluster rewrites the tail of a restarted member's log as etcd's
// --force-new-cluster does (bootstrapWALFromSnapshot): the commit index is
// raised to applied if it lags (a new commit index alone is not fsynced, so
// the backend may have applied past it), entries after it are discarded, and
// conf changes are appended and committed at the current term that leave
// self the only member: an AddNode of self (with selfContext) if the
// configuration lacks it, then a RemoveNode of every other voter and
// learner. The configuration is the latest snapshot's plus the conf changes
// of the committed entries after it. Raft then applies these entries at
// start like any committed entry.
//
// Call it after Open and before raft starts.
func (l *Log) ForceNewCluster(self, applied uint64, selfContext []byte) (ForceNewResult, error) {
	hs := l.st.HardState()
	snap, err := l.st.Snapshot()
	if err != nil {
		return ForceNewResult{}, err
	}
	last, err := l.st.LastIndex()
	if err != nil {
		return ForceNewResult{}, err
	}
	snapIndex := snap.GetMetadata().GetIndex()
	commit := min(max(hs.GetCommit(), applied, snapIndex), last)
	res := ForceNewResult{OldCommit: hs.GetCommit(), Commit: commit}

	ids := map[uint64]bool{}
	cs := snap.GetMetadata().GetConfState()
	for _, id := range cs.GetVoters() {
		ids[id] = true
	}
	for _, id := range cs.GetLearners() {
		ids[id] = true
	}
	if commit > snapIndex {
		ents, err := l.st.Entries(snapIndex+1, commit+1, math.MaxUint64)
		if err != nil {
			return ForceNewResult{}, fmt.Errorf("raftlog: force new cluster: read entries %d..%d: %w", snapIndex+1, commit, err)
		}
		for _, e := range ents {
			if err := effectiveIDs(ids, e); err != nil {
				return ForceNewResult{}, fmt.Errorf("raftlog: force new cluster: %w", err)
			}
		}
	}

	term := hs.GetTerm()
	next := commit + 1
	var ents []*raftpb.Entry
	add := func(cc *raftpb.ConfChange) {
		data, err := proto.Marshal(cc)
		if err != nil {
			panic(fmt.Sprintf("raftlog: marshal conf change: %v", err)) // plain fields
		}
		ents = append(ents, &raftpb.Entry{Type: raftpb.EntryConfChange.Enum(), Term: new(term), Index: new(next), Data: data})
		next++
	}
	// Self first: raft panics if the set of voters ever becomes empty.
	if !ids[self] {
		add(&raftpb.ConfChange{Type: raftpb.ConfChangeAddNode.Enum(), NodeId: new(self), Context: selfContext})
		res.AddedSelf = true
	}
	others := make([]uint64, 0, len(ids))
	for id := range ids {
		if id != self {
			others = append(others, id)
		}
	}
	slices.Sort(others)
	for _, id := range others {
		add(&raftpb.ConfChange{Type: raftpb.ConfChangeRemoveNode.Enum(), NodeId: new(id)})
	}
	res.Removed = others
	if len(ents) > 0 {
		res.Commit = ents[len(ents)-1].GetIndex()
	}
	if len(ents) == 0 && res.Commit == hs.GetCommit() {
		return res, nil
	}
	nhs := &raftpb.HardState{Term: new(term), Vote: new(hs.GetVote()), Commit: new(res.Commit)}
	if err := l.Save(nhs, ents, nil); err != nil {
		return ForceNewResult{}, fmt.Errorf("raftlog: force new cluster: %w", err)
	}
	return res, nil
}

// effectiveIDs applies e's conf change, if it is one, to the member set ids,
// as etcd's GetEffectiveNodeIDsFromWALEntries.
func effectiveIDs(ids map[uint64]bool, e *raftpb.Entry) error {
	switch e.GetType() {
	case raftpb.EntryConfChange:
		var cc raftpb.ConfChange
		if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
			return fmt.Errorf("decode conf change %d: %w", e.GetIndex(), err)
		}
		applySingle(ids, cc.GetType(), cc.GetNodeId())
	case raftpb.EntryConfChangeV2:
		var cc raftpb.ConfChangeV2
		if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
			return fmt.Errorf("decode conf change %d: %w", e.GetIndex(), err)
		}
		for _, c := range cc.GetChanges() {
			applySingle(ids, c.GetType(), c.GetNodeId())
		}
	}
	return nil
}

func applySingle(ids map[uint64]bool, t raftpb.ConfChangeType, id uint64) {
	if id == 0 {
		// An emptied (refused) change.
		return
	}
	switch t {
	case raftpb.ConfChangeAddNode, raftpb.ConfChangeAddLearnerNode:
		ids[id] = true
	case raftpb.ConfChangeRemoveNode:
		delete(ids, id)
	}
}
