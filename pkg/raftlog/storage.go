package raftlog

import (
	"fmt"
	"sync"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Storage is the in-memory view of the durable log that raft reads through
// the raft.Storage interface. It only ever shows what has been fsynced: the
// Log updates it after each Save's fsync and after CreateSnapshot.
//
// Its methods are safe for concurrent use; raft reads it while the WAL
// writer updates it. Entries handed out are shared and must not be mutated,
// as the raft.Storage contract requires of both sides.
type Storage struct {
	mu sync.RWMutex
	// hs is the last persisted hard state; never nil.
	hs *raftpb.HardState
	// snap is the latest snapshot; never nil, its metadata always set.
	snap *raftpb.Snapshot
	// ents[0] is a dummy entry carrying the snapshot's index and term, so
	// Term(FirstIndex()-1) works after compaction. ents[i] has index
	// ents[0].Index+i.
	// Invariant: ents[0].GetIndex() <= snap.Metadata.Index: entries up to
	// the snapshot may stay for slow followers (Options.CatchUpEntries).
	ents []*raftpb.Entry
}

var _ raft.Storage = (*Storage)(nil)

func newStorage() *Storage {
	return &Storage{
		hs:   &raftpb.HardState{},
		snap: raftpb.EnsureSnapshot(nil),
		ents: []*raftpb.Entry{dummyEntry(0, 0)},
	}
}

func dummyEntry(index, term uint64) *raftpb.Entry {
	return &raftpb.Entry{Index: new(index), Term: new(term)}
}

// InitialState implements raft.Storage: the persisted hard state and the
// conf state of the latest snapshot. Raft replays the conf changes in the
// entries after the snapshot itself.
func (s *Storage) InitialState() (*raftpb.HardState, *raftpb.ConfState, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	hs := cloneHardState(s.hs)
	cs := raftpb.EnsureConfState(proto.Clone(raftpb.EnsureConfState(s.snap.GetMetadata().GetConfState())).(*raftpb.ConfState))
	return hs, cs, nil
}

// HardState returns a copy of the last persisted hard state.
func (s *Storage) HardState() *raftpb.HardState {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return cloneHardState(s.hs)
}

// Entries implements raft.Storage.
func (s *Storage) Entries(lo, hi, maxSize uint64) ([]*raftpb.Entry, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	offset := s.ents[0].GetIndex()
	if lo <= offset {
		return nil, raft.ErrCompacted
	}
	if hi > s.lastIndex()+1 {
		return nil, fmt.Errorf("raftlog: entries [%d, %d) out of bound, last index %d", lo, hi, s.lastIndex())
	}
	if lo >= hi {
		return nil, nil
	}
	if len(s.ents) == 1 {
		return nil, raft.ErrUnavailable
	}
	ents := limitSize(s.ents[lo-offset:hi-offset], maxSize)
	// The full slice expression makes a caller's append copy instead of
	// overwriting s.ents.
	return ents[:len(ents):len(ents)], nil
}

// limitSize returns the longest prefix of ents whose encoded size stays
// within maxSize, but at least one entry.
func limitSize(ents []*raftpb.Entry, maxSize uint64) []*raftpb.Entry {
	if len(ents) == 0 {
		return ents
	}
	size := uint64(proto.Size(ents[0]))
	for n := 1; n < len(ents); n++ {
		size += uint64(proto.Size(ents[n]))
		if size > maxSize {
			return ents[:n]
		}
	}
	return ents
}

// Term implements raft.Storage.
func (s *Storage) Term(i uint64) (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	offset := s.ents[0].GetIndex()
	if i < offset {
		return 0, raft.ErrCompacted
	}
	if i-offset >= uint64(len(s.ents)) {
		return 0, raft.ErrUnavailable
	}
	return s.ents[i-offset].GetTerm(), nil
}

// LastIndex implements raft.Storage.
func (s *Storage) LastIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.lastIndex(), nil
}

func (s *Storage) lastIndex() uint64 {
	return s.ents[0].GetIndex() + uint64(len(s.ents)) - 1
}

// FirstIndex implements raft.Storage.
func (s *Storage) FirstIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.ents[0].GetIndex() + 1, nil
}

// Snapshot implements raft.Storage: a copy of the latest snapshot.
func (s *Storage) Snapshot() (*raftpb.Snapshot, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return proto.Clone(s.snap).(*raftpb.Snapshot), nil
}

// applySave installs what one Save made durable. The caller has checked that
// ents (after snap, if any) are contiguous and attach to the log.
func (s *Storage) applySave(snap *raftpb.Snapshot, ents []*raftpb.Entry, hs *raftpb.HardState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if snap != nil {
		md := snap.GetMetadata()
		s.snap = snap
		s.ents = []*raftpb.Entry{dummyEntry(md.GetIndex(), md.GetTerm())}
	}
	if len(ents) > 0 {
		at := ents[0].GetIndex() - s.ents[0].GetIndex()
		if at == uint64(len(s.ents)) {
			// A plain append: handed-out slices are capped (see Entries), so
			// they cannot see or clobber the new tail. Amortised O(1), where
			// copying the whole log per Save was O(log length).
			s.ents = append(s.ents, ents...)
		} else {
			// Replacing a suffix: copy, so that entries already handed out
			// are not overwritten.
			s.ents = append(s.ents[:at:at], ents...)
		}
	}
	if hs != nil {
		s.hs = hs
	}
}

// compact makes snap the latest snapshot and drops the entries it covers,
// except the last keep of them, which stay for followers slightly behind
// (raft sends them entries instead of a snapshot). The caller has checked
// snap's index lies in (snapshot index, last index].
func (s *Storage) compact(snap *raftpb.Snapshot, keep uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	md := snap.GetMetadata()
	offset := s.ents[0].GetIndex()
	at := md.GetIndex() - min(keep, md.GetIndex())
	if at <= offset {
		s.snap = snap
		return
	}
	i := at - offset
	// A fresh slice: the old one may still be referenced by callers of
	// Entries, and entries are immutable.
	ents := make([]*raftpb.Entry, 1, uint64(len(s.ents))-i)
	ents[0] = dummyEntry(at, s.ents[i].GetTerm())
	ents = append(ents, s.ents[i+1:]...)
	s.ents = ents
	s.snap = snap
}
