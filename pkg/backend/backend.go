// Package backend is the contract between kvd's MVCC layer and a storage
// engine. Engines (bolt, badger) implement Backend; the conformance suite in
// backendtest checks that both behave the same.
package backend

import (
	"errors"
	"fmt"
	"io"
)

// Bucket names a keyspace inside a backend. Keys in different buckets never
// collide, whatever the names (a bucket "key" never sees the keys of "keyx").
// Engines without native buckets prefix keys with an encoding of the name.
// A name is 1 to MaxBucketLen bytes. Writing to a bucket that does not exist
// yet creates it; reading one that does not exist finds nothing.
type Bucket string

// MaxBucketLen bounds bucket names so engines can length-prefix them in one byte.
const MaxBucketLen = 255

// Validate reports whether b is a usable bucket name.
func (b Bucket) Validate() error {
	if len(b) == 0 || len(b) > MaxBucketLen {
		return fmt.Errorf("backend: bucket name %q must be 1 to %d bytes", string(b), MaxBucketLen)
	}
	return nil
}

// Buckets used by kvd. Every engine creates them on Open.
const (
	Key  Bucket = "key"  // revision -> mvccpb.KeyValue
	Meta Bucket = "meta" // consistent index, compaction marks, ...
	// Lease, Auth, Members buckets are added by later pieces.
	Lease   Bucket = "lease"
	Auth    Bucket = "auth"
	Members Bucket = "members"
	// Alarm holds the raised alarms (etcd's "alarm" bucket): key a
	// marshaled etcdserverpb.AlarmMember, value empty.
	Alarm Bucket = "alarm"
)

// AllBuckets lists the buckets an engine creates on Open.
var AllBuckets = []Bucket{Key, Meta, Lease, Auth, Members, Alarm}

var (
	// ErrClosed is returned by operations on a closed backend.
	ErrClosed = errors.New("backend: closed")
	// ErrTxDone is returned by operations on a released ReadTx or on a WriteTx
	// after its Update returned.
	ErrTxDone = errors.New("backend: transaction done")
	// ErrUpdateTooLarge is returned (wrapped) when one Update holds more writes
	// than the engine can commit atomically. Nothing of that Update is committed.
	ErrUpdateTooLarge = errors.New("backend: update too large")
	// ErrUnsorted is returned (wrapped) by a SortedBulkLoad given a record
	// out of key order.
	ErrUnsorted = errors.New("backend: records out of key order")
)

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
//   - Keep ReadTx short. An open ReadTx pins old data: bolt cannot grow its
//     memory map past it (a writer that must remap waits for it) and Badger
//     cannot discard versions it may see. Never call Update from a goroutine
//     that holds a ReadTx.
//   - Close waits for in-flight Updates and for every ReadTx to be released;
//     afterwards every method returns ErrClosed. Closing twice is harmless.
type Backend interface {
	// ReadTx opens a read-only snapshot. The caller must Release it.
	ReadTx() (ReadTx, error)
	// Update runs fn in one write transaction and commits it if fn returns
	// nil; otherwise it rolls back and returns fn's error. If a Put or Delete
	// inside fn failed, Update rolls back and returns that error even when fn
	// returns nil: an Update commits all of its writes or none.
	Update(fn func(WriteTx) error) error
	// Size is the bytes the engine takes on disk (what etcd reports as db size).
	Size() int64
	// SizeInUse is the logical size of live data (etcd's dbSizeInUse); an
	// engine may return Size() when it cannot tell.
	SizeInUse() int64
	// Snapshot writes a consistent copy of the whole backend to w, in a form
	// that Restore of the same engine accepts.
	Snapshot(w io.Writer) (int64, error)
	// Defrag reclaims free space: it copies the live data into a new store
	// and swaps that in. Readers never wait, and a ReadTx opened before the
	// swap goes on seeing the old store. Updates go on committing during the
	// copy and wait only for the final swap, unless so much is written
	// during the copy that the engine's bounded journal of those writes
	// fills up: then they wait for the rest of the copy. One Defrag runs at
	// a time (a second one waits), and Close waits for it. On error the old
	// store stays live and the partial copy is removed.
	Defrag() error
	// Sync forces everything committed so far to stable storage.
	Sync() error
	Close() error
}

// BulkLoader is an engine's fast way to fill an empty backend (a restore,
// a migration): fn calls put for every record, best in ascending key order
// within each bucket (the engine lays them out for that; any order is
// still correct), buckets in any order. The engine may commit in
// several steps as it goes, with the cheapest layout for ordered input, and
// without fsync: nothing is durable before Sync, and a failed load leaves a
// backend to throw away. Not for a backend in use.
type BulkLoader interface {
	BulkLoad(fn func(put func(b Bucket, key, value []byte) error) error) error
}

// SortedBulkLoader is a BulkLoader for input whose records come in ascending
// key order within each bucket (a dump's), which lets an engine write its
// final layout directly. Records out of order fail the load with
// ErrUnsorted. It may drop what the backend held; nothing is durable before
// Sync.
type SortedBulkLoader interface {
	SortedBulkLoad(fn func(put func(b Bucket, key, value []byte) error) error) error
}

// ReadTx is a consistent read-only view, used by one goroutine at a time.
// Callers must not modify returned byte slices, and must copy the ones they
// keep longer than stated.
type ReadTx interface {
	// Get returns the value of key in bucket, or nil and false. The value is
	// valid until Release (for a WriteTx: until Update returns). A present key
	// with an empty value returns a non-nil empty slice and true.
	Get(b Bucket, key []byte) ([]byte, bool, error)
	// Range calls fn for keys in [start, end) in ascending byte order; a nil
	// start means from the start of the bucket, a nil end to its end. It stops
	// when fn returns false or after limit keys (limit <= 0: no limit). k and
	// v are valid only during the call to fn. fn may call Get on the same tx
	// but not Range, Put or Delete.
	Range(b Bucket, start, end []byte, limit int, fn func(k, v []byte) bool) error
	// Release ends the view. Calling it twice is harmless.
	Release()
}

// OwnedValues is implemented by a ReadTx whose Get returns a copy that the
// caller owns: valid after Release, written by nothing else. A reader that
// would copy the value takes it as it is.
type OwnedValues interface {
	ValuesOwned()
}

// WriteTx sees its own writes. Its Release is a no-op: Update ends it.
type WriteTx interface {
	ReadTx
	// Put sets key (non-empty) to value in bucket. It copies both: the caller
	// may reuse them as soon as Put returns.
	Put(b Bucket, key, value []byte) error
	// Delete removes key from bucket; deleting an absent key is not an error.
	Delete(b Bucket, key []byte) error
}

// Options are common to all engines.
type Options struct {
	// Dir is the directory the engine keeps its files in.
	Dir string
	// Sync makes each committed Update durable before it returns. Engines
	// document how they honour it; without it a commit is still atomic and
	// crash-consistent.
	Sync bool
}
