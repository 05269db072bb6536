package raftlog

import (
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
)

// Options.MaxSnapshots bounds the snapshot files CreateSnapshot leaves,
// newest kept; 0 keeps all (etcd's max-snapshots).
func TestMaxSnapshots(t *testing.T) {
	for _, tc := range []struct{ opt, want int }{{1, 1}, {3, 3}, {5, 5}, {-1, 10}} {
		t.Run(fmt.Sprintf("max-snapshots=%d", max(tc.opt, 0)), func(t *testing.T) {
			dir := t.TempDir()
			l := openLog(t, dir, testOpts{segmentSize: 200, maxSnaps: tc.opt})
			defer l.Close()
			mustSave(t, l, hardState(1, 1, 100), ents(1, 100, 1), nil)
			for i := uint64(10); i <= 100; i += 10 {
				if err := l.CreateSnapshot(i, nil, nil); err != nil {
					t.Fatalf("CreateSnapshot(%d): %v", i, err)
				}
			}
			files := snapFiles(t, dir)
			if len(files) != tc.want {
				t.Fatalf("%d snapshot files kept, want %d: %v", len(files), tc.want, files)
			}
			if filepath.Base(files[len(files)-1]) != snapName(1, 100) {
				t.Fatalf("newest snapshot file %s", files[len(files)-1])
			}
		})
	}
}

// Options.MaxWALs bounds the WAL segments CreateSnapshot leaves; 0 keeps
// all (etcd's max-wals). Whatever the bound, the segments replay needs stay
// (here the 6 holding entries after the previous snapshot, 150, and the
// markers): the log reopens to the same view.
func TestMaxWALs(t *testing.T) {
	for _, tc := range []struct {
		opt int
		// want is the number of segments left; -1: all of them.
		want int
	}{{-1, -1}, {1, 6}, {4, 6}, {8, 8}, {1000, -1}} {
		t.Run(fmt.Sprintf("max-wals=%d", max(tc.opt, 0)), func(t *testing.T) {
			dir := t.TempDir()
			o := testOpts{segmentSize: 256, maxWALs: tc.opt}
			l := openLog(t, dir, o)
			for i := uint64(1); i <= 200; i += 10 {
				mustSave(t, l, hardState(1, 1, i+9), ents(i, i+9, 1), nil)
			}
			for _, i := range []uint64{100, 150, 190} {
				if err := l.CreateSnapshot(i, nil, nil); err != nil {
					t.Fatalf("CreateSnapshot(%d): %v", i, err)
				}
			}
			left := segmentFiles(t, dir)
			var seq, first uint64
			if _, err := fmtSscan(filepath.Base(left[0]), &seq, &first); err != nil {
				t.Fatal(err)
			}
			if tc.want < 0 {
				if seq != 0 || len(left) < 20 {
					t.Fatalf("%d segments left from seq %d, want all (20 or more from 0): %v", len(left), seq, left)
				}
			} else if len(left) != tc.want {
				t.Fatalf("%d segments left, want %d: %v", len(left), tc.want, left)
			}
			want := viewOf(t, l.Storage())
			l = reopen(t, l, dir, o)
			defer l.Close()
			if got := viewOf(t, l.Storage()); !reflect.DeepEqual(got, want) {
				t.Fatalf("after reopen\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

// Segments a restart did not read (they lie behind the newest snapshot) are
// still removed by retention as the log moves on, and not before a fallback
// to the previous snapshot could need them: the same writes with and without
// a restart in the middle leave the same segments.
func TestRetentionOfSegmentsNotRead(t *testing.T) {
	o := testOpts{segmentSize: 256, maxWALs: 2}
	run := func(dir string, restart bool) *Log {
		l := openLog(t, dir, o)
		for i := uint64(1); i <= 400; i += 10 {
			mustSave(t, l, hardState(1, 1, i+9), ents(i, i+9, 1), nil)
			if i%50 == 1 && i > 100 {
				if err := l.CreateSnapshot(i+5, nil, fmt.Appendf(nil, "s%d", i+5)); err != nil {
					t.Fatalf("CreateSnapshot(%d): %v", i+5, err)
				}
			}
			if restart && i == 201 {
				l = reopen(t, l, dir, o)
				if l.segmentsRead >= len(l.segs) {
					t.Fatalf("the restart read all %d segments", len(l.segs))
				}
			}
		}
		return l
	}
	plain, restarted := t.TempDir(), t.TempDir()
	run(plain, false).Close()
	run(restarted, true).Close()
	names := func(dir string) (out []string) {
		for _, p := range segmentFiles(t, dir) {
			out = append(out, filepath.Base(p))
		}
		return out
	}
	if got, want := names(restarted), names(plain); !reflect.DeepEqual(got, want) {
		t.Fatalf("segments after a restart %v, without one %v", got, want)
	}
	// The newest snapshot damaged, the previous one is what the log falls
	// back to.
	snaps := snapFiles(t, restarted)
	flipByte(t, snaps[len(snaps)-1], fileSize(t, snaps[len(snaps)-1])-2)
	l := openLog(t, restarted, o)
	defer l.Close()
	snap, _ := l.Storage().Snapshot()
	if got := string(snap.GetData()); got != "s306" {
		t.Fatalf("fell back to snapshot %q, want s306", got)
	}
}
