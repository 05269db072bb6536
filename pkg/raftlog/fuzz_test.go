package raftlog

import (
	"testing"
)

// FuzzScanRecords checks that no input makes the record scanner panic, and
// that what it accepts up to validEnd scans cleanly again as a non-last
// segment (recovery keeps only well-formed prefixes).
func FuzzScanRecords(f *testing.F) {
	seg := appendSegmentHeaderRecord(nil, 0, 1)
	seg, _ = appendEntryRecord(seg, ent(1, 1))
	seg, _ = appendHardStateRecord(seg, hardState(1, 1, 1))
	seg = appendMarkerRecord(seg, markerCompact, 1, 1)
	f.Add(seg, true)
	f.Add(seg[:len(seg)-3], true)
	f.Add(append(append([]byte{}, seg...), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), true)
	f.Add(seg[:len(seg)-3], false)
	f.Add([]byte{}, true)
	f.Fuzz(func(t *testing.T, data []byte, last bool) {
		n := 0
		res, err := scanRecords(data, last, func(int64, byte, []byte) error { n++; return nil })
		if err != nil {
			return
		}
		if res.validEnd < 0 || res.validEnd > int64(len(data)) {
			t.Fatalf("validEnd %d outside [0, %d]", res.validEnd, len(data))
		}
		if res.torn && !last {
			t.Fatal("torn tail reported for a non-last segment")
		}
		if !res.torn && res.validEnd != int64(len(data)) && !(last && allZero(data[res.validEnd:])) {
			t.Fatalf("clean scan stopped at %d of %d before non-zero bytes", res.validEnd, len(data))
		}
		m := 0
		again, err := scanRecords(data[:res.validEnd], false, func(int64, byte, []byte) error { m++; return nil })
		if err != nil || again.torn || m != n {
			t.Fatalf("accepted prefix rescans to %d records (want %d), torn %v, err %v", m, n, again.torn, err)
		}
	})
}
