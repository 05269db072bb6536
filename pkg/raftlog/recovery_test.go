package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// buildLog writes hard state (1,1,0) and then entries 1..n, one per Save,
// with the given segment size, and returns the segment files.
func buildLog(t *testing.T, dir string, n uint64, segmentSize int64) []string {
	t.Helper()
	l := openLog(t, dir, testOpts{segmentSize: segmentSize})
	mustSave(t, l, hardState(1, 1, 0), nil, nil)
	for i := uint64(1); i <= n; i++ {
		mustSave(t, l, nil, ents(i, i, 1), nil)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return segmentFiles(t, dir)
}

func TestTornTail(t *testing.T) {
	const n = 40
	tests := []struct {
		name     string
		damage   func(t *testing.T, last string)
		wantLast uint64
	}{
		{"cut inside last record header", func(t *testing.T, last string) {
			offs := recordOffsets(t, last)
			os.Truncate(last, offs[len(offs)-1]+5)
		}, n - 1},
		{"cut inside last record payload", func(t *testing.T, last string) {
			os.Truncate(last, fileSize(t, last)-3)
		}, n - 1},
		{"zero bytes appended", func(t *testing.T, last string) {
			appendBytes(t, last, make([]byte, 4096))
		}, n},
		{"few zero bytes appended", func(t *testing.T, last string) {
			appendBytes(t, last, make([]byte, 3))
		}, n},
		{"damaged header then zeros", func(t *testing.T, last string) {
			appendBytes(t, last, []byte{7, 0, 0, 0, 1, 2, 3, 4, recEntry, 9, 9, 9, 9})
			appendBytes(t, last, make([]byte, 100))
		}, n},
		{"short garbage appended", func(t *testing.T, last string) {
			appendBytes(t, last, []byte("xyz"))
		}, n},
		{"partial record appended", func(t *testing.T, last string) {
			rec := make([]byte, recordHeaderSize+20)
			binary.LittleEndian.PutUint32(rec, 1000)
			rec[8] = recEntry
			binary.LittleEndian.PutUint32(rec[headerCRCOffset:], crc32.Checksum(rec[:headerCRCOffset], crcTable))
			for i := recordHeaderSize; i < len(rec); i++ {
				rec[i] = byte(i)
			}
			appendBytes(t, last, rec)
		}, n},
		{"bad crc on last record", func(t *testing.T, last string) {
			flipByte(t, last, fileSize(t, last)-1)
		}, n - 1},
		{"bad crc on last record then zeros", func(t *testing.T, last string) {
			flipByte(t, last, fileSize(t, last)-1)
			appendBytes(t, last, make([]byte, 512))
		}, n - 1},
		{"torn header of a new segment", func(t *testing.T, last string) {
			var seq, first uint64
			fmtSscan(filepath.Base(last), &seq, &first)
			full := appendSegmentHeaderRecord(nil, seq+1, n+1)
			os.WriteFile(filepath.Join(filepath.Dir(last), segmentName(seq+1, n+1)), full[:len(full)-4], 0o600)
		}, n},
		{"empty new segment", func(t *testing.T, last string) {
			var seq, first uint64
			fmtSscan(filepath.Base(last), &seq, &first)
			os.WriteFile(filepath.Join(filepath.Dir(last), segmentName(seq+1, n+1)), nil, 0o600)
		}, n},
	}
	for _, segSize := range []int64{1 << 20, 300} {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s/segment-size-%d", tt.name, segSize), func(t *testing.T) {
				dir := t.TempDir()
				segs := buildLog(t, dir, n, segSize)
				last := segs[len(segs)-1]
				tt.damage(t, last)

				o := testOpts{segmentSize: segSize}
				l := openLog(t, dir, o)
				v := viewOf(t, l.Storage())
				if v.First != 1 || v.Last != tt.wantLast || v.HS != [3]uint64{1, 1, 0} {
					t.Fatalf("recovered %+v, want entries 1..%d", v, tt.wantLast)
				}
				for i, d := range v.Data {
					if d != string(ent(uint64(i+1), 1).GetData()) {
						t.Fatalf("entry %d data %q", i+1, d)
					}
				}
				// Writing goes on after the recovered records, and replays.
				mustSave(t, l, hardState(2, 2, 3), ents(tt.wantLast+1, tt.wantLast+3, 2), nil)
				want := viewOf(t, l.Storage())
				l = reopen(t, l, dir, o)
				defer l.Close()
				if got := viewOf(t, l.Storage()); got.Last != tt.wantLast+3 || got.HS != [3]uint64{2, 2, 3} || len(got.Terms) != len(want.Terms) {
					t.Fatalf("after append and reopen: %+v, want %+v", got, want)
				}
			})
		}
	}
}

func TestCorruptionRefusesToOpen(t *testing.T) {
	const n = 40
	tests := []struct {
		name   string
		damage func(t *testing.T, segs []string) (file string)
	}{
		{"bad crc early in last segment", func(t *testing.T, segs []string) string {
			last := segs[len(segs)-1]
			offs := recordOffsets(t, last)
			flipByte(t, last, offs[2]+recordHeaderSize+1)
			return last
		}},
		{"bad crc in a record's length early in last segment", func(t *testing.T, segs []string) string {
			last := segs[len(segs)-1]
			offs := recordOffsets(t, last)
			flipByte(t, last, offs[1]) // the length's low byte: the record seems another length
			return last
		}},
		{"length in last segment damaged to run past the end", func(t *testing.T, segs []string) string {
			last := segs[len(segs)-1]
			offs := recordOffsets(t, last)
			flipByte(t, last, offs[1]+3) // the length's high byte
			return last
		}},
		{"bad header crc early in last segment", func(t *testing.T, segs []string) string {
			last := segs[len(segs)-1]
			offs := recordOffsets(t, last)
			flipByte(t, last, offs[2]+headerCRCOffset)
			return last
		}},
		{"bad crc in first segment", func(t *testing.T, segs []string) string {
			offs := recordOffsets(t, segs[0])
			flipByte(t, segs[0], offs[3]+recordHeaderSize)
			return segs[0]
		}},
		{"bad crc on the final record of a middle segment", func(t *testing.T, segs []string) string {
			s := segs[1]
			flipByte(t, s, fileSize(t, s)-1)
			return s
		}},
		{"middle segment cut short", func(t *testing.T, segs []string) string {
			s := segs[1]
			os.Truncate(s, fileSize(t, s)-2)
			return s
		}},
		{"zeros after a middle segment", func(t *testing.T, segs []string) string {
			appendBytes(t, segs[1], make([]byte, 64))
			return segs[1]
		}},
		{"missing middle segment", func(t *testing.T, segs []string) string {
			os.Remove(segs[1])
			return filepath.Base(segs[2])
		}},
		{"segment header does not match name", func(t *testing.T, segs []string) string {
			var seq, first uint64
			fmtSscan(filepath.Base(segs[1]), &seq, &first)
			renamed := filepath.Join(filepath.Dir(segs[1]), segmentName(seq, first+7))
			os.Rename(segs[1], renamed)
			return renamed
		}},
		{"empty middle segment", func(t *testing.T, segs []string) string {
			os.Truncate(segs[1], 0)
			return segs[1]
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			segs := buildLog(t, dir, n, 300)
			if len(segs) < 3 {
				t.Fatalf("want at least 3 segments, have %d", len(segs))
			}
			file := tt.damage(t, segs)
			_, err := Open(Options{Dir: dir, NoSync: true, Logger: testLogger(t)})
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open = %v, want ErrCorrupt", err)
			}
			if !strings.Contains(err.Error(), filepath.Base(file)) {
				t.Fatalf("error %q does not name %s", err, filepath.Base(file))
			}
		})
	}
}

// Every single-bit flip in a record that has more records after it is
// reported, never taken for a torn tail, wherever it lands in the record.
func TestEveryBitFlipBeforeTailIsCorruption(t *testing.T) {
	src := t.TempDir()
	segs := buildLog(t, src, 4, 1<<20)
	orig, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	offs := recordOffsets(t, segs[0])
	// Records: segment header, hard state, entries 1..4. Damage entry 1.
	lo, hi := offs[2], offs[3]
	dir := t.TempDir()
	path := filepath.Join(dir, filepath.Base(segs[0]))
	for off := lo; off < hi; off++ {
		for bit := 0; bit < 8; bit++ {
			data := append([]byte(nil), orig...)
			data[off] ^= 1 << bit
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			l, err := Open(Options{Dir: dir, NoSync: true})
			if err == nil {
				last, _ := l.Storage().LastIndex()
				l.Close()
				t.Fatalf("flip of bit %d at offset %d went unnoticed (last index %d)", bit, off, last)
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("flip of bit %d at offset %d: %v, want ErrCorrupt", bit, off, err)
			}
		}
	}
}

// Preallocated segments: the last one ends in zeros, which is its clean end
// (no torn-tail repair); a write torn inside the zeros is cut off; a segment
// is cut to its records before the next one starts, so only the last may
// end in zeros.
func TestPreallocatedSegments(t *testing.T) {
	dir := t.TempDir()
	o := testOpts{segmentSize: 4096, prealloc: true, sync: true}
	l := openLog(t, dir, o)
	mustSave(t, l, hardState(1, 1, 5), ents(1, 5, 1), nil)
	segs := segmentFiles(t, dir)
	if runtime.GOOS == "linux" && fileSize(t, segs[0]) != 4096 {
		t.Logf("segment not preallocated (%d bytes): the file system has no fallocate", fileSize(t, segs[0]))
	}
	want := viewOf(t, l.Storage())
	l = reopen(t, l, dir, o)
	if got := viewOf(t, l.Storage()); !reflect.DeepEqual(got, want) {
		t.Fatalf("after reopen\n got %+v\nwant %+v", got, want)
	}
	mustSave(t, l, hardState(1, 1, 6), ents(6, 6, 1), nil)
	l.Close()

	// A crash while writing entry 7: part of its record lands in the zeros.
	rec := appendEntryRecordT(t, ent(7, 1))
	appendBytes(t, segs[0], rec[:len(rec)-3])
	l = openLog(t, dir, o)
	if got := viewOf(t, l.Storage()); got.Last != 6 {
		t.Fatalf("after a torn write: last index %d, want 6", got.Last)
	}
	for i := uint64(7); i < 200; i++ {
		mustSave(t, l, hardState(1, 1, i), ents(i, i, 1), nil)
	}
	want = viewOf(t, l.Storage())
	segs = segmentFiles(t, dir)
	if len(segs) < 2 {
		t.Fatalf("%d segments, want a rotation", len(segs))
	}
	for _, s := range segs[:len(segs)-1] {
		data, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := scanRecords(data, false, func(int64, byte, []byte) error { return nil }); err != nil {
			t.Fatalf("closed segment %s does not end at its records: %v", s, err)
		}
	}
	l = reopen(t, l, dir, o)
	defer l.Close()
	if got := viewOf(t, l.Storage()); !reflect.DeepEqual(got, want) {
		t.Fatalf("after rotation and reopen\n got %+v\nwant %+v", got, want)
	}
}

// Recovery reads the WAL from the segment the newest snapshot needs, not the
// segments kept behind it for a fallback; those are read only when the
// newest snapshot turns out unusable.
func TestRecoveryStartsAtNewestSnapshot(t *testing.T) {
	dir := t.TempDir()
	o := testOpts{segmentSize: 300, maxWALs: -1}
	l := openLog(t, dir, o)
	mustSave(t, l, hardState(1, 1, 0), nil, nil)
	for i := uint64(1); i <= 200; i += 10 {
		mustSave(t, l, hardState(1, 1, i+9), ents(i, i+9, 1), nil)
		if i > 100 {
			if err := l.CreateSnapshot(i, nil, fmt.Appendf(nil, "s%d", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := viewOf(t, l.Storage())
	l.Close()
	segs := segmentFiles(t, dir)

	l = openLog(t, dir, o)
	if got := viewOf(t, l.Storage()); !reflect.DeepEqual(got, want) {
		t.Fatalf("after reopen:\n got %+v\nwant %+v", got, want)
	}
	if l.segmentsRead < 1 || l.segmentsRead > 2 || len(segs) < 10 {
		t.Fatalf("read %d of %d segments, want the last one or two", l.segmentsRead, len(segs))
	}
	l.Close()

	// Damage the oldest segment: it is not read while the newest snapshot
	// is usable...
	offs := recordOffsets(t, segs[0])
	flipByte(t, segs[0], offs[2]+recordHeaderSize)
	l = openLog(t, dir, o)
	if got := viewOf(t, l.Storage()); !reflect.DeepEqual(got, want) {
		t.Fatalf("with the oldest segment damaged:\n got %+v\nwant %+v", got, want)
	}
	l.Close()
	// ...but once it is not, the whole WAL is replayed, and the damage found.
	newest := snapFiles(t, dir)
	p := newest[len(newest)-1]
	flipByte(t, p, fileSize(t, p)-2)
	if _, err := Open(Options{Dir: dir, NoSync: true, Logger: testLogger(t)}); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), filepath.Base(segs[0])) {
		t.Fatalf("Open with the newest snapshot damaged = %v, want ErrCorrupt naming %s", err, filepath.Base(segs[0]))
	}
}
