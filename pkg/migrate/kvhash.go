package migrate

import (
	"encoding/binary"
	"fmt"
	"hash"
	"hash/crc32"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/mvcc"
)

// state is what the mvcc store would report on a backend: its HashKV at
// the current revision, the current and compaction revisions, the keys
// live at the current revision, and the consistent index and term.
type state struct {
	hash            uint32
	rev, compactRev int64
	keys            int
	ci, term        uint64
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// The layout of the Key bucket and of mvccpb.KeyValue (pkg/mvcc layout.go,
// codec.go).
const (
	revBytesLen       = 17
	markedRevBytesLen = 18
	markTombstone     = 't'
	fieldKey          = 1
	fieldVersion      = 4
)

// kvHasher computes a backend's state from the records of its Key bucket as
// one pass hands them over in key (revision) order, without the mvcc
// store's index: mvcc.Store.HashByRev(0) on a store opened on the backend
// would return the same (TestKVHasher compares them).
//
// HashKV at the current revision is CRC-32C over "key" and every Key
// record, except that a record at or below the compaction revision counts
// only when the index would keep it: when it is the newest record of its
// key and not a tombstone. Those records come first in the bucket and the
// records that supersede them later, so when the store was compacted a
// first pass (newKVHasher) notes, for every key with a record at or below
// the compaction revision, its newest one there and whether a later one
// exists. The live keys are counted from the versions: above the
// compaction revision a put of version 1 makes a key live, a tombstone
// ends one (what mvcc writes); at or below it, a key is live when its
// newest record there is a put.
type kvHasher struct {
	st state
	h  hash.Hash32
	// prefix holds the keys with records at or below compactRev (only
	// when compactRev >= 0).
	prefix map[string]*prefixRec
	live   int
	err    error
}

type prefixRec struct {
	rev        []byte // the newest revision key at or below compactRev
	tomb       bool
	superseded bool // a record above compactRev exists
}

// newKVHasher reads the meta values of tx and, when the store was
// compacted, the Key bucket once as the doc of kvHasher says.
func newKVHasher(tx backend.ReadTx) (*kvHasher, error) {
	h := &kvHasher{h: crc32.New(castagnoli)}
	h.h.Write([]byte(backend.Key))
	for _, m := range []struct {
		key string
		dst *uint64
	}{{mvcc.MetaKeyConsistentIndex, &h.st.ci}, {mvcc.MetaKeyConsistentTerm, &h.st.term}} {
		v, ok, err := tx.Get(backend.Meta, []byte(m.key))
		if err != nil {
			return nil, fmt.Errorf("read meta %s: %w", m.key, err)
		}
		if !ok {
			continue
		}
		if len(v) != 8 {
			return nil, fmt.Errorf("meta %s: %d bytes, want 8", m.key, len(v))
		}
		*m.dst = binary.BigEndian.Uint64(v)
	}
	finished, err := compactMark(tx, mvcc.MetaKeyFinishedCompact)
	if err != nil {
		return nil, err
	}
	scheduled, err := compactMark(tx, mvcc.MetaKeyScheduledCompact)
	if err != nil {
		return nil, err
	}
	// As mvcc's restore: an unfinished compaction's revision is the
	// store's compaction revision.
	h.st.compactRev = max(finished, -1)
	if scheduled > 0 && scheduled > h.st.compactRev {
		h.st.compactRev = scheduled
	}
	if h.st.compactRev < 0 {
		return h, nil
	}
	h.prefix = map[string]*prefixRec{}
	var perr error
	tail := false
	err = tx.Range(backend.Key, nil, nil, 0, func(k, v []byte) bool {
		main, tomb, err := parseRev(k)
		if err != nil {
			perr = err
			return false
		}
		key, _, err := parseKV(v)
		if err != nil {
			perr = fmt.Errorf("revision %x: %w", k, err)
			return false
		}
		if main <= h.st.compactRev {
			p := h.prefix[string(key)]
			if p == nil {
				p = &prefixRec{}
				h.prefix[string(key)] = p
			}
			p.rev, p.tomb = append(p.rev[:0], k...), tomb
			return true
		}
		if !tail {
			tail = true
			h.live = h.prefixLive()
		}
		if p := h.prefix[string(key)]; p != nil {
			p.superseded = true
		}
		return true
	})
	if err == nil {
		err = perr
	}
	if err != nil {
		return nil, fmt.Errorf("read bucket %s: %w", backend.Key, err)
	}
	if !tail {
		h.live = h.prefixLive()
	}
	return h, nil
}

// prefixLive counts the keys live at compactRev.
func (h *kvHasher) prefixLive() int {
	n := 0
	for key, p := range h.prefix {
		if !p.tomb && key != "" {
			n++
		}
	}
	return n
}

// add takes the next record of the Key bucket.
func (h *kvHasher) add(k, v []byte) {
	if h.err != nil {
		return
	}
	main, tomb, err := parseRev(k)
	if err != nil {
		h.err = err
		return
	}
	key, version, err := parseKV(v)
	if err != nil {
		h.err = fmt.Errorf("revision %x: %w", k, err)
		return
	}
	h.st.rev = max(h.st.rev, main)
	if main <= h.st.compactRev {
		if tomb {
			return
		}
		if p := h.prefix[string(key)]; p == nil || p.superseded || string(p.rev) != string(k) {
			return
		}
	} else if len(key) > 0 {
		// The empty key holds etcdutl's placeholders, which no range
		// counts.
		switch {
		case tomb:
			h.live--
		case version == 1:
			h.live++
		}
	}
	h.h.Write(k)
	h.h.Write(v)
}

// result returns the state after the last record.
func (h *kvHasher) result() (state, error) {
	if h.err != nil {
		return state{}, fmt.Errorf("read bucket %s: %w", backend.Key, h.err)
	}
	st := h.st
	st.rev = max(st.rev, 1, st.compactRev)
	st.hash = h.h.Sum32()
	st.keys = h.live
	return st, nil
}

func compactMark(tx backend.ReadTx, key string) (int64, error) {
	v, ok, err := tx.Get(backend.Meta, []byte(key))
	if err != nil {
		return 0, fmt.Errorf("read meta %s: %w", key, err)
	}
	if !ok {
		return -1, nil
	}
	main, _, err := parseRev(v)
	if err != nil {
		return 0, fmt.Errorf("meta %s: %w", key, err)
	}
	return main, nil
}

// parseRev decodes a revision key as mvcc does.
func parseRev(b []byte) (main int64, tomb bool, err error) {
	switch {
	case len(b) == revBytesLen:
	case len(b) == markedRevBytesLen && b[revBytesLen] == markTombstone:
		tomb = true
	default:
		return 0, false, fmt.Errorf("decode revision key %x: bad length or mark", b)
	}
	if b[8] != '_' {
		return 0, false, fmt.Errorf("decode revision key %x: missing separator", b)
	}
	return int64(binary.BigEndian.Uint64(b)), tomb, nil
}

// parseKV returns the key and version of a KeyValue, checking it as mvcc's
// decoder does (the last of a repeated field wins, as there).
func parseKV(b []byte) (key []byte, version int64, err error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, 0, fmt.Errorf("decode key value: %w", protowire.ParseError(n))
		}
		b = b[n:]
		switch {
		case num == fieldKey && typ == protowire.BytesType:
			key, n = protowire.ConsumeBytes(b)
		case num == fieldVersion && typ == protowire.VarintType:
			var x uint64
			x, n = protowire.ConsumeVarint(b)
			version = int64(x)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return nil, 0, fmt.Errorf("decode key value field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
	}
	return key, version, nil
}
