// Package failpoint marks the durability boundaries of kvd (WAL write and
// fsync, backend commit, snapshot save, snapshot install steps, WAL
// truncation, compaction steps) so crash tests can stop the process at each.
//
// In a normal build Hit is an empty function the compiler removes. A binary
// built with -tags failpoints reads KVD_FAILPOINTS at start:
//
//	KVD_FAILPOINTS="wal-after-write=kill@3,backend-before-commit=kill"
//
// Each entry names a failpoint and an action, optionally "@N" to act on the
// N-th hit only (default: the first). Actions:
//
//	kill   SIGKILL the process, as kill -9 does: nothing buffered in the
//	       process survives, what reached the kernel does.
//	panic  panic with the failpoint's name.
//
// Before acting, the process writes "kvd failpoint <name> hit" to stderr
// so a test can tell the failpoint, not something else, stopped it.
package failpoint

// The failpoints, in the order a write meets them. Names are etcd's gofail
// names where etcd has one at the same boundary.
const (
	// WAL (pkg/raftlog): before the bytes of a Save are written, after the
	// write and before its fsync, after the fsync.
	WALBeforeWrite = "wal-before-write"
	WALAfterWrite  = "wal-after-write"
	WALAfterSync   = "wal-after-sync"
	// Backend commit of applied entries (pkg/mvcc).
	BackendBeforeCommit = "backend-before-commit"
	BackendAfterCommit  = "backend-after-commit"
	// A member's own snapshot (pkg/raftlog CreateSnapshot): before the
	// snapshot file is written, after it and before the WAL marks it.
	SnapshotBeforeSave = "snapshot-before-save"
	SnapshotAfterSave  = "snapshot-after-save"
	// WAL truncation after a snapshot: before and after obsolete segments
	// are removed.
	WALBeforeTruncate = "wal-before-truncate"
	WALAfterTruncate  = "wal-after-truncate"
	// Installing a leader's snapshot (pkg/server): the old backend set
	// aside, the new one loaded and synced, the switch committed.
	InstallAfterAside  = "install-after-aside"
	InstallAfterLoad   = "install-after-load"
	InstallAfterSwitch = "install-after-switch"
	// Physical compaction (pkg/mvcc): before and after each batch of
	// deletions is committed.
	CompactBeforeCommit = "compact-before-commit"
	CompactAfterCommit  = "compact-after-commit"
)

// All lists every failpoint.
var All = []string{
	WALBeforeWrite, WALAfterWrite, WALAfterSync,
	BackendBeforeCommit, BackendAfterCommit,
	SnapshotBeforeSave, SnapshotAfterSave,
	WALBeforeTruncate, WALAfterTruncate,
	InstallAfterAside, InstallAfterLoad, InstallAfterSwitch,
	CompactBeforeCommit, CompactAfterCommit,
}

// Env is the environment variable a failpoints build reads; SegmentEnv,
// also read only by such a build, sets the WAL segment size in bytes.
const (
	Env        = "KVD_FAILPOINTS"
	SegmentEnv = "KVD_FAILPOINT_WAL_SEGMENT_BYTES"
)
