package raftlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-dev/kvd/pkg/failpoint"
	"github.com/kvd-dev/kvd/pkg/fsutil"
)

// DefaultSegmentSize is the segment size used when Options.SegmentSize is 0.
const DefaultSegmentSize int64 = 64 << 20

// Options configure a Log.
type Options struct {
	// Dir holds the WAL segments; snapshot files go in Dir/snap. Both are
	// created as needed.
	Dir string
	// SegmentSize is the size past which the current segment is closed and
	// the next write starts a new one. Default DefaultSegmentSize.
	SegmentSize int64
	// NoSync skips every fsync. Tests only: a crash loses data.
	NoSync bool
	// Logger may be nil.
	Logger *zap.Logger
	// NoPreallocate skips reserving each segment's space up front and
	// preparing the next segment in the background (spare.go), for tests
	// and tools that edit segments by byte offset. Preallocated segments
	// make each fdatasync cheaper: the file size does not change.
	NoPreallocate bool
	// CatchUpEntries is how many entries before a snapshot stay readable
	// through Storage, so a follower slightly behind gets entries instead of
	// a snapshot (etcd's snapshot-catchup-entries). 0 keeps none.
	CatchUpEntries uint64
	// MaxSnapshots is how many snapshot files CreateSnapshot leaves on disk,
	// newest first (etcd's max-snapshots); 0 keeps them all.
	MaxSnapshots uint
	// MaxWALs is how many WAL segments CreateSnapshot leaves on disk
	// (etcd's max-wals); 0 keeps them all. As in etcd, a segment that
	// recovery still needs is kept whatever the limit: only segments behind
	// the previous snapshot are removed, oldest first, while more than
	// MaxWALs remain.
	MaxWALs uint
	// OnFsync, if set, observes how long each WAL fdatasync took (etcd's
	// etcd_disk_wal_fsync_duration_seconds). Writes that need no fsync, such
	// as a new commit index alone, are not observed.
	OnFsync func(time.Duration)
	// OnWrite, if set, observes how long each write of a batch of records
	// to the current segment took, before its fsync (etcd's
	// etcd_disk_wal_write_duration_seconds; etcd times each record's write
	// into its page buffer, kvd writes a Save's records at once).
	OnWrite func(time.Duration)
}

// Log is kvd's raft write-ahead log: WAL segments, raft snapshot files, and
// the in-memory Storage raft reads.
//
// Save is called by one goroutine (the WAL writer). CreateSnapshot may be
// called concurrently with Save from another goroutine. Storage may be read
// by any goroutine at any time.
type Log struct {
	dir, snapDir string
	segmentSize  int64
	noSync       bool
	catchUp      uint64
	maxSnaps     uint
	maxWALs      uint
	noPrealloc   bool
	onFsync      func(time.Duration)
	onWrite      func(time.Duration)
	// written counts the bytes written to WAL segments since Open
	// (etcd_disk_wal_write_bytes_total); read by any goroutine.
	written atomic.Uint64
	// syncs counts WAL fdatasyncs (tests).
	syncs int
	lg    *zap.Logger
	st    *Storage
	isNew bool
	// segmentsRead is how many segments recovery replayed (the rest lie
	// behind the newest snapshot).
	segmentsRead int

	// snapMu serialises snapshot file writes, the WAL truncation behind
	// them and snapshot file purges. Lock order: snapMu before mu.
	snapMu sync.Mutex

	// mu guards the writer state below. It is held across a Save's write
	// and fsync; Storage readers never take it.
	mu sync.Mutex
	// f is the current segment, open for appending; nil until the first
	// write creates one.
	f *os.File
	// segs lists the segments on disk, oldest first. When f is not nil it
	// is the file of the last one.
	segs []segment
	// size is the current segment's length in bytes.
	size int64
	// lastIndex, snapIndex and snapTerm mirror the Storage view.
	lastIndex, snapIndex, snapTerm uint64
	// hs is the last persisted hard state; never nil. It is copied into
	// each new segment so deleting old segments never loses it.
	hs  *raftpb.HardState
	buf []byte
	// zeroed reports whether the current segment was a spare filled with
	// zeros; spare is the next one, being prepared (spare.go).
	zeroed bool
	spare  *spareFile
	// err is sticky: after a failed write or fsync the segment's tail is
	// unknown, so the Log refuses further writes.
	err    error
	closed bool
}

// Open opens the log in opts.Dir, creating the directories if needed, and
// recovers the latest usable snapshot, the entries after it and the hard
// state. See the package documentation for the recovery rules.
func Open(opts Options) (*Log, error) {
	if opts.Dir == "" {
		return nil, errors.New("raftlog: open: Options.Dir is empty")
	}
	if opts.SegmentSize <= 0 {
		opts.SegmentSize = DefaultSegmentSize
	}
	lg := opts.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	l := &Log{
		dir:         opts.Dir,
		snapDir:     filepath.Join(opts.Dir, "snap"),
		segmentSize: opts.SegmentSize,
		noSync:      opts.NoSync,
		catchUp:     opts.CatchUpEntries,
		maxSnaps:    opts.MaxSnapshots,
		maxWALs:     opts.MaxWALs,
		noPrealloc:  opts.NoPreallocate,
		onFsync:     opts.OnFsync,
		onWrite:     opts.OnWrite,
		lg:          lg.Named("raftlog"),
		hs:          &raftpb.HardState{},
	}
	for _, d := range []string{l.dir, l.snapDir} {
		if err := fsutil.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("raftlog: create dir %s: %w", d, err)
		}
	}
	if err := removeTmpFiles(l.snapDir); err != nil {
		return nil, fmt.Errorf("raftlog: open: %w", err)
	}
	if err := os.Remove(filepath.Join(l.dir, spareName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("raftlog: open: remove leftover spare segment: %w", err)
	}
	segs, err := listSegments(l.dir)
	if err != nil {
		return nil, fmt.Errorf("raftlog: open: %w", err)
	}
	if len(segs) == 0 {
		l.isNew = true
		l.st = newStorage()
		if files, err := listSnapFiles(l.snapDir); err == nil && len(files) > 0 {
			// A crash during the first Save can leave a snapshot file that no
			// WAL record acknowledges; it is never used.
			l.lg.Warn("ignoring snapshot files without a wal", zap.String("dir", l.snapDir), zap.Int("count", len(files)))
		}
		return l, nil
	}
	if err := l.recover(segs); err != nil {
		return nil, fmt.Errorf("raftlog: open %s: %w", l.dir, err)
	}
	return l, nil
}

// WrittenBytes returns the bytes written to WAL segments since Open:
// records, segment headers and padding, whether or not fsynced yet.
// Snapshot files are not counted. Safe from any goroutine.
func (l *Log) WrittenBytes() uint64 { return l.written.Load() }

// IsNew reports whether no WAL existed before Open: the member starts fresh.
func (l *Log) IsNew() bool { return l.isNew }

// Storage returns the raft.Storage view of the log.
func (l *Log) Storage() *Storage { return l.st }

// Save persists what one MsgStorageAppend carries: first snap (if not
// empty), then ents, then hs (if not empty), with one fdatasync of the WAL
// covering all of it (plus a directory fsync when a new segment was started;
// a snapshot's own file is fsynced before). Entries
// whose first index is at or below the current last index replace the
// conflicting suffix. Storage shows the new state only after the fsync.
// Nothing to write means no IO.
//
// Save must be called from one goroutine at a time. The entries are retained
// by Storage and must not be mutated afterwards.
func (l *Log) Save(hs *raftpb.HardState, ents []*raftpb.Entry, snap *raftpb.Snapshot) error {
	hasSnap := !raft.IsEmptySnap(snap)
	if !hasSnap && len(ents) == 0 && raft.IsEmptyHardState(hs) {
		return nil
	}
	if hasSnap {
		l.snapMu.Lock()
		defer l.snapMu.Unlock()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writableLocked(); err != nil {
		return err
	}

	base, last := l.snapIndex, l.lastIndex
	var snapIndex, snapTerm uint64
	if hasSnap {
		snapIndex, snapTerm = snap.GetMetadata().GetIndex(), snap.GetMetadata().GetTerm()
		if snapIndex <= l.snapIndex {
			return fmt.Errorf("raftlog: save snapshot at index %d (have %d): %w", snapIndex, l.snapIndex, raft.ErrSnapOutOfDate)
		}
		base, last = snapIndex, snapIndex
	}
	ents, err := trimAndCheck(ents, base, last)
	if err != nil {
		return fmt.Errorf("raftlog: save: %w", err)
	}
	writeHS := !raft.IsEmptyHardState(hs) && !sameHardState(hs, l.hs)
	if !hasSnap && len(ents) == 0 && !writeHS {
		return nil
	}

	if hasSnap {
		if _, err := writeSnapFile(l.snapDir, snap, l.noSync); err != nil {
			return fmt.Errorf("raftlog: save: %w", err)
		}
	}
	// Like raft.MustSync (and etcd's WAL): a new commit index alone need
	// not be durable (a restarted member learns it again), so it is written
	// without an fsync of its own; the next entries' fsync covers it. This
	// keeps the commit that follows every append off the disk's critical
	// path.
	mustSync := hasSnap || len(ents) > 0 || (writeHS && (hs.GetTerm() != l.hs.GetTerm() || hs.GetVote() != l.hs.GetVote()))
	err = l.writeLocked(mustSync, func(buf []byte) ([]byte, error) {
		if hasSnap {
			buf = appendMarkerRecord(buf, markerReset, snapIndex, snapTerm)
		}
		for _, e := range ents {
			var err error
			if buf, err = appendEntryRecord(buf, e); err != nil {
				return buf, err
			}
		}
		if writeHS {
			return appendHardStateRecord(buf, hs)
		}
		return buf, nil
	})
	if err != nil {
		return fmt.Errorf("raftlog: save: %w", err)
	}

	cur := &l.segs[len(l.segs)-1]
	var stSnap *raftpb.Snapshot
	if hasSnap {
		stSnap = snap
		l.snapIndex, l.snapTerm, l.lastIndex = snapIndex, snapTerm, snapIndex
		cur.maxMarker = max(cur.maxMarker, snapIndex)
	}
	if len(ents) > 0 {
		l.lastIndex = ents[len(ents)-1].GetIndex()
		cur.maxEntry = max(cur.maxEntry, l.lastIndex)
	}
	var stHS *raftpb.HardState
	if writeHS {
		stHS = cloneHardState(hs)
		l.hs = stHS
	}
	l.st.applySave(stSnap, ents, stHS)
	return nil
}

// trimAndCheck drops entries at or below base (covered by the snapshot) and
// checks the rest are contiguous and attach to a log ending at last.
func trimAndCheck(ents []*raftpb.Entry, base, last uint64) ([]*raftpb.Entry, error) {
	if len(ents) == 0 {
		return nil, nil
	}
	first := ents[0].GetIndex()
	if first <= base {
		if ents[len(ents)-1].GetIndex() <= base {
			return nil, nil
		}
		ents = ents[base+1-first:]
		first = base + 1
	}
	if first > last+1 {
		return nil, fmt.Errorf("entries start at index %d, log ends at %d: gap", first, last)
	}
	for i, e := range ents {
		if e.GetIndex() != first+uint64(i) {
			return nil, fmt.Errorf("entries not contiguous: index %d at position %d after %d", e.GetIndex(), i, first)
		}
	}
	return ents, nil
}

// cloneHardState copies hs without reflection; it is on the hot path.
func cloneHardState(hs *raftpb.HardState) *raftpb.HardState {
	return &raftpb.HardState{Term: new(hs.GetTerm()), Vote: new(hs.GetVote()), Commit: new(hs.GetCommit())}
}

func sameHardState(a, b *raftpb.HardState) bool {
	return a.GetTerm() == b.GetTerm() && a.GetVote() == b.GetVote() && a.GetCommit() == b.GetCommit()
}

func (l *Log) writableLocked() error {
	if l.closed {
		return ErrClosed
	}
	if l.err != nil {
		return fmt.Errorf("raftlog: log unusable after earlier failure: %w", l.err)
	}
	return nil
}

// writeLocked appends the records built by fill to the current segment,
// starting a new segment first if there is none or the current one has
// passed the segment size, and, if mustSync, makes them durable with one
// fdatasync (plus a directory fsync for a new segment). Any failure is
// sticky.
func (l *Log) writeLocked(mustSync bool, fill func(buf []byte) ([]byte, error)) error {
	buf := l.buf[:0]
	created := false
	if l.f == nil || l.size >= l.segmentSize || (!l.zeroed && l.size >= earlyCutSize && l.spareReadyLocked()) {
		var err error
		if buf, err = l.startSegmentLocked(buf); err != nil {
			l.err = err
			return err
		}
		created = true
	}
	l.maybeStartSpareLocked()
	buf, err := fill(buf)
	if err != nil {
		if created {
			// The new segment is empty on disk; recovery removes an empty
			// last segment, but a later write must not follow its header.
			l.err = err
		}
		return err
	}
	if cap(buf) <= 4<<20 {
		l.buf = buf[:0]
	}
	name := l.segs[len(l.segs)-1].name
	failpoint.Hit(failpoint.WALBeforeWrite)
	wstart := time.Now()
	n, err := l.f.WriteAt(buf, l.size)
	if l.onWrite != nil {
		l.onWrite(time.Since(wstart))
	}
	l.size += int64(n)
	l.written.Add(uint64(n))
	if err != nil {
		l.err = fmt.Errorf("write wal segment %s: %w", name, err)
		return l.err
	}
	failpoint.Hit(failpoint.WALAfterWrite)
	if l.noSync || (!mustSync && !created) {
		return nil
	}
	start := time.Now()
	if err := fdatasync(l.f); err != nil {
		l.err = fmt.Errorf("fdatasync wal segment %s: %w", name, err)
		return l.err
	}
	failpoint.Hit(failpoint.WALAfterSync)
	if l.onFsync != nil {
		l.onFsync(time.Since(start))
	}
	l.syncs++
	if created {
		if err := fsutil.SyncDir(l.dir); err != nil {
			l.err = err
			return err
		}
	}
	return nil
}

// startSegmentLocked creates the next segment file and appends its header
// record, and a copy of the current hard state, to buf. The bytes reach the
// file with the caller's write.
func (l *Log) startSegmentLocked(buf []byte) ([]byte, error) {
	var seq uint64
	if len(l.segs) > 0 {
		seq = l.segs[len(l.segs)-1].seq + 1
	}
	first := l.lastIndex + 1
	name := segmentName(seq, first)
	path := filepath.Join(l.dir, name)
	if l.f != nil {
		// Everything in the old segment was fsynced by the write that
		// filled it. Its preallocated rest is cut off, durably, before the
		// next segment exists: only the last segment may end in zeros.
		old := l.segs[len(l.segs)-1].name
		if err := l.f.Truncate(l.size); err != nil {
			return buf, fmt.Errorf("truncate wal segment %s: %w", old, err)
		}
		if !l.noSync {
			if err := fdatasync(l.f); err != nil {
				return buf, fmt.Errorf("fdatasync wal segment %s: %w", old, err)
			}
		}
		if err := l.f.Close(); err != nil {
			return buf, fmt.Errorf("close wal segment %s: %w", old, err)
		}
		l.f = nil
	}
	f := l.takeSpareLocked(path)
	l.zeroed = f != nil
	if f == nil {
		var err error
		if f, err = os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600); err != nil {
			return buf, fmt.Errorf("create wal segment %s: %w", path, err)
		}
		if !l.noPrealloc {
			if err := preallocate(f, l.segmentSize); err != nil {
				f.Close()
				os.Remove(path)
				return buf, fmt.Errorf("preallocate wal segment %s: %w", path, err)
			}
		}
	}
	l.f = f
	l.size = 0
	l.segs = append(l.segs, segment{name: name, seq: seq, firstIndex: first})
	buf = appendSegmentHeaderRecord(buf, seq, first)
	if !raft.IsEmptyHardState(l.hs) {
		return appendHardStateRecord(buf, l.hs)
	}
	return buf, nil
}

// CreateSnapshot records that the state machine holds everything up to
// index: it writes a snapshot file (index, the term of index, cs, data),
// compacts Storage so FirstIndex becomes index+1, appends a snapshot marker
// to the WAL, deletes the WAL segments no longer needed and old snapshot
// files.
//
// index must be applied (hence committed). At the current snapshot index the
// call does nothing; below it the error wraps raft.ErrSnapOutOfDate. The WAL is kept
// back to the previous snapshot, so that a damaged newest snapshot file can
// fall back to it on Open. Safe to call concurrently with Save; the snapshot
// file write does not block Save.
func (l *Log) CreateSnapshot(index uint64, cs *raftpb.ConfState, data []byte) error {
	return l.CreateSnapshotKeeping(index, cs, data, l.catchUp)
}

// CreateSnapshotKeeping is CreateSnapshot keeping keep entries before index
// readable through Storage instead of Options.CatchUpEntries.
func (l *Log) CreateSnapshotKeeping(index uint64, cs *raftpb.ConfState, data []byte, keep uint64) error {
	l.snapMu.Lock()
	defer l.snapMu.Unlock()

	l.mu.Lock()
	err := l.writableLocked()
	prevSnap, last := l.snapIndex, l.lastIndex
	l.mu.Unlock()
	if err != nil {
		return err
	}
	// snapMu keeps Save from installing a snapshot until we are done, so
	// prevSnap stays current; entries up to an applied index never change.
	if index == prevSnap && index > 0 {
		return nil
	}
	if index <= prevSnap {
		return fmt.Errorf("raftlog: create snapshot at %d (have %d): %w", index, prevSnap, raft.ErrSnapOutOfDate)
	}
	if index > last {
		return fmt.Errorf("raftlog: create snapshot at %d: beyond last index %d", index, last)
	}
	term, err := l.st.Term(index)
	if err != nil {
		return fmt.Errorf("raftlog: create snapshot at %d: term: %w", index, err)
	}
	var csCopy *raftpb.ConfState
	if cs != nil {
		csCopy = proto.Clone(cs).(*raftpb.ConfState)
	}
	snap := raftpb.EnsureSnapshot(&raftpb.Snapshot{
		Data:     data,
		Metadata: &raftpb.SnapshotMetadata{Index: new(index), Term: new(term), ConfState: csCopy},
	})
	failpoint.Hit(failpoint.SnapshotBeforeSave)
	name, err := writeSnapFile(l.snapDir, snap, l.noSync)
	if err != nil {
		return fmt.Errorf("raftlog: create snapshot: %w", err)
	}
	failpoint.Hit(failpoint.SnapshotAfterSave)

	l.mu.Lock()
	if err := l.writableLocked(); err != nil {
		l.mu.Unlock()
		return err
	}
	if t, err := l.st.Term(index); err != nil || t != term {
		l.mu.Unlock()
		return fmt.Errorf("raftlog: create snapshot at %d: entry changed under the snapshot (term %d, now %d, %v)", index, term, t, err)
	}
	err = l.writeLocked(true, func(buf []byte) ([]byte, error) {
		return appendMarkerRecord(buf, markerCompact, index, term), nil
	})
	if err != nil {
		l.mu.Unlock()
		return fmt.Errorf("raftlog: create snapshot %s: %w", name, err)
	}
	cur := &l.segs[len(l.segs)-1]
	cur.maxMarker = max(cur.maxMarker, index)
	l.snapIndex, l.snapTerm = index, term
	l.st.compact(snap, keep)
	obsolete := l.obsoleteSegmentsLocked(prevSnap)
	l.mu.Unlock()

	if len(obsolete) > 0 {
		failpoint.Hit(failpoint.WALBeforeTruncate)
	}
	if err := l.removeSegments(obsolete); err != nil {
		return fmt.Errorf("raftlog: create snapshot %s: %w", name, err)
	}
	if len(obsolete) > 0 {
		failpoint.Hit(failpoint.WALAfterTruncate)
	}
	if l.maxSnaps == 0 {
		return nil
	}
	removed, err := purgeSnapFiles(l.snapDir, int(l.maxSnaps))
	if err != nil {
		return fmt.Errorf("raftlog: create snapshot %s: %w", name, err)
	}
	if len(removed) > 0 && !l.noSync {
		if err := fsutil.SyncDir(l.snapDir); err != nil {
			return fmt.Errorf("raftlog: create snapshot %s: %w", name, err)
		}
	}
	return nil
}

// obsoleteSegmentsLocked returns the oldest segments that replay from the
// snapshot at keep no longer needs: all their entries are at or below keep
// and they hold no snapshot marker at or above keep (the marker that lets
// recovery use that snapshot). Only a prefix qualifies, so the remaining
// sequence has no hole, and never the current segment; and only as many as
// leave maxWALs segments (none when maxWALs is 0).
func (l *Log) obsoleteSegmentsLocked(keep uint64) []segment {
	if l.maxWALs == 0 {
		return nil
	}
	var out []segment
	for _, s := range l.segs[:len(l.segs)-1] {
		if len(l.segs)-len(out) <= int(l.maxWALs) || s.maxEntry > keep || s.maxMarker >= keep {
			break
		}
		out = append(out, s)
	}
	return out
}

// removeSegments deletes segs oldest first, making each removal durable
// before the next so a crash never leaves a hole in the sequence. segs is a
// prefix of l.segs; it leaves l.segs only once its file is gone.
func (l *Log) removeSegments(segs []segment) error {
	for _, s := range segs {
		path := filepath.Join(l.dir, s.name)
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("remove wal segment %s: %w", path, err)
		}
		if !l.noSync {
			if err := fsutil.SyncDir(l.dir); err != nil {
				return err
			}
		}
		l.mu.Lock()
		if len(l.segs) > 1 && l.segs[0].seq == s.seq {
			l.segs = l.segs[1:]
		}
		l.mu.Unlock()
		l.lg.Debug("removed wal segment", zap.String("segment", s.name))
	}
	return nil
}

// Close closes the current segment. Storage stays readable; Save and
// CreateSnapshot return ErrClosed.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	var errs []error
	if err := l.dropSpareLocked(); err != nil {
		errs = append(errs, fmt.Errorf("raftlog: %w", err))
	}
	if l.f != nil {
		if err := l.f.Close(); err != nil {
			errs = append(errs, fmt.Errorf("raftlog: close wal segment %s: %w", l.segs[len(l.segs)-1].name, err))
		}
		l.f = nil
	}
	return errors.Join(errs...)
}

// Exists reports whether dir holds a WAL (a log that Open would not call
// new), without opening it.
func Exists(dir string) (bool, error) {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	segs, err := listSegments(dir)
	if err != nil {
		return false, fmt.Errorf("raftlog: %w", err)
	}
	return len(segs) > 0, nil
}
