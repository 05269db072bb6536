package mvcc

import (
	"encoding/binary"
	"fmt"

	"github.com/kvd-dev/kvd/pkg/index"
)

// Backend layout, etcd's:
//
// Bucket backend.Key maps a revision to the KeyValue written at it. The key
// is 8-byte big-endian main, '_', 8-byte big-endian sub, plus a trailing 't'
// for a tombstone; byte order is revision order. A put stores the marshaled
// mvccpb.KeyValue; a tombstone stores a KeyValue with only Key set.
//
// Bucket backend.Meta holds:
//   - consistent_index, consistent_term: 8-byte big-endian, the raft index and
//     term of the last entry applied, committed with the data it produced;
//   - scheduledCompactRev, finishedCompactRev: a revision key (main, sub 0) as
//     above. scheduled > finished means a physical compaction is unfinished.
//
// Bucket backend.Lease maps a lease ID (8-byte big-endian) to the lease
// manager's record of it (see lease.go).
const (
	revBytesLen       = 8 + 1 + 8
	markedRevBytesLen = revBytesLen + 1
	markTombstone     = 't'
)

// Meta bucket keys; exported for the etcd-format converter (pkg/etcddb).
const (
	MetaKeyConsistentIndex  = "consistent_index"
	MetaKeyConsistentTerm   = "consistent_term"
	MetaKeyScheduledCompact = "scheduledCompactRev"
	MetaKeyFinishedCompact  = "finishedCompactRev"
)

var (
	metaConsistentIndex  = []byte(MetaKeyConsistentIndex)
	metaConsistentTerm   = []byte(MetaKeyConsistentTerm)
	metaScheduledCompact = []byte(MetaKeyScheduledCompact)
	metaFinishedCompact  = []byte(MetaKeyFinishedCompact)
)

// revToBytes encodes rev as a Key bucket key, with the tombstone mark if tomb.
func revToBytes(rev index.Revision, tomb bool) []byte {
	return appendRev(make([]byte, 0, markedRevBytesLen), rev, tomb)
}

func appendRev(dst []byte, rev index.Revision, tomb bool) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(rev.Main))
	dst = append(dst, '_')
	dst = binary.BigEndian.AppendUint64(dst, uint64(rev.Sub))
	if tomb {
		dst = append(dst, markTombstone)
	}
	return dst
}

// bytesToRev decodes a Key bucket key.
func bytesToRev(b []byte) (rev index.Revision, tomb bool, err error) {
	switch {
	case len(b) == revBytesLen:
	case len(b) == markedRevBytesLen && b[revBytesLen] == markTombstone:
		tomb = true
	default:
		return index.Revision{}, false, fmt.Errorf("decode revision key %x: bad length or mark", b)
	}
	if b[8] != '_' {
		return index.Revision{}, false, fmt.Errorf("decode revision key %x: missing separator", b)
	}
	rev.Main = int64(binary.BigEndian.Uint64(b))
	rev.Sub = int64(binary.BigEndian.Uint64(b[9:]))
	return rev, tomb, nil
}

func uint64Bytes(v uint64) []byte {
	return binary.BigEndian.AppendUint64(nil, v)
}

func bytesToUint64(b []byte) (uint64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("decode uint64: %d bytes, want 8", len(b))
	}
	return binary.BigEndian.Uint64(b), nil
}
