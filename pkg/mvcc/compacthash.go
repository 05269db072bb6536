package mvcc

import (
	"hash"
	"hash/crc32"
	"sync"

	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/index"
)

// maxCompactHashes is how many compactions' hashes the store keeps, as
// etcd's hashStorageMaxSize.
const maxCompactHashes = 10

// KeyValueHash is the HashKV hash of the key space at Revision, taken under
// compaction revision CompactRevision.
type KeyValueHash struct {
	Hash            uint32
	CompactRevision int64
	Revision        int64
}

// compactHashes are the hashes the compactor computed while compacting
// (etcd's hashStorage): a compaction at rev hashes the key space at rev
// under the previous compaction revision, from the same scan that deletes,
// so members that compacted at the same revision can compare them (the
// leader's compaction hash check). Kept in memory only, as etcd's.
type compactHashes struct {
	mu     sync.RWMutex
	hashes []KeyValueHash
}

func (c *compactHashes) store(lg *zap.Logger, h KeyValueHash) {
	lg.Info("storing new hash", zap.Uint32("hash", h.Hash), zap.Int64("revision", h.Revision),
		zap.Int64("compact-revision", h.CompactRevision))
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hashes = append(c.hashes, h)
	if len(c.hashes) > maxCompactHashes {
		c.hashes = c.hashes[len(c.hashes)-maxCompactHashes:]
	}
}

func (c *compactHashes) byRev(rev int64) (KeyValueHash, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, h := range c.hashes {
		if h.Revision == rev {
			return h, true
		}
	}
	return KeyValueHash{}, false
}

// Hashes returns the hashes kept from the last compactions (up to 10),
// oldest first.
func (s *Store) Hashes() []KeyValueHash {
	s.compactHashes.mu.RLock()
	defer s.compactHashes.mu.RUnlock()
	return append([]KeyValueHash(nil), s.compactHashes.hashes...)
}

// kvHasher is etcd's kvHasher: CRC-32C over "key" and then every Key bucket
// entry at or below revision that compaction keeps, the revisions at or
// below compactRevision only if in keep (all of them when keep is empty, as
// etcd), tombstones at compactRevision left out.
type kvHasher struct {
	h               hash.Hash32
	compactRevision int64
	revision        int64
	keep            map[index.Revision]struct{}
}

func newKVHasher(compactRev, rev int64, keep map[index.Revision]struct{}) *kvHasher {
	h := crc32.New(castagnoli)
	h.Write([]byte(backend.Key))
	return &kvHasher{h: h, compactRevision: compactRev, revision: rev, keep: keep}
}

func (h *kvHasher) write(kr index.Revision, tomb bool, k, v []byte) {
	if kr.Main > h.revision {
		return
	}
	if kr.Main <= h.compactRevision && len(h.keep) > 0 {
		if _, ok := h.keep[kr]; !ok {
			return
		}
	}
	if kr.Main == h.compactRevision && tomb {
		return
	}
	h.h.Write(k)
	h.h.Write(v)
}

func (h *kvHasher) sum() KeyValueHash {
	return KeyValueHash{Hash: h.h.Sum32(), CompactRevision: h.compactRevision, Revision: h.revision}
}
