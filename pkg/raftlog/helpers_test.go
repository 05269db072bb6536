package raftlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

func ent(index, term uint64) *raftpb.Entry {
	return &raftpb.Entry{
		Index: new(index),
		Term:  new(term),
		Type:  raftpb.EntryNormal.Enum(),
		Data:  fmt.Appendf(nil, "e%d-t%d", index, term),
	}
}

// ents returns entries lo..hi inclusive, all of term.
func ents(lo, hi, term uint64) []*raftpb.Entry {
	var out []*raftpb.Entry
	for i := lo; i <= hi; i++ {
		out = append(out, ent(i, term))
	}
	return out
}

func hardState(term, vote, commit uint64) *raftpb.HardState {
	return &raftpb.HardState{Term: new(term), Vote: new(vote), Commit: new(commit)}
}

func snapshot(index, term uint64, voters ...uint64) *raftpb.Snapshot {
	return &raftpb.Snapshot{
		Data: fmt.Appendf(nil, "snap-%d", index),
		Metadata: &raftpb.SnapshotMetadata{
			Index:     new(index),
			Term:      new(term),
			ConfState: &raftpb.ConfState{Voters: voters, AutoLeave: new(false)},
		},
	}
}

type testOpts struct {
	segmentSize int64
	sync        bool
	catchUp     uint64
	// prealloc reserves segment space as kvd does; the tests that edit
	// segments by file size leave it off.
	prealloc bool
	// maxSnaps and maxWALs are Options.MaxSnapshots and MaxWALs, except
	// that 0 here means 5 snapshot files and 1 segment (remove every
	// segment replay no longer needs), and -1 means 0 (keep all).
	maxSnaps, maxWALs int
}

func (o testOpts) retention() (snaps, wals uint) {
	pick := func(v, def int) uint {
		switch {
		case v == 0:
			return uint(def)
		case v < 0:
			return 0
		}
		return uint(v)
	}
	return pick(o.maxSnaps, 5), pick(o.maxWALs, 1)
}

func openLog(t testing.TB, dir string, o testOpts) *Log {
	t.Helper()
	snaps, wals := o.retention()
	l, err := Open(Options{Dir: dir, SegmentSize: o.segmentSize, NoSync: !o.sync, Logger: testLogger(t), CatchUpEntries: o.catchUp, NoPreallocate: !o.prealloc,
		MaxSnapshots: snaps, MaxWALs: wals})
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	return l
}

func testLogger(t testing.TB) *zap.Logger {
	if tt, ok := t.(*testing.T); ok {
		return zaptest.NewLogger(tt, zaptest.Level(zap.WarnLevel))
	}
	return zap.NewNop()
}

func reopen(t testing.TB, l *Log, dir string, o testOpts) *Log {
	t.Helper()
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return openLog(t, dir, o)
}

func mustSave(t testing.TB, l *Log, hs *raftpb.HardState, es []*raftpb.Entry, snap *raftpb.Snapshot) {
	t.Helper()
	if err := l.Save(hs, es, snap); err != nil {
		t.Fatalf("Save: %v", err)
	}
}

// logView is what Storage shows, in a comparable form.
type logView struct {
	First, Last uint64
	SnapIndex   uint64
	SnapTerm    uint64
	Terms       []uint64 // term of entries First..Last
	Data        []string
	HS          [3]uint64
}

func viewOf(t testing.TB, s *Storage) logView {
	t.Helper()
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	snap, err := s.Snapshot()
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	hs := s.HardState()
	v := logView{
		First: first, Last: last,
		SnapIndex: snap.GetMetadata().GetIndex(), SnapTerm: snap.GetMetadata().GetTerm(),
		HS: [3]uint64{hs.GetTerm(), hs.GetVote(), hs.GetCommit()},
	}
	if t0, err := s.Term(first - 1); err != nil || t0 != v.SnapTerm {
		t.Fatalf("Term(%d) = %d, %v; want snapshot term %d", first-1, t0, err, v.SnapTerm)
	}
	if last >= first {
		es, err := s.Entries(first, last+1, ^uint64(0))
		if err != nil {
			t.Fatalf("Entries(%d, %d): %v", first, last+1, err)
		}
		for i, e := range es {
			if e.GetIndex() != first+uint64(i) {
				t.Fatalf("entry %d has index %d", first+uint64(i), e.GetIndex())
			}
			v.Terms = append(v.Terms, e.GetTerm())
			v.Data = append(v.Data, string(e.GetData()))
		}
	}
	return v
}

func segmentFiles(t testing.TB, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.wal"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(m)
	return m
}

func snapFiles(t testing.TB, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "snap", "*.snap"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(m)
	return m
}

// recordOffsets returns the start offset of every record in a segment file.
func recordOffsets(t testing.TB, path string) []int64 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var offs []int64
	if _, err := scanRecords(data, false, func(off int64, _ byte, _ []byte) error {
		offs = append(offs, off)
		return nil
	}); err != nil {
		t.Fatalf("scan %s: %v", path, err)
	}
	return offs
}

func flipByte(t testing.TB, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x5a
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// appendBytes writes b right after the last record of the segment at path,
// where the next write would have gone (over preallocated zeros, if any):
// what a crash in the middle of a write leaves.
func appendBytes(t testing.TB, path string, b []byte) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	res, err := scanRecords(data, true, func(int64, byte, []byte) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, res.validEnd); err != nil {
		t.Fatal(err)
	}
}

func fileSize(t testing.TB, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func wantCompacted(t testing.TB, s *Storage, lo uint64) {
	t.Helper()
	if _, err := s.Entries(lo, lo+1, ^uint64(0)); !errors.Is(err, raft.ErrCompacted) {
		t.Fatalf("Entries(%d) err = %v, want ErrCompacted", lo, err)
	}
}

func fmtSscan(name string, seq, first *uint64) (int, error) {
	return fmt.Sscanf(name, "%016x-%016x.wal", seq, first)
}
