// Package index is kvd's in-memory key index: for every user key, the
// generations of revisions at which it was written. It is the secondary index
// of etcd's data model: the MVCC store looks a key up here to find the
// revision, then reads that revision's KeyValue from the backend.
package index

import "errors"

// ErrRevisionNotFound is returned when a key has no live revision at the
// requested point (never written, deleted, or compacted away).
var ErrRevisionNotFound = errors.New("index: revision not found")

// Revision identifies one write: Main is the store revision of the write
// transaction, Sub orders the writes inside that transaction (0, 1, ...).
type Revision struct {
	Main int64
	Sub  int64
}

// MaxSub is the greatest sub revision the index holds: one transaction's
// writes are numbered from 0, and a request of at most 2 GiB cannot carry
// more than this many.
const MaxSub = 1<<32 - 1

// GreaterThan reports whether a sorts after b ((Main, Sub) lexicographic).
func (a Revision) GreaterThan(b Revision) bool {
	if a.Main != b.Main {
		return a.Main > b.Main
	}
	return a.Sub > b.Sub
}

func compareRevisions(a, b Revision) int {
	switch {
	case a.GreaterThan(b):
		return 1
	case b.GreaterThan(a):
		return -1
	}
	return 0
}
