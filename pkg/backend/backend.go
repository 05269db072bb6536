// Package backend is the contract between kvd's MVCC layer and a storage
// engine. Engines (bolt, badger) implement Backend; the conformance suite in
// backendtest checks that both behave the same.
package backend

import (
	"errors"
	"io"
)

// Bucket names a keyspace inside a backend. Keys in different buckets never
// collide. Engines without native buckets prefix keys with the bucket name.
type Bucket string

// Buckets used by kvd. Every engine creates them on Open.
const (
	Key  Bucket = "key"  // revision -> mvccpb.KeyValue
	Meta Bucket = "meta" // consistent index, compaction marks, ...
	// Lease, Auth, Members buckets are added by later pieces.
	Lease   Bucket = "lease"
	Auth    Bucket = "auth"
	Members Bucket = "members"
)

// AllBuckets lists the buckets an engine creates on Open.
var AllBuckets = []Bucket{Key, Meta, Lease, Auth, Members}

// ErrClosed is returned by operations on a closed backend.
var ErrClosed = errors.New("backend: closed")

// Backend is a transactional ordered key-value engine.
//
// Concurrency contract:
//   - Any number of ReadTx may be open at once, from any goroutine; each sees
//     a consistent snapshot of the last committed state as of its creation and
//     never sees later commits.
//   - Update is safe to call from several goroutines; the backend serialises
//     writers. kvd has one main writer (the applier) plus the compactor.
//   - When Update returns nil the changes are committed atomically and are
//     visible to every ReadTx created afterwards. Whether they are fsynced is
//     the engine's option (Options.Sync); kvd's durability comes from the WAL,
//     so a commit must only be atomic and crash-consistent (after a crash the
//     backend holds some prefix of the committed transactions).
type Backend interface {
	// ReadTx opens a read-only snapshot. The caller must Release it.
	ReadTx() (ReadTx, error)
	// Update runs fn in one write transaction and commits it if fn returns
	// nil; otherwise it rolls back and returns fn's error.
	Update(fn func(WriteTx) error) error
	// Size is the bytes the engine takes on disk (what etcd reports as db size).
	Size() int64
	// SizeInUse is the logical size of live data (etcd's dbSizeInUse); an
	// engine may return Size() when it cannot tell.
	SizeInUse() int64
	// Snapshot writes a consistent copy of the whole backend to w, in a form
	// that Restore of the same engine accepts.
	Snapshot(w io.Writer) (int64, error)
	// Defrag reclaims free space. It may block writers while it runs.
	Defrag() error
	// Sync forces everything committed so far to stable storage.
	Sync() error
	Close() error
}

// ReadTx is a consistent read-only view. Byte slices handed to callbacks or
// returned by Get are only valid until Release unless the method says
// otherwise; callers that keep them must copy.
type ReadTx interface {
	// Get returns the value of key in bucket, or nil and false.
	Get(b Bucket, key []byte) ([]byte, bool, error)
	// Range calls fn for keys in [start, end) in ascending order; a nil end
	// means to the end of the bucket. It stops when fn returns false or after
	// limit keys (limit <= 0: no limit).
	Range(b Bucket, start, end []byte, limit int, fn func(k, v []byte) bool) error
	// Release ends the view. Calling it twice is harmless.
	Release()
}

// WriteTx sees its own writes. Its Release is a no-op: Update ends it.
type WriteTx interface {
	ReadTx
	Put(b Bucket, key, value []byte) error
	Delete(b Bucket, key []byte) error
}

// Options are common to all engines.
type Options struct {
	// Dir is the directory the engine keeps its files in.
	Dir string
	// Sync makes each committed Update durable before it returns.
	Sync bool
}
