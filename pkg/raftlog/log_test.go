package raftlog

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

func TestOpenFreshAndRoundTrip(t *testing.T) {
	dir := t.TempDir()
	o := testOpts{sync: true, segmentSize: 256}
	l := openLog(t, dir, o)
	if !l.IsNew() {
		t.Fatal("IsNew() = false on an empty dir")
	}
	if got := viewOf(t, l.Storage()); got.First != 1 || got.Last != 0 {
		t.Fatalf("fresh view = %+v, want first 1 last 0", got)
	}
	hs, cs, err := l.Storage().InitialState()
	if err != nil || !raft.IsEmptyHardState(hs) || cs == nil {
		t.Fatalf("fresh InitialState = %v, %v, %v", hs, cs, err)
	}

	mustSave(t, l, hardState(1, 1, 0), ents(1, 3, 1), nil)
	mustSave(t, l, hardState(1, 1, 2), ents(4, 4, 1), nil)
	mustSave(t, l, hardState(2, 0, 4), nil, nil)
	want := viewOf(t, l.Storage())
	if want.First != 1 || want.Last != 4 || want.HS != [3]uint64{2, 0, 4} {
		t.Fatalf("view before reopen = %+v", want)
	}

	l = reopen(t, l, dir, o)
	defer l.Close()
	if l.IsNew() {
		t.Fatal("IsNew() = true after writes")
	}
	if got := viewOf(t, l.Storage()); !reflect.DeepEqual(got, want) {
		t.Fatalf("after reopen\n got %+v\nwant %+v", got, want)
	}
	hs, _, _ = l.Storage().InitialState()
	if hs.GetTerm() != 2 || hs.GetCommit() != 4 {
		t.Fatalf("InitialState hard state = %v", hs)
	}
	// Appending after recovery lands after the recovered records.
	mustSave(t, l, hardState(2, 0, 5), ents(5, 6, 2), nil)
	want = viewOf(t, l.Storage())
	l = reopen(t, l, dir, o)
	defer l.Close()
	if got := viewOf(t, l.Storage()); !reflect.DeepEqual(got, want) {
		t.Fatalf("after second reopen\n got %+v\nwant %+v", got, want)
	}
}

func TestConflictTruncation(t *testing.T) {
	type save struct {
		ents []*raftpb.Entry
		hs   *raftpb.HardState
	}
	tests := []struct {
		name      string
		saves     []save
		wantTerms []uint64 // terms of entries 1..last
	}{
		{
			name:      "replace tail",
			saves:     []save{{ents(1, 5, 1), nil}, {ents(4, 4, 2), nil}},
			wantTerms: []uint64{1, 1, 1, 2},
		},
		{
			name:      "replace tail and extend",
			saves:     []save{{ents(1, 5, 1), nil}, {ents(3, 7, 2), nil}},
			wantTerms: []uint64{1, 1, 2, 2, 2, 2, 2},
		},
		{
			name:      "replace whole log",
			saves:     []save{{ents(1, 3, 1), nil}, {ents(1, 2, 3), hardState(3, 0, 0)}},
			wantTerms: []uint64{3, 3},
		},
		{
			name:      "repeated conflicts",
			saves:     []save{{ents(1, 6, 1), nil}, {ents(5, 8, 2), nil}, {ents(2, 3, 3), nil}, {ents(4, 4, 4), nil}},
			wantTerms: []uint64{1, 3, 3, 4},
		},
		{
			name:      "append at end is not a conflict",
			saves:     []save{{ents(1, 2, 1), nil}, {ents(3, 4, 1), nil}},
			wantTerms: []uint64{1, 1, 1, 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			l := openLog(t, dir, testOpts{segmentSize: 64})
			for _, s := range tt.saves {
				mustSave(t, l, s.hs, s.ents, nil)
			}
			check := func(when string) {
				v := viewOf(t, l.Storage())
				if !reflect.DeepEqual(v.Terms, tt.wantTerms) {
					t.Fatalf("%s: terms = %v, want %v", when, v.Terms, tt.wantTerms)
				}
				for i, d := range v.Data {
					if w := string(ent(uint64(i+1), tt.wantTerms[i]).GetData()); d != w {
						t.Fatalf("%s: entry %d data %q, want %q", when, i+1, d, w)
					}
				}
			}
			check("before reopen")
			l = reopen(t, l, dir, testOpts{segmentSize: 64})
			defer l.Close()
			check("after reopen")
		})
	}
}

func TestSaveRejectsGap(t *testing.T) {
	l := openLog(t, t.TempDir(), testOpts{})
	defer l.Close()
	mustSave(t, l, nil, ents(1, 3, 1), nil)
	if err := l.Save(nil, ents(5, 6, 1), nil); err == nil {
		t.Fatal("Save with a gap succeeded")
	}
	if err := l.Save(nil, []*raftpb.Entry{ent(4, 1), ent(6, 1)}, nil); err == nil {
		t.Fatal("Save with non-contiguous entries succeeded")
	}
	if last, _ := l.Storage().LastIndex(); last != 3 {
		t.Fatalf("LastIndex after rejected saves = %d, want 3", last)
	}
	// A rejected Save is not sticky.
	mustSave(t, l, nil, ents(4, 4, 1), nil)
}

func TestRotationReplay(t *testing.T) {
	dir := t.TempDir()
	o := testOpts{segmentSize: 512}
	l := openLog(t, dir, o)
	var term uint64 = 1
	for i := uint64(1); i <= 300; i += 3 {
		if i%50 == 1 {
			term++
		}
		mustSave(t, l, hardState(term, 1, i-1), ents(i, i+2, term), nil)
	}
	// A conflict that reaches back across segment boundaries.
	mustSave(t, l, hardState(term+1, 0, 250), ents(260, 265, term+1), nil)
	want := viewOf(t, l.Storage())
	if want.Last != 265 {
		t.Fatalf("last = %d, want 265", want.Last)
	}
	segs := segmentFiles(t, dir)
	if len(segs) < 10 {
		t.Fatalf("only %d segments with a 512-byte segment size", len(segs))
	}
	for i, p := range segs {
		var seq, first uint64
		if _, err := fmtSscan(filepath.Base(p), &seq, &first); err != nil || seq != uint64(i) {
			t.Fatalf("segment %d named %s", i, p)
		}
	}
	l = reopen(t, l, dir, o)
	defer l.Close()
	if got := viewOf(t, l.Storage()); !reflect.DeepEqual(got, want) {
		t.Fatalf("after reopen\n got %+v\nwant %+v", got, want)
	}
}

func TestSaveEmptyDoesNoIO(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, testOpts{})
	for _, err := range []error{
		l.Save(nil, nil, nil),
		l.Save(&raftpb.HardState{}, []*raftpb.Entry{}, &raftpb.Snapshot{}),
		l.Save(hardState(0, 0, 0), nil, raftpb.EnsureSnapshot(nil)),
	} {
		if err != nil {
			t.Fatalf("empty Save: %v", err)
		}
	}
	if segs := segmentFiles(t, dir); len(segs) != 0 {
		t.Fatalf("empty Saves created %v", segs)
	}
	l = reopen(t, l, dir, testOpts{})
	if !l.IsNew() {
		t.Fatal("IsNew() = false after only empty Saves")
	}

	mustSave(t, l, hardState(1, 1, 1), ents(1, 1, 1), nil)
	seg := segmentFiles(t, dir)[0]
	size := fileSize(t, seg)
	// With the segment's descriptor closed behind the Log's back, any write
	// or fsync would fail: empty Saves, and a Save repeating the persisted
	// hard state, must not touch it.
	l.mu.Lock()
	l.f.Close()
	l.mu.Unlock()
	for _, hs := range []*raftpb.HardState{nil, {}, hardState(1, 1, 1)} {
		if err := l.Save(hs, nil, nil); err != nil {
			t.Fatalf("Save(%v) with nothing new: %v", hs, err)
		}
	}
	if got := fileSize(t, seg); got != size {
		t.Fatalf("segment size changed %d -> %d", size, got)
	}
	if err := l.Save(hardState(1, 1, 2), nil, nil); err == nil {
		t.Fatal("a real write on a closed descriptor succeeded; the no-IO check proves nothing")
	}
	// The failure is sticky.
	if err := l.Save(nil, ents(2, 2, 1), nil); err == nil {
		t.Fatal("Save after a failed write succeeded")
	}
	l.mu.Lock()
	l.f = nil
	l.mu.Unlock()
}

func TestSaveSnapshotReset(t *testing.T) {
	dir := t.TempDir()
	o := testOpts{segmentSize: 256}
	l := openLog(t, dir, o)
	mustSave(t, l, hardState(1, 1, 3), ents(1, 5, 1), nil)
	// A follower far behind receives a snapshot at 100 plus what follows.
	mustSave(t, l, hardState(3, 0, 100), ents(101, 103, 3), snapshot(100, 2, 1, 2, 3))
	check := func(when string) {
		t.Helper()
		s := l.Storage()
		v := viewOf(t, s)
		want := logView{First: 101, Last: 103, SnapIndex: 100, SnapTerm: 2, Terms: []uint64{3, 3, 3},
			Data: []string{"e101-t3", "e102-t3", "e103-t3"}, HS: [3]uint64{3, 0, 100}}
		if !reflect.DeepEqual(v, want) {
			t.Fatalf("%s\n got %+v\nwant %+v", when, v, want)
		}
		_, cs, _ := s.InitialState()
		if !reflect.DeepEqual(cs.GetVoters(), []uint64{1, 2, 3}) {
			t.Fatalf("%s: conf state %v", when, cs)
		}
		snap, _ := s.Snapshot()
		if string(snap.GetData()) != "snap-100" {
			t.Fatalf("%s: snapshot data %q", when, snap.GetData())
		}
		wantCompacted(t, s, 100)
	}
	check("before reopen")
	l = reopen(t, l, dir, o)
	defer l.Close()
	check("after reopen")

	if err := l.Save(nil, nil, snapshot(100, 2)); !errors.Is(err, raft.ErrSnapOutOfDate) {
		t.Fatalf("Save of an old snapshot: %v, want ErrSnapOutOfDate", err)
	}
	// Entries at or below the snapshot are dropped, the rest appended.
	mustSave(t, l, nil, ents(99, 104, 3), nil)
	if v := viewOf(t, l.Storage()); v.First != 101 || v.Last != 104 {
		t.Fatalf("after overlapping save: %+v", v)
	}
}

func TestSnapshotTruncatesWAL(t *testing.T) {
	dir := t.TempDir()
	o := testOpts{segmentSize: 400, sync: true}
	l := openLog(t, dir, o)
	for i := uint64(1); i <= 200; i += 4 {
		mustSave(t, l, hardState(2, 1, i+3), ents(i, i+3, 2), nil)
	}
	before := len(segmentFiles(t, dir))
	cs := &raftpb.ConfState{Voters: []uint64{1, 2}}

	if err := l.CreateSnapshot(80, cs, nil); err != nil {
		t.Fatalf("CreateSnapshot(80): %v", err)
	}
	s := l.Storage()
	if first, _ := s.FirstIndex(); first != 81 {
		t.Fatalf("FirstIndex after snapshot 80 = %d", first)
	}
	wantCompacted(t, s, 80)
	if term, err := s.Term(80); err != nil || term != 2 {
		t.Fatalf("Term(80) = %d, %v", term, err)
	}
	if got := len(segmentFiles(t, dir)); got < before {
		t.Fatalf("first snapshot deleted segments (%d -> %d); the WAL must reach back to the previous snapshot", before, got)
	}
	for i := uint64(201); i <= 260; i += 4 {
		mustSave(t, l, hardState(2, 1, i+3), ents(i, i+3, 2), nil)
	}
	before = len(segmentFiles(t, dir))
	if err := l.CreateSnapshot(230, cs, []byte("state")); err != nil {
		t.Fatalf("CreateSnapshot(230): %v", err)
	}
	after := segmentFiles(t, dir)
	if len(after) >= before {
		t.Fatalf("segments %d -> %d: nothing deleted", before, len(after))
	}
	// The oldest remaining segment still holds what replay from snapshot
	// 80 needs, and nothing entirely below it was kept.
	var seq, first uint64
	if _, err := fmtSscan(filepath.Base(after[0]), &seq, &first); err != nil {
		t.Fatal(err)
	}
	if first > 81 {
		t.Fatalf("oldest segment %s starts after index 81", after[0])
	}
	if seq == 0 {
		t.Fatalf("oldest segment %s: nothing deleted from the front", after[0])
	}
	if err := l.CreateSnapshot(230, cs, nil); err != nil {
		t.Fatalf("CreateSnapshot at the same index: %v, want a no-op", err)
	}
	if err := l.CreateSnapshot(229, cs, nil); !errors.Is(err, raft.ErrSnapOutOfDate) {
		t.Fatalf("CreateSnapshot below the snapshot: %v, want ErrSnapOutOfDate", err)
	}
	if err := l.CreateSnapshot(1000, cs, nil); err == nil {
		t.Fatal("CreateSnapshot beyond the last index succeeded")
	}

	want := viewOf(t, l.Storage())
	if want.First != 231 || want.Last != 260 || want.SnapIndex != 230 {
		t.Fatalf("view = %+v", want)
	}
	l = reopen(t, l, dir, o)
	defer l.Close()
	if got := viewOf(t, l.Storage()); !reflect.DeepEqual(got, want) {
		t.Fatalf("after reopen\n got %+v\nwant %+v", got, want)
	}
	snap, _ := l.Storage().Snapshot()
	if string(snap.GetData()) != "state" || !reflect.DeepEqual(snap.GetMetadata().GetConfState().GetVoters(), []uint64{1, 2}) {
		t.Fatalf("recovered snapshot = %v", snap)
	}
}

func TestSnapshotFilesKept(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, testOpts{segmentSize: 200})
	defer l.Close()
	mustSave(t, l, hardState(1, 1, 100), ents(1, 100, 1), nil)
	for i := uint64(10); i <= 100; i += 10 {
		if err := l.CreateSnapshot(i, nil, nil); err != nil {
			t.Fatalf("CreateSnapshot(%d): %v", i, err)
		}
	}
	files := snapFiles(t, dir)
	if len(files) != 5 {
		t.Fatalf("%d snapshot files kept, want 5: %v", len(files), files)
	}
	if filepath.Base(files[len(files)-1]) != snapName(1, 100) {
		t.Fatalf("newest snapshot file %s", files[len(files)-1])
	}
}

func TestCorruptNewestSnapshotFallsBack(t *testing.T) {
	dir := t.TempDir()
	o := testOpts{segmentSize: 300}
	l := openLog(t, dir, o)
	mustSave(t, l, hardState(1, 1, 60), ents(1, 60, 1), nil)
	if err := l.CreateSnapshot(20, nil, []byte("s20")); err != nil {
		t.Fatal(err)
	}
	if err := l.CreateSnapshot(50, nil, []byte("s50")); err != nil {
		t.Fatal(err)
	}
	mustSave(t, l, hardState(1, 1, 70), ents(61, 70, 1), nil)
	l.Close()

	newest := filepath.Join(dir, "snap", snapName(1, 50))
	flipByte(t, newest, fileSize(t, newest)-2)
	// A snapshot file that no WAL marker acknowledges (the crash came
	// between the file and the marker) is never used.
	if _, err := writeSnapFile(filepath.Join(dir, "snap"), snapshot(65, 1), true); err != nil {
		t.Fatal(err)
	}

	l = openLog(t, dir, o)
	defer l.Close()
	v := viewOf(t, l.Storage())
	if v.SnapIndex != 20 || v.First != 21 || v.Last != 70 {
		t.Fatalf("after fallback: %+v", v)
	}
	for i, term := range v.Terms {
		if term != 1 || v.Data[i] != string(ent(uint64(21+i), 1).GetData()) {
			t.Fatalf("entry %d = %q term %d", 21+i, v.Data[i], term)
		}
	}
	snap, _ := l.Storage().Snapshot()
	if string(snap.GetData()) != "s20" {
		t.Fatalf("snapshot data %q, want s20", snap.GetData())
	}
}

func TestSnapshotWithoutWALCoverageIsCorrupt(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, testOpts{})
	mustSave(t, l, hardState(2, 0, 100), ents(101, 102, 2), snapshot(100, 2))
	l.Close()
	// The only snapshot the log can continue from is damaged.
	p := filepath.Join(dir, "snap", snapName(2, 100))
	flipByte(t, p, fileSize(t, p)-1)
	_, err := Open(Options{Dir: dir, NoSync: true})
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open = %v, want ErrCorrupt", err)
	}
}

func TestClosedLog(t *testing.T) {
	l := openLog(t, t.TempDir(), testOpts{})
	mustSave(t, l, nil, ents(1, 2, 1), nil)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Save(nil, ents(3, 3, 1), nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Save after Close: %v", err)
	}
	if err := l.CreateSnapshot(1, nil, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("CreateSnapshot after Close: %v", err)
	}
	if last, _ := l.Storage().LastIndex(); last != 2 {
		t.Fatalf("Storage after Close: last %d", last)
	}
}

func TestOpenRejectsBadSegmentName(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "junk.wal"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Options{Dir: dir}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open = %v, want ErrCorrupt", err)
	}
}

// After WAL truncation the log still reaches back to the previous snapshot,
// so losing the newest snapshot file loses nothing.
func TestFallbackAfterTruncation(t *testing.T) {
	dir := t.TempDir()
	o := testOpts{segmentSize: 200}
	l := openLog(t, dir, o)
	for i := uint64(1); i <= 150; i += 2 {
		mustSave(t, l, hardState(1, 1, i+1), ents(i, i+1, 1), nil)
		switch i + 1 {
		case 50, 100, 130:
			if err := l.CreateSnapshot(i+1, nil, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	segs := segmentFiles(t, dir)
	var seq, first uint64
	if _, err := fmtSscan(filepath.Base(segs[0]), &seq, &first); err != nil || seq == 0 || first > 101 {
		t.Fatalf("oldest segment %s: want some deleted and the rest reaching back to 101", segs[0])
	}
	l.Close()
	newest := filepath.Join(dir, "snap", snapName(1, 130))
	flipByte(t, newest, 3)

	l = openLog(t, dir, o)
	defer l.Close()
	v := viewOf(t, l.Storage())
	if v.SnapIndex != 100 || v.First != 101 || v.Last != 150 || len(v.Terms) != 50 {
		t.Fatalf("after fallback: first %d last %d snapshot %d entries %d", v.First, v.Last, v.SnapIndex, len(v.Terms))
	}
}

// With CatchUpEntries, a snapshot leaves that many entries before it
// readable, so a follower slightly behind is sent entries, not a snapshot;
// the snapshot itself is the new one either way.
func TestSnapshotKeepsCatchUpEntries(t *testing.T) {
	l := openLog(t, t.TempDir(), testOpts{catchUp: 50})
	defer l.Close()
	for i := uint64(1); i <= 200; i += 4 {
		mustSave(t, l, hardState(2, 1, i+3), ents(i, i+3, 2), nil)
	}
	cs := &raftpb.ConfState{Voters: []uint64{1}}
	if err := l.CreateSnapshot(30, cs, nil); err != nil {
		t.Fatal(err)
	}
	s := l.Storage()
	if first, _ := s.FirstIndex(); first != 1 {
		t.Fatalf("FirstIndex after snapshot 30 with 50 kept = %d, want 1", first)
	}
	if err := l.CreateSnapshot(150, cs, nil); err != nil {
		t.Fatal(err)
	}
	if first, _ := s.FirstIndex(); first != 101 {
		t.Fatalf("FirstIndex after snapshot 150 = %d, want 101", first)
	}
	if got, err := s.Entries(101, 151, math.MaxUint64); err != nil || len(got) != 50 || got[0].GetIndex() != 101 {
		t.Fatalf("Entries(101, 151) = %d entries, %v", len(got), err)
	}
	if _, err := s.Entries(100, 110, math.MaxUint64); !errors.Is(err, raft.ErrCompacted) {
		t.Fatalf("Entries below the kept ones: %v, want ErrCompacted", err)
	}
	if term, err := s.Term(100); err != nil || term != 2 {
		t.Fatalf("Term(100) = %d, %v", term, err)
	}
	if snap, _ := s.Snapshot(); snap.GetMetadata().GetIndex() != 150 {
		t.Fatalf("snapshot index %d, want 150", snap.GetMetadata().GetIndex())
	}
}

// A Save that only moves the commit index is written without an fsync of
// its own (raft.MustSync's rule), and the next synced write makes it
// durable; entries, a new term or a new vote are fsynced at once. OnFsync
// observes exactly the fsyncs.
func TestCommitOnlySaveIsNotSynced(t *testing.T) {
	dir := t.TempDir()
	o := testOpts{sync: true}
	l := openLog(t, dir, o)
	mustSave(t, l, hardState(1, 1, 0), ents(1, 3, 1), nil)
	n := l.syncs
	observed := 0
	l.onFsync = func(d time.Duration) {
		if d <= 0 {
			t.Errorf("OnFsync got %v", d)
		}
		observed++
	}
	mustSave(t, l, hardState(1, 1, 3), nil, nil)
	if l.syncs != n {
		t.Fatalf("commit-only save fsynced (%d -> %d)", n, l.syncs)
	}
	mustSave(t, l, hardState(2, 1, 3), nil, nil)
	mustSave(t, l, hardState(2, 2, 3), nil, nil)
	mustSave(t, l, hardState(2, 2, 3), ents(4, 4, 2), nil)
	if l.syncs != n+3 {
		t.Fatalf("term, vote and entries made %d fsyncs, want 3", l.syncs-n)
	}
	if observed != 3 {
		t.Fatalf("OnFsync observed %d fsyncs, want 3", observed)
	}
	l = reopen(t, l, dir, o)
	defer l.Close()
	if hs := l.Storage().HardState(); hs.GetCommit() != 3 || hs.GetTerm() != 2 || hs.GetVote() != 2 {
		t.Fatalf("recovered hard state %v", hs)
	}
}

// WrittenBytes counts every byte written to segments (records, headers,
// padding), across segment rolls, so without preallocation it matches the
// segments' sizes on disk; OnWrite observes each write.
func TestWrittenBytes(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, testOpts{segmentSize: 512})
	defer l.Close()
	writes := 0
	l.onWrite = func(time.Duration) { writes++ }
	if l.WrittenBytes() != 0 {
		t.Fatalf("WrittenBytes before any write = %d", l.WrittenBytes())
	}
	for i := uint64(1); i <= 100; i += 10 {
		mustSave(t, l, hardState(1, 1, i), ents(i, i+9, 1), nil)
	}
	var onDisk int64
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	segs := 0
	for _, de := range des {
		if filepath.Ext(de.Name()) != segmentSuffix {
			continue
		}
		fi, err := de.Info()
		if err != nil {
			t.Fatal(err)
		}
		onDisk += fi.Size()
		segs++
	}
	if segs < 2 {
		t.Fatalf("%d segments, want the saves to roll at least once", segs)
	}
	if got := l.WrittenBytes(); got != uint64(onDisk) {
		t.Fatalf("WrittenBytes = %d, segments hold %d bytes", got, onDisk)
	}
	if writes != 10 {
		t.Fatalf("OnWrite observed %d writes, want 10", writes)
	}
}
