// Package entrybatch is the format of a raft entry that carries several
// client requests. Raft's cost is per entry (the leader clones and appends
// it, the WAL frames and checksums it, followers receive and the applier
// decodes it), so a leader that puts the writes queued in one driver turn
// into one entry pays it once for all of them.
//
// An entry's data is either one encoded request (an etcd
// InternalRaftRequest) or a batch:
//
//	0x00 0x01 (uvarint length, request)...
//
// No protobuf message starts with 0x00 (field number 0 is invalid), so a
// build that reads the entry as one request fails to decode it instead of
// applying nothing; members propose batches only once every member reads
// them (see pkg/server's entry format gate).
package entrybatch

import (
	"encoding/binary"
	"errors"
)

const (
	magic   = 0x00
	version = 0x01
)

// ErrCorrupt is returned by Split for a batch whose framing is broken.
var ErrCorrupt = errors.New("entrybatch: corrupt batch")

// Is reports whether data is a batch rather than one request.
func Is(data []byte) bool {
	return len(data) >= 2 && data[0] == magic
}

// Size is the encoded size of a batch of requests whose lengths add up to
// total: what Append adds to an empty batch.
func Size(n, total int) int {
	return 2 + n*binary.MaxVarintLen32 + total
}

// Begin starts a batch in dst.
func Begin(dst []byte) []byte {
	return append(dst, magic, version)
}

// Append adds one request to a batch begun with Begin.
func Append(dst, req []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(req)))
	return append(dst, req...)
}

// Split calls fn with each request of batch data, in order. The slices
// alias data. It fails without calling fn if the framing is broken or the
// version unknown, so a bad batch applies nothing.
func Split(data []byte, fn func(req []byte) error) error {
	n, err := Count(data)
	if err != nil {
		return err
	}
	rest := data[2:]
	for i := 0; i < n; i++ {
		l, k := binary.Uvarint(rest)
		rest = rest[k:]
		if err := fn(rest[:l]); err != nil {
			return err
		}
		rest = rest[l:]
	}
	return nil
}

// Count checks batch data's framing and returns how many requests it holds.
func Count(data []byte) (int, error) {
	if !Is(data) {
		return 0, ErrCorrupt
	}
	if data[1] != version {
		return 0, errors.New("entrybatch: unknown batch version")
	}
	n := 0
	for rest := data[2:]; len(rest) > 0; n++ {
		l, k := binary.Uvarint(rest)
		if k <= 0 || l > uint64(len(rest)-k) {
			return 0, ErrCorrupt
		}
		rest = rest[k+int(l):]
	}
	return n, nil
}
