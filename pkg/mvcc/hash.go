package mvcc

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"slices"
	"time"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/index"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// HashByRev computes etcd's HashKV hash at rev (0: the current revision):
// CRC-32C over the bucket name "key" and then, in revision order, the Key
// bucket's keys and values for the revisions in (compactRev, rev], plus the
// revisions <= compactRev that compaction keeps and that are still live at
// rev. It also returns the store's current and compaction revisions, for the
// response header and compact_revision. Applied writes count whether or not
// they are committed to the backend yet.
//
// Members that applied the same operations get the same hash whether or not
// their physical compaction has finished. etcd skips the keep filter when
// nothing is kept, which makes its hash depend on compaction progress; kvd
// always filters, which equals etcd's hash once compaction is done.
//
// A revision a compaction was done at answers, as etcd's, with the hash that
// compaction stored (compactRev: the one before it) while it is kept.
func (s *Store) HashByRev(rev int64) (hash uint32, currentRev, compactRev int64, err error) {
	if rev > 0 {
		if h, ok := s.compactHashes.byRev(rev); ok {
			return h.Hash, s.rev.Load(), h.CompactRevision, nil
		}
	}
	start := time.Now()
	s.mu.RLock()
	compactRev, currentRev = s.compactRev, s.rev.Load()
	if rev > 0 && rev < compactRev {
		s.mu.RUnlock()
		return 0, currentRev, compactRev, ErrCompacted
	}
	if rev > currentRev {
		s.mu.RUnlock()
		return 0, currentRev, compactRev, ErrFutureRev
	}
	if rev <= 0 {
		rev = currentRev
	}
	keep := s.idx.Keep(rev)
	// As a read view: buffers loaded after the revision, the backend view
	// after the buffers (see buffer.go).
	st := s.bufs.Load()
	tx, err := s.be.ReadTx()
	s.mu.RUnlock()
	if err != nil {
		return 0, currentRev, compactRev, fmt.Errorf("hash kv at %d: read tx: %w", rev, err)
	}
	defer tx.Release()

	h := crc32.New(castagnoli)
	h.Write([]byte(backend.Key))
	upper := index.Revision{Main: rev + 1}
	lower := index.Revision{Main: compactRev + 1}
	add := func(kr index.Revision, tomb bool, k, v []byte) {
		if lower.GreaterThan(kr) {
			if _, ok := keep[kr]; !ok {
				return
			}
		}
		// A tombstone at the compaction revision survives compaction since
		// etcd 3.5.16 but not before; etcd leaves it out of the hash.
		if tomb && kr.Main == compactRev {
			return
		}
		h.Write(k)
		h.Write(v)
	}
	// The backend holds a prefix of the history (less what compaction
	// deleted), the buffers what follows; a buffered revision at or below
	// the backend's last one was committed after the buffers were loaded.
	var last index.Revision
	var decodeErr error
	err = tx.Range(backend.Key, nil, revToBytes(upper, false), 0, func(k, v []byte) bool {
		kr, tomb, err := bytesToRev(k)
		if err != nil {
			decodeErr = err
			return false
		}
		last = kr
		add(kr, tomb, k, v)
		return true
	})
	if err == nil {
		err = decodeErr
	}
	if err != nil {
		return 0, currentRev, compactRev, fmt.Errorf("hash kv at %d: %w", rev, err)
	}
	var k []byte
	for _, ents := range [][]bufEntry{st.frozen, st.active} {
		for i := range ents {
			e := &ents[i]
			if e.rev.Main > rev {
				break
			}
			if compareRev(e.rev, last) <= 0 {
				continue
			}
			k = appendRev(k[:0], e.rev, e.tomb)
			add(e.rev, e.tomb, k, e.value)
		}
	}
	if s.observe.HashByRev != nil {
		s.observe.HashByRev(time.Since(start))
	}
	return h.Sum32(), currentRev, compactRev, nil
}

// Hash computes etcd's Maintenance.Hash: CRC-32C over every bucket, in name
// order, as the bucket name followed by each key and value, skipping the
// member's own consistent index and term. It commits applied writes to the
// backend first and returns the revision it saw then. Like etcd's, it is
// meant for tests: writes applied while it runs may or may not count.
func (s *Store) Hash() (hash uint32, rev int64, err error) {
	start := time.Now()
	if err := s.Flush(); err != nil {
		return 0, 0, err
	}
	rev = s.rev.Load()
	s.splitMu.RLock() // a view of a whole commit (split.go)
	tx, err := s.Backend().ReadTx()
	s.splitMu.RUnlock()
	if err != nil {
		return 0, 0, fmt.Errorf("mvcc hash: %w", err)
	}
	defer tx.Release()
	buckets := slices.Clone(backend.AllBuckets)
	slices.Sort(buckets)
	h := crc32.New(castagnoli)
	for _, b := range buckets {
		h.Write([]byte(b))
		err := tx.Range(b, nil, nil, 0, func(k, v []byte) bool {
			if b == backend.Meta && (bytes.Equal(k, metaConsistentIndex) || bytes.Equal(k, metaConsistentTerm)) {
				return true
			}
			h.Write(k)
			h.Write(v)
			return true
		})
		if err != nil {
			return 0, 0, fmt.Errorf("mvcc hash: bucket %s: %w", b, err)
		}
	}
	if s.observe.Hash != nil {
		s.observe.Hash(time.Since(start))
	}
	return h.Sum32(), rev, nil
}
