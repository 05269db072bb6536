package raftlog

import (
	"errors"
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

func TestStorageReads(t *testing.T) {
	l := openLog(t, t.TempDir(), testOpts{})
	defer l.Close()
	mustSave(t, l, hardState(3, 1, 9), ents(1, 10, 3), nil)
	if err := l.CreateSnapshot(4, &raftpb.ConfState{Voters: []uint64{1, 2, 3}}, nil); err != nil {
		t.Fatal(err)
	}
	s := l.Storage()
	size := uint64(proto.Size(ent(5, 3)))
	tests := []struct {
		name       string
		lo, hi     uint64
		maxSize    uint64
		wantFirst  uint64
		wantLen    int
		wantErr    error
		wantAnyErr bool
	}{
		{name: "all", lo: 5, hi: 11, maxSize: ^uint64(0), wantFirst: 5, wantLen: 6},
		{name: "middle", lo: 6, hi: 8, maxSize: ^uint64(0), wantFirst: 6, wantLen: 2},
		{name: "limited to two", lo: 5, hi: 11, maxSize: 2 * size, wantFirst: 5, wantLen: 2},
		{name: "at least one", lo: 5, hi: 11, maxSize: 0, wantFirst: 5, wantLen: 1},
		{name: "compacted", lo: 4, hi: 6, maxSize: ^uint64(0), wantErr: raft.ErrCompacted},
		{name: "compacted far", lo: 1, hi: 6, maxSize: ^uint64(0), wantErr: raft.ErrCompacted},
		{name: "beyond last", lo: 5, hi: 12, maxSize: ^uint64(0), wantAnyErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			es, err := s.Entries(tt.lo, tt.hi, tt.maxSize)
			switch {
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			case tt.wantAnyErr:
				if err == nil {
					t.Fatal("no error")
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if len(es) != tt.wantLen || es[0].GetIndex() != tt.wantFirst {
				t.Fatalf("got %d entries from %d, want %d from %d", len(es), es[0].GetIndex(), tt.wantLen, tt.wantFirst)
			}
			// Appending to the returned slice must not disturb Storage.
			next := tt.wantFirst + uint64(tt.wantLen)
			_ = append(es, ent(99, 99))
			if e, _ := s.Entries(next, next+1, ^uint64(0)); next <= 10 && e[0].GetIndex() != next {
				t.Fatalf("append to returned slice overwrote entry %d", next)
			}
		})
	}

	for _, tc := range []struct {
		i        uint64
		wantTerm uint64
		wantErr  error
	}{
		{3, 0, raft.ErrCompacted},
		{4, 3, nil},
		{10, 3, nil},
		{11, 0, raft.ErrUnavailable},
	} {
		term, err := s.Term(tc.i)
		if !errors.Is(err, tc.wantErr) || term != tc.wantTerm {
			t.Errorf("Term(%d) = %d, %v; want %d, %v", tc.i, term, err, tc.wantTerm, tc.wantErr)
		}
	}
	if first, _ := s.FirstIndex(); first != 5 {
		t.Errorf("FirstIndex = %d", first)
	}
	hs, cs, _ := s.InitialState()
	if hs.GetCommit() != 9 || len(cs.GetVoters()) != 3 {
		t.Errorf("InitialState = %v, %v", hs, cs)
	}
	// Returned values are copies.
	hs.Commit = new(uint64(1))
	if s.HardState().GetCommit() != 9 {
		t.Error("InitialState returned Storage's own hard state")
	}
}

func TestStorageEmptyLogUnavailable(t *testing.T) {
	l := openLog(t, t.TempDir(), testOpts{})
	defer l.Close()
	mustSave(t, l, nil, ents(1, 3, 1), nil)
	if err := l.CreateSnapshot(3, nil, nil); err != nil {
		t.Fatal(err)
	}
	s := l.Storage()
	if _, err := s.Entries(4, 4, 100); err != nil {
		t.Fatalf("empty range: %v", err)
	}
	if first, _ := s.FirstIndex(); first != 4 {
		t.Fatalf("FirstIndex = %d", first)
	}
	if last, _ := s.LastIndex(); last != 3 {
		t.Fatalf("LastIndex = %d", last)
	}
}

// A snapshot can be taken at an applied index before the hard state carrying
// that commit index reaches the WAL. Raft refuses a commit index below the
// snapshot, so recovery raises it.
func TestRecoveryRaisesCommitToSnapshot(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, testOpts{})
	mustSave(t, l, hardState(2, 1, 3), ents(1, 10, 2), nil)
	if err := l.CreateSnapshot(8, nil, nil); err != nil {
		t.Fatal(err)
	}
	l = reopen(t, l, dir, testOpts{})
	defer l.Close()
	hs, _, _ := l.Storage().InitialState()
	if hs.GetCommit() != 8 || hs.GetTerm() != 2 || hs.GetVote() != 1 {
		t.Fatalf("recovered hard state %v, want term 2 vote 1 commit 8", hs)
	}
}
