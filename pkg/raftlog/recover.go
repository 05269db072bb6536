package raftlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-dev/kvd/pkg/fsutil"
)

// replay is the log as rebuilt from WAL records, before a snapshot is
// chosen.
type replay struct {
	// ents are contiguous; ents[0] has index start. They are still encoded:
	// recovery decodes only those after the snapshot it picks (most of a
	// WAL's entries are behind it).
	ents []rawEntry
	// start is the index the log continues from; meaningful once started.
	start   uint64
	started bool
	// reset is the last reset marker, if the log has restarted after it
	// since (ents begin at reset.index+1).
	reset    marker
	hasReset bool
	hs       *raftpb.HardState
	// markers maps the index of every snapshot marker seen to its term.
	markers map[uint64]uint64
}

func (r *replay) lastIndex() uint64 {
	return r.start + uint64(len(r.ents)) - 1
}

// rawEntry is an entry record as read: its index and term, and the
// encoded raftpb.Entry (a slice of the segment's bytes).
type rawEntry struct {
	index, term uint64
	p           []byte
}

// readRawEntry reads the index and term of the encoded raftpb.Entry p
// without decoding the rest (fields Term = 2, Index = 3).
func readRawEntry(p []byte) (rawEntry, error) {
	e := rawEntry{p: p}
	for len(p) > 0 {
		num, typ, n := protowire.ConsumeTag(p)
		if n < 0 {
			return e, protowire.ParseError(n)
		}
		p = p[n:]
		if (num == 2 || num == 3) && typ == protowire.VarintType {
			v, n := protowire.ConsumeVarint(p)
			if n < 0 {
				return e, protowire.ParseError(n)
			}
			if num == 2 {
				e.term = v
			} else {
				e.index = v
			}
			p = p[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, p)
		if n < 0 {
			return e, protowire.ParseError(n)
		}
		p = p[n:]
	}
	return e, nil
}

// decodeEntries decodes raw, checking each entry says what its record's
// scan read.
func decodeEntries(raw []rawEntry) ([]*raftpb.Entry, error) {
	ents := make([]*raftpb.Entry, len(raw))
	for i := range raw {
		e := &raftpb.Entry{}
		if err := proto.Unmarshal(raw[i].p, e); err != nil {
			return nil, fmt.Errorf("%w: entry %d: %v", ErrCorrupt, raw[i].index, err)
		}
		if e.GetIndex() != raw[i].index || e.GetTerm() != raw[i].term {
			return nil, fmt.Errorf("%w: entry %d: decodes as index %d term %d", ErrCorrupt, raw[i].index, e.GetIndex(), e.GetTerm())
		}
		ents[i] = e
	}
	return ents, nil
}

func (r *replay) addEntry(e rawEntry) error {
	idx := e.index
	switch {
	case !r.started || idx < r.start:
		// The entry replaces everything from idx on; what precedes it is
		// not in the WAL, which the snapshot coverage check catches.
		r.ents = append(r.ents[:0:0], e)
		r.start, r.started, r.hasReset = idx, true, false
	case idx > r.start+uint64(len(r.ents)):
		return fmt.Errorf("entry index %d leaves a gap after %d", idx, r.lastIndex())
	default:
		r.ents = append(r.ents[:idx-r.start], e)
	}
	return nil
}

func (r *replay) addMarker(m marker) {
	r.markers[m.index] = m.term
	if m.kind == markerReset {
		r.ents = nil
		r.start, r.started = m.index+1, true
		r.reset, r.hasReset = m, true
	}
}

// covers checks that the replayed log continues the snapshot at (index,
// term) without a hole or a disagreeing entry.
func (r *replay) covers(index, term uint64) error {
	if !r.started {
		return nil
	}
	if r.start > index+1 {
		return fmt.Errorf("wal entries start at index %d, after snapshot index %d", r.start, index)
	}
	if index >= r.start {
		if index > r.lastIndex() {
			return fmt.Errorf("snapshot index %d beyond last wal index %d", index, r.lastIndex())
		}
		if t := r.ents[index-r.start].term; t != term {
			return fmt.Errorf("snapshot at index %d has term %d, wal entry has term %d", index, term, t)
		}
		return nil
	}
	if r.hasReset && r.reset.index == index && r.reset.term != term {
		return fmt.Errorf("snapshot at index %d has term %d, wal marker has term %d", index, term, r.reset.term)
	}
	return nil
}

// recover replays segs, picks the snapshot to start from and sets up the
// Storage view and the writer state.
//
// Most of a WAL lies behind the newest snapshot (max-wals segments are kept
// for a fallback to an older one), so replay first reads only the segments
// from fromSegment on. That suffices when the newest snapshot file turns out
// usable; otherwise (no marker found, damaged, not continued) every segment
// is replayed and the snapshot chosen among all, as if no shortcut existed.
func (l *Log) recover(segs []segment) error {
	files, err := listSnapFiles(l.snapDir)
	if err != nil {
		return err
	}
	var (
		r    *replay
		snap *raftpb.Snapshot
	)
	from := fromSegment(segs, files)
	if from > 0 {
		if r, segs, err = l.replaySegments(segs, from); err != nil {
			return err
		}
		if snap, err = l.chooseSnapshot(r, files[:1]); err != nil || snap == nil {
			l.lg.Info("replaying the whole wal: the newest snapshot is not usable from its segments alone",
				zap.String("snapshot", files[0].name), zap.Error(err))
			from, snap = 0, nil
		}
	}
	if from == 0 {
		if r, segs, err = l.replaySegments(segs, 0); err != nil {
			return err
		}
		if snap, err = l.chooseSnapshot(r, files); err != nil {
			return err
		}
	}
	st := newStorage()
	if snap != nil {
		md := snap.GetMetadata()
		st.snap = snap
		st.ents = []*raftpb.Entry{dummyEntry(md.GetIndex(), md.GetTerm())}
		if r.started && md.GetIndex()+1 >= r.start {
			ents, err := decodeEntries(r.ents[md.GetIndex()+1-r.start:])
			if err != nil {
				return err
			}
			st.ents = append(st.ents, ents...)
		}
	} else {
		if r.started && r.start != 1 {
			return fmt.Errorf("%w: wal begins at index %d but there is no usable snapshot before it", ErrCorrupt, r.start)
		}
		ents, err := decodeEntries(r.ents)
		if err != nil {
			return err
		}
		st.ents = append(st.ents, ents...)
	}
	hs := r.hs
	if hs == nil {
		hs = &raftpb.HardState{}
	}
	snapIndex, snapTerm := st.ents[0].GetIndex(), st.ents[0].GetTerm()
	if hs.GetCommit() < snapIndex {
		// The snapshot's index was applied, so it is committed; raft
		// requires the commit index to cover the snapshot. This happens when
		// the snapshot was taken before the hard state that carried its
		// commit index reached the WAL.
		hs = proto.Clone(hs).(*raftpb.HardState)
		hs.Commit = new(snapIndex)
	}
	if hs.GetCommit() > st.lastIndex() {
		return fmt.Errorf("%w: hard state commit %d beyond last index %d", ErrCorrupt, hs.GetCommit(), st.lastIndex())
	}
	st.hs = hs

	l.st = st
	// A WAL whose only segment never got its header onto disk held nothing
	// durable: the member is as new as one without a WAL.
	l.isNew = len(segs) == 0 && snap == nil
	l.segs = segs
	l.segmentsRead = len(segs) - from
	l.hs = hs
	l.lastIndex = st.lastIndex()
	l.snapIndex, l.snapTerm = snapIndex, snapTerm
	if len(segs) > 0 {
		last := segs[len(segs)-1]
		path := filepath.Join(l.dir, last.name)
		f, err := os.OpenFile(path, os.O_WRONLY, 0o600)
		if err != nil {
			return fmt.Errorf("open wal segment %s for append: %w", path, err)
		}
		// Appends go right after the last record, into the preallocated
		// zeros if any.
		l.f, l.size = f, last.end
	}
	l.lg.Info("recovered raft log",
		zap.String("dir", l.dir),
		zap.Int("segments", len(segs)),
		zap.Int("segments-read", l.segmentsRead),
		zap.Uint64("snapshot-index", snapIndex),
		zap.Uint64("first-index", snapIndex+1),
		zap.Uint64("last-index", l.lastIndex),
		zap.Uint64("term", hs.GetTerm()),
		zap.Uint64("commit", hs.GetCommit()))
	return nil
}

// fromSegment is the first segment a replay from the newest snapshot file
// needs: the last one whose first index is at or below the snapshot's index
// S. That segment was started with the log ending before S, so the
// snapshot's marker (written once the log reached S, which never shrinks
// below an applied index) is in it or later; so is every entry after S that
// is still in the log. 0 when there is no snapshot file or no such segment.
func fromSegment(segs []segment, files []snapFile) int {
	if len(files) == 0 {
		return 0
	}
	from := 0
	for i, s := range segs {
		if s.firstIndex <= files[0].index {
			from = i
		}
	}
	return from
}

// replaySegments replays segs[from:] and returns the replay and segs without
// a last segment that held nothing durable. The segments before from are not
// read: their bookkeeping, which only retention uses, is bounded by the next
// segment's first index (every marker and every entry still in the log that
// they hold is below it).
func (l *Log) replaySegments(segs []segment, from int) (*replay, []segment, error) {
	r := &replay{markers: map[uint64]uint64{}}
	for i := range from {
		segs[i].maxEntry = segs[i+1].firstIndex - 1
		segs[i].maxMarker = segs[i+1].firstIndex - 1
	}
	for i := from; i < len(segs); i++ {
		segs[i].maxEntry, segs[i].maxMarker = 0, 0
		keep, err := l.replaySegment(&segs[i], r, i == len(segs)-1)
		if err != nil {
			return nil, nil, err
		}
		if !keep {
			return r, segs[:i], nil
		}
	}
	return r, segs, nil
}

// replaySegment feeds the records of seg into r and fills in seg's
// bookkeeping. A torn tail of the last segment is cut off; if nothing of the
// last segment survives (not even its header) the file is removed and keep
// is false.
func (l *Log) replaySegment(seg *segment, r *replay, last bool) (keep bool, err error) {
	path := filepath.Join(l.dir, seg.name)
	data, err := os.ReadFile(path)
	if err != nil {
		return false, fmt.Errorf("read wal segment %s: %w", path, err)
	}
	first := true
	res, err := scanRecords(data, last, func(off int64, typ byte, p []byte) error {
		if first != (typ == recSegmentHeader) {
			return fmt.Errorf("%w: record type %d at offset %d: segment header must come first and only once", ErrCorrupt, typ, off)
		}
		switch typ {
		case recSegmentHeader:
			first = false
			h, err := decodeSegmentHeader(p)
			if err != nil {
				return fmt.Errorf("%w: %v", ErrCorrupt, err)
			}
			if h.seq != seg.seq || h.firstIndex != seg.firstIndex {
				return fmt.Errorf("%w: segment header says seq %d first index %d, name says seq %d first index %d",
					ErrCorrupt, h.seq, h.firstIndex, seg.seq, seg.firstIndex)
			}
		case recEntry:
			e, err := readRawEntry(p)
			if err != nil {
				return fmt.Errorf("%w: entry at offset %d: %v", ErrCorrupt, off, err)
			}
			if err := r.addEntry(e); err != nil {
				return fmt.Errorf("%w: entry at offset %d: %v", ErrCorrupt, off, err)
			}
			seg.maxEntry = max(seg.maxEntry, e.index)
		case recHardState:
			hs := &raftpb.HardState{}
			if err := proto.Unmarshal(p, hs); err != nil {
				return fmt.Errorf("%w: hard state at offset %d: %v", ErrCorrupt, off, err)
			}
			r.hs = hs
		case recSnapshot:
			m, err := decodeMarker(p)
			if err != nil {
				return fmt.Errorf("%w: snapshot marker at offset %d: %v", ErrCorrupt, off, err)
			}
			r.addMarker(m)
			seg.maxMarker = max(seg.maxMarker, m.index)
		default:
			return fmt.Errorf("%w: unknown record type %d at offset %d", ErrCorrupt, typ, off)
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("wal segment %s: %w", path, err)
	}
	if !res.torn && first {
		if !last {
			return false, fmt.Errorf("wal segment %s: %w: no segment header", path, ErrCorrupt)
		}
		res.torn, res.tornReason = true, "empty segment"
	}
	seg.end = res.validEnd
	if !res.torn {
		return true, nil
	}
	if first {
		// Not even the header made it: the segment never held anything
		// durable.
		l.lg.Warn("removing torn wal segment", zap.String("segment", path), zap.String("reason", res.tornReason))
		if err := os.Remove(path); err != nil {
			return false, fmt.Errorf("remove torn wal segment %s: %w", path, err)
		}
		if err := fsutil.SyncDir(l.dir); err != nil {
			return false, err
		}
		return false, nil
	}
	l.lg.Warn("truncating torn wal tail",
		zap.String("segment", path),
		zap.Int64("offset", res.validEnd),
		zap.Int64("dropped-bytes", int64(len(data))-res.validEnd),
		zap.String("reason", res.tornReason))
	if err := truncateFile(path, res.validEnd); err != nil {
		return false, err
	}
	return true, nil
}

func truncateFile(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("open wal segment %s to truncate: %w", path, err)
	}
	err = f.Truncate(size)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("truncate wal segment %s at %d: %w", path, size, err)
	}
	return nil
}

// chooseSnapshot returns the newest of files (newest first) that a WAL marker
// acknowledges, that is intact, and that the replayed log continues; nil if
// there is none. A damaged file is skipped with a warning; an intact one the
// log does not continue is corruption.
func (l *Log) chooseSnapshot(r *replay, files []snapFile) (*raftpb.Snapshot, error) {
	for _, sf := range files {
		if term, ok := r.markers[sf.index]; !ok || term != sf.term {
			l.lg.Debug("ignoring snapshot file without wal marker", zap.String("file", sf.name))
			continue
		}
		snap, err := readSnapFile(l.snapDir, sf)
		if errors.Is(err, ErrCorrupt) {
			l.lg.Warn("skipping damaged snapshot file", zap.String("file", sf.name), zap.Error(err))
			continue
		}
		if err != nil {
			return nil, err
		}
		if err := r.covers(sf.index, sf.term); err != nil {
			return nil, fmt.Errorf("%w: snapshot %s: %v", ErrCorrupt, filepath.Join(l.snapDir, sf.name), err)
		}
		return snap, nil
	}
	return nil, nil
}
