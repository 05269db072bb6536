// Package raftlog is kvd's raft write-ahead log: WAL segments, raft snapshot
// files, and the in-memory raft.Storage view raft reads.
//
// The raft driver runs raft with Config.AsyncStorageWrites. Its WAL writer
// hands each MsgStorageAppend to Log.Save, which writes the snapshot (if
// any), the entries and the hard state, fsyncs once, and only then updates
// Storage; the responses may then step back into raft. CreateSnapshot is
// called by whoever decides the state machine has applied enough to compact.
//
// # Files
//
//	<Dir>/<seq>-<first index>.wal    WAL segments, %016x-%016x, seq from 0
//	<Dir>/next.wal.tmp               the next segment, being filled with zeros
//	<Dir>/snap/<term>-<index>.snap   snapshot files, %016x-%016x
//
// A segment's first index is the log's last index + 1 when the segment was
// started. A new segment is started by the first write after the current one
// passes Options.SegmentSize; creating it fsyncs the directory. A segment is
// preallocated: either the spare file, written with zeros in the background
// once the current segment is half full and renamed into place, or, when no
// spare is ready, a file reserved with fallocate. Appends into written zeros
// fdatasync without a journal commit (spare.go); a segment of the other kind
// is cut early, at 4 MiB, once a spare is ready.
//
// # Record format
//
// A segment is a sequence of records, all integers little endian:
//
//	len   uint32  payload length
//	crc   uint32  CRC-32C (Castagnoli) of type and payload
//	type  uint8
//	hcrc  uint32  CRC-32C of the 9 header bytes before it
//	payload [len]byte
//
// Types:
//
//	1 segment header  magic "KVDWAL\x00\x00", version uint32 (1), seq uint64,
//	                  first index uint64. First record of every segment, and
//	                  only there; it must match the file name.
//	2 entry           raftpb.Entry, protobuf encoded.
//	3 hard state      raftpb.HardState, protobuf encoded. Every segment
//	                  repeats the current hard state right after its header,
//	                  so deleting older segments never loses it.
//	4 snapshot marker kind uint8, index uint64, term uint64. Kind 1
//	                  (compact, from CreateSnapshot) acknowledges a snapshot
//	                  file; entries after index stay. Kind 2 (reset, from a
//	                  snapshot received through Save) also discards the whole
//	                  log: it continues at index+1.
//
// One Save appends, in order: a reset marker if it carries a snapshot, its
// entries, its hard state; then one fdatasync, except when all it carries is
// a new commit index (raft.MustSync's rule: the next fdatasync covers it). (A carried snapshot's file is
// written and fsynced before that, as below.) An entry whose index is at or
// below the last index replaces that entry and everything after it, on disk
// by being appended later and in replay by the same rule.
//
// A snapshot file is magic "KVDSNAP1", payload length uint64, CRC-32C of the
// payload uint32, then the raftpb.Snapshot protobuf. It is written to a
// temporary name, fsynced, renamed, and the directory fsynced, before the
// WAL marker that acknowledges it is written.
//
// # Recovery
//
// Open reads the segments in sequence order, starting with the last segment
// whose first index is at or below the newest snapshot file's index: the
// segments before it (kept for a fallback to an older snapshot) hold neither
// that snapshot's marker nor an entry after it that is still in the log. If
// that snapshot turns out unusable, Open reads every segment and chooses as
// below; damage in a segment behind a usable newest snapshot is therefore
// found only then. A missing sequence number, a
// header that does not match its file name, a record out of place, an entry
// that leaves a gap, or any damaged record outside the torn-tail rule is an
// error wrapping ErrCorrupt that names the file and offset: kvd refuses to
// start rather than guess.
//
// Torn tail: only in the last segment, a record that is incomplete (the file
// ends inside its header, or inside the payload of a header whose own CRC is
// intact, so a damaged length is never mistaken for a short write), or whose
// header or payload CRC is wrong and after which the file holds only zero
// bytes, is the remains of a write cut short by a crash. The file is truncated there (a warning is logged) and the log goes
// on from the last complete record. If not even the segment header is
// complete, the segment file is removed. Limitation: a crash that persisted a
// later page of the last batch but not an earlier one leaves a bad record
// followed by data, which is reported as corruption.
//
// The snapshot to start from is the newest snapshot file that a WAL marker
// acknowledges (same index and term), whose CRC is intact, and that the
// replayed log continues without a hole. A damaged file is skipped with a
// warning and the next older one tried; an intact one the log does not
// continue is corruption. Unacknowledged files (a crash between writing the
// file and the marker) are ignored. Without a usable snapshot the WAL must
// begin at index 1. Storage then holds the snapshot, the entries after it,
// and the last hard state, whose commit index is raised to the snapshot
// index if it lags (the snapshot index was applied, so it is committed).
//
// # Retention
//
// CreateSnapshot keeps the newest Options.MaxSnapshots snapshot files and
// deletes the oldest WAL segments whose entries are all at or below the
// previous snapshot's index and that hold no marker at or above it, while
// more than Options.MaxWALs segments remain (etcd's max-snapshots and
// max-wals; 0 keeps all). The WAL therefore always
// reaches back to the previous snapshot, so a damaged newest snapshot file
// can fall back to it. Segments are removed oldest first with a directory
// fsync after each, so a crash never leaves a hole in the sequence. The
// in-memory Storage is compacted to the new snapshot's index.
package raftlog
