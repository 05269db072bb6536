package raftlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
)

// fuzzWALSeeds writes a small real WAL (entries, a hard state, a snapshot
// marker and its snapshot file) with the package's own writer and returns the
// bytes of its segment and snapshot file, so the fuzzers start from valid
// inputs.
func fuzzWALSeeds(f *testing.F) (seg, snap []byte) {
	f.Helper()
	dir := f.TempDir()
	l, err := Open(Options{Dir: dir, NoSync: true, NoPreallocate: true, Logger: zap.NewNop()})
	if err != nil {
		f.Fatal(err)
	}
	if err := l.Save(hardState(1, 1, 3), ents(1, 4, 1), nil); err != nil {
		f.Fatal(err)
	}
	if err := l.CreateSnapshot(2, &raftpb.ConfState{Voters: []uint64{1}}, []byte("snap-data")); err != nil {
		f.Fatal(err)
	}
	if err := l.Save(hardState(2, 1, 4), ents(5, 5, 2), nil); err != nil {
		f.Fatal(err)
	}
	if err := l.Close(); err != nil {
		f.Fatal(err)
	}
	segs, err := listSegments(dir)
	if err != nil || len(segs) == 0 {
		f.Fatalf("segments: %v %v", segs, err)
	}
	for _, s := range segs {
		b, err := os.ReadFile(filepath.Join(dir, s.name))
		if err != nil {
			f.Fatal(err)
		}
		seg = append(seg, b...)
	}
	files, err := listSnapFiles(filepath.Join(dir, "snap"))
	if err != nil || len(files) == 0 {
		f.Fatalf("snapshot files: %v %v", files, err)
	}
	snap, err = os.ReadFile(filepath.Join(dir, "snap", files[0].name))
	if err != nil {
		f.Fatal(err)
	}
	return seg, snap
}

// fixRecordCRCs rewrites the header and payload CRCs of every record whose
// length fits in data, so the fuzzer's mutations of lengths, types and
// payloads reach the decoders behind the checksums.
func fixRecordCRCs(data []byte) {
	for off := 0; len(data)-off >= recordHeaderSize; {
		n := int(binary.LittleEndian.Uint32(data[off:]))
		if n > len(data)-off-recordHeaderSize {
			n = len(data) - off - recordHeaderSize
			binary.LittleEndian.PutUint32(data[off:], uint32(n))
		}
		typ := data[off+8]
		binary.LittleEndian.PutUint32(data[off+4:], recordCRC(typ, data[off+recordHeaderSize:off+recordHeaderSize+n]))
		binary.LittleEndian.PutUint32(data[off+headerCRCOffset:], crc32.Checksum(data[off:off+headerCRCOffset], crcTable))
		off += recordHeaderSize + n
	}
}

// fixSnapHeader makes the magic, length and CRC of a snapshot file match its
// payload.
func fixSnapHeader(data []byte) []byte {
	if len(data) < snapHeaderSize {
		data = append(data, make([]byte, snapHeaderSize-len(data))...)
	}
	copy(data, snapMagic)
	payload := data[snapHeaderSize:]
	binary.LittleEndian.PutUint64(data[8:], uint64(len(payload)))
	binary.LittleEndian.PutUint32(data[16:], crc32.Checksum(payload, crcTable))
	return data
}

// segmentFileName names a fuzzed segment after its own header when that
// parses, so recovery goes past the name check.
func segmentFileName(data []byte) string {
	if len(data) >= recordHeaderSize+segmentHeaderPayloadSize {
		if h, err := decodeSegmentHeader(data[recordHeaderSize : recordHeaderSize+segmentHeaderPayloadSize]); err == nil {
			return segmentName(h.seq, h.firstIndex)
		}
	}
	return segmentName(0, 1)
}

// snapFileName names a fuzzed snapshot file after the metadata it holds
// when that decodes.
func snapFileName(data []byte) string {
	if len(data) >= snapHeaderSize {
		s := &raftpb.Snapshot{}
		if proto.Unmarshal(data[snapHeaderSize:], s) == nil {
			return snapName(s.GetMetadata().GetTerm(), s.GetMetadata().GetIndex())
		}
	}
	return snapName(1, 2)
}

// storageView reads everything Storage offers; it must not panic whatever
// the recovered state.
func storageView(t *testing.T, s *Storage) logView {
	t.Helper()
	first, err := s.FirstIndex()
	if err != nil {
		t.Fatalf("FirstIndex: %v", err)
	}
	last, err := s.LastIndex()
	if err != nil {
		t.Fatalf("LastIndex: %v", err)
	}
	if last+1 < first {
		t.Fatalf("last index %d before first index %d - 1", last, first)
	}
	if _, _, err := s.InitialState(); err != nil {
		t.Fatalf("InitialState: %v", err)
	}
	hs := s.HardState()
	if hs.GetCommit() > last {
		t.Fatalf("recovered commit %d beyond last index %d", hs.GetCommit(), last)
	}
	return viewOf(t, s)
}

// FuzzOpenWAL writes a fuzzed segment and snapshot file into a WAL directory
// and opens it. Open must return an error or a log whose Storage is
// consistent; opening the repaired directory a second time must give the
// same log (recovery is idempotent) and the log must accept a next write.
func FuzzOpenWAL(f *testing.F) {
	seg, snap := fuzzWALSeeds(f)
	f.Add(seg, snap, false)
	f.Add(seg, snap, true)
	f.Add(seg[:len(seg)-5], snap, false)
	f.Add(seg[:len(seg)-5], snap[:len(snap)-1], true)
	f.Add(append(append([]byte{}, seg...), make([]byte, 64)...), snap, false)
	f.Add([]byte{}, []byte{}, false)
	f.Fuzz(func(t *testing.T, seg, snap []byte, fix bool) {
		if len(seg) > 1<<20 || len(snap) > 1<<20 {
			return
		}
		seg = bytes.Clone(seg)
		snap = bytes.Clone(snap)
		if fix {
			fixRecordCRCs(seg)
			snap = fixSnapHeader(snap)
		}
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, "snap"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, segmentFileName(seg)), seg, 0o600); err != nil {
			t.Fatal(err)
		}
		if len(snap) > 0 {
			if err := os.WriteFile(filepath.Join(dir, "snap", snapFileName(snap)), snap, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		opts := Options{Dir: dir, NoSync: true, NoPreallocate: true, Logger: zap.NewNop()}
		l, err := Open(opts)
		if err != nil {
			return
		}
		v1 := storageView(t, l.Storage())
		if err := l.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		l, err = Open(opts)
		if err != nil {
			t.Fatalf("second Open of a recovered WAL: %v", err)
		}
		defer l.Close()
		if v2 := storageView(t, l.Storage()); !sameView(v1, v2) {
			t.Fatalf("second Open recovered %+v, first %+v", v2, v1)
		}
		next := v1.Last + 1
		term := max(v1.HS[0], 1)
		if len(v1.Terms) > 0 {
			term = max(term, v1.Terms[len(v1.Terms)-1])
		}
		if next == 0 { // last index is the maximum: nothing can follow
			return
		}
		if err := l.Save(nil, []*raftpb.Entry{ent(next, term)}, nil); err != nil {
			t.Fatalf("Save entry %d after recovery: %v", next, err)
		}
		if last, _ := l.Storage().LastIndex(); last != next {
			t.Fatalf("last index %d after saving entry %d", last, next)
		}
	})
}

func sameView(a, b logView) bool {
	if a.First != b.First || a.Last != b.Last || a.SnapIndex != b.SnapIndex || a.SnapTerm != b.SnapTerm || a.HS != b.HS {
		return false
	}
	if len(a.Terms) != len(b.Terms) || len(a.Data) != len(b.Data) {
		return false
	}
	for i := range a.Terms {
		if a.Terms[i] != b.Terms[i] || a.Data[i] != b.Data[i] {
			return false
		}
	}
	return true
}

// FuzzReadSnapFile checks the snapshot file decoder: no panic, only errors
// wrapping ErrCorrupt for damaged contents, and a snapshot that decodes is
// the one its name says and writes back to the same bytes.
func FuzzReadSnapFile(f *testing.F) {
	_, snap := fuzzWALSeeds(f)
	f.Add(snap, false)
	f.Add(snap, true)
	f.Add(snap[:snapHeaderSize], true)
	f.Add([]byte(snapMagic), false)
	f.Fuzz(func(t *testing.T, data []byte, fix bool) {
		data = bytes.Clone(data)
		if fix {
			data = fixSnapHeader(data)
		}
		dir := t.TempDir()
		name := snapFileName(data)
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
		sf, ok := parseSnapName(name)
		if !ok {
			t.Fatalf("parseSnapName(%q) failed", name)
		}
		s, err := readSnapFile(dir, sf)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		md := s.GetMetadata()
		if md.GetIndex() != sf.index || md.GetTerm() != sf.term {
			t.Fatalf("decoded index %d term %d from file %s", md.GetIndex(), md.GetTerm(), name)
		}
		out := t.TempDir()
		name2, err := writeSnapFile(out, s, true)
		if err != nil {
			t.Fatalf("writeSnapFile: %v", err)
		}
		s2, err := readSnapFile(out, snapFile{name: name2, term: sf.term, index: sf.index})
		if err != nil {
			t.Fatalf("re-read written snapshot: %v", err)
		}
		if !proto.Equal(s, s2) {
			t.Fatalf("snapshot changed in a write/read round trip:\n%v\n%v", s, s2)
		}
	})
}

// FuzzRecordPayloads checks the fixed-size record decoders: the segment
// header and snapshot marker decode only what their encoders produce, and
// decode(encode(x)) == x.
func FuzzRecordPayloads(f *testing.F) {
	f.Add(appendSegmentHeaderRecord(nil, 3, 17)[recordHeaderSize:])
	f.Add(appendMarkerRecord(nil, markerCompact, 9, 2)[recordHeaderSize:])
	f.Add(appendMarkerRecord(nil, markerReset, 1<<40, 7)[recordHeaderSize:])
	f.Add([]byte{})
	// An entry with its fields out of order and Index twice (the last wins).
	f.Add([]byte{0x22, 0x01, 'x', 0x18, 0x05, 0x10, 0x02, 0x08, 0x00, 0x18, 0x07})
	f.Fuzz(func(t *testing.T, p []byte) {
		if h, err := decodeSegmentHeader(p); err == nil {
			enc := appendSegmentHeaderRecord(nil, h.seq, h.firstIndex)
			if !bytes.Equal(enc[recordHeaderSize:], p) {
				t.Fatalf("segment header %+v re-encodes to %x, decoded from %x", h, enc[recordHeaderSize:], p)
			}
			if h2, err := decodeSegmentHeader(enc[recordHeaderSize:]); err != nil || h2 != h {
				t.Fatalf("segment header round trip: %+v %v, want %+v", h2, err, h)
			}
		}
		if m, err := decodeMarker(p); err == nil {
			enc := appendMarkerRecord(nil, m.kind, m.index, m.term)
			if !bytes.Equal(enc[recordHeaderSize:], p) {
				t.Fatalf("marker %+v re-encodes to %x, decoded from %x", m, enc[recordHeaderSize:], p)
			}
		}
		// Any payload framed as a record scans back as exactly that record.
		for _, typ := range []byte{recSegmentHeader, recEntry, recHardState, recSnapshot, 0xff} {
			buf, off := beginRecord(nil)
			buf = append(buf, p...)
			buf = finishRecord(buf, off, typ)
			var got [][]byte
			var types []byte
			res, err := scanRecords(buf, false, func(_ int64, ty byte, pl []byte) error {
				got = append(got, pl)
				types = append(types, ty)
				return nil
			})
			if err != nil || res.torn || len(got) != 1 || types[0] != typ || !bytes.Equal(got[0], p) {
				t.Fatalf("framed record type %d scans to %d records (%v), torn %v, err %v", typ, len(got), types, res.torn, err)
			}
		}
		// Entry and hard state payloads: decode, re-encode, decode again.
		e := &raftpb.Entry{}
		if proto.Unmarshal(p, e) == nil {
			// Recovery reads an entry's index and term without decoding
			// it; whatever decodes must read the same.
			if raw, err := readRawEntry(p); err != nil || raw.index != e.GetIndex() || raw.term != e.GetTerm() {
				t.Fatalf("raw read of entry %v: index %d term %d, %v", e, raw.index, raw.term, err)
			}
			b, err := appendEntryRecord(nil, e)
			if err != nil {
				t.Fatalf("re-encode entry: %v", err)
			}
			e2 := &raftpb.Entry{}
			if err := proto.Unmarshal(b[recordHeaderSize:], e2); err != nil || !proto.Equal(e, e2) {
				t.Fatalf("entry round trip: %v %v, want %v", e2, err, e)
			}
		}
	})
}
