package raftlog

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

const segmentSuffix = ".wal"

// segmentName is <seq>-<first index>.wal in fixed-width hex, so names sort
// in sequence order.
func segmentName(seq, firstIndex uint64) string {
	return fmt.Sprintf("%016x-%016x%s", seq, firstIndex, segmentSuffix)
}

// segment describes one WAL segment file.
type segment struct {
	name            string
	seq, firstIndex uint64
	// maxEntry is the highest entry index written to the segment (0 if none).
	maxEntry uint64
	// maxMarker is the highest snapshot marker index in the segment (0 if
	// none; a snapshot never has index 0).
	maxMarker uint64
	// end is the offset past the last record (recovery only): the file may
	// be longer, preallocated with zeros.
	end int64
}

// listSegments returns the WAL segments in dir in sequence order. A file
// with the .wal suffix whose name does not parse is reported as corruption.
func listSegments(dir string) ([]segment, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list wal dir %s: %w", dir, err)
	}
	var segs []segment
	for _, de := range des {
		name := de.Name()
		if !strings.HasSuffix(name, segmentSuffix) || de.IsDir() {
			continue
		}
		var seq, first uint64
		if n, err := fmt.Sscanf(name, "%016x-%016x.wal", &seq, &first); err != nil || n != 2 || segmentName(seq, first) != name {
			return nil, fmt.Errorf("%w: unexpected wal file name %s in %s", ErrCorrupt, name, dir)
		}
		segs = append(segs, segment{name: name, seq: seq, firstIndex: first})
	}
	slices.SortFunc(segs, func(a, b segment) int {
		switch {
		case a.seq < b.seq:
			return -1
		case a.seq > b.seq:
			return 1
		}
		return 0
	})
	for i := 1; i < len(segs); i++ {
		if segs[i].seq != segs[i-1].seq+1 {
			return nil, fmt.Errorf("%w: wal segment sequence broken in %s: %s follows %s (segment %d missing)",
				ErrCorrupt, dir, segs[i].name, segs[i-1].name, segs[i-1].seq+1)
		}
	}
	return segs, nil
}
