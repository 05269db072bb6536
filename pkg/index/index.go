package index

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Index maps user keys to their revision history, ordered by key.
//
// Concurrency: any number of readers (Get, Range, Revisions, Versions,
// CountRevisions, RangeSince, Keep) may run alongside one writer (Put,
// Tombstone, Restore) and one compactor (Compact). Writers must add
// revisions in increasing order per key. The index does not know which
// revisions are committed: readers that must not see an uncommitted write
// ask at an atRev below it.
//
// Range ends follow etcd: a nil or empty end selects the single key, end ==
// []byte{0} selects every key >= key, otherwise the half-open range [key, end).
//
// Key slices handed to Put, Tombstone and Restore are copied, and so are the
// keys Range returns.
type Index struct {
	mu   sync.RWMutex
	tree idTree
	// slab holds the key indexes the tree points to, keys their keys,
	// hists their histories, and table finds them by key; all change under
	// mu held exclusively.
	slab  slab
	keys  keyArena
	hists histories
	table keyTable
	// live counts the keys whose last generation is not ended: put and
	// not deleted since. Written under mu; Live reads it without.
	live atomic.Int64
}

// New returns an empty index.
func New() *Index {
	ti := &Index{table: newKeyTable()}
	ti.tree.keyOf = func(id uint32) string { return ti.keyOf(ti.slab.at(id)) }
	return ti
}

// keyOf returns ki's key without copying it.
func (ti *Index) keyOf(ki *keyIndex) string {
	return ti.keys.str(ki.keyChunk, ki.keyOff, ki.keyLen)
}

// isFromKey reports whether end means "every key from key on".
func isFromKey(end []byte) bool { return len(end) == 1 && end[0] == 0 }

// lookup returns key's key index, or a nil one, and its tag in the key
// table. The caller holds mu.
func (ti *Index) lookup(key []byte) (uint32, ref) {
	tag := ti.table.tag(key)
	_, ki := ti.table.find(tag, key, ti)
	return tag, ref{ki, ti}
}

// add makes the key index of the key the arena holds at at, under tag, and
// adds it to the table; the caller inserts its id into the tree. The
// caller holds mu exclusively.
func (ti *Index) add(tag uint32, at keyPlace) (uint32, ref) {
	id, ki := ti.newKey(at)
	ti.table.insert(tag, id)
	return id, ki
}

// newKey makes the key index of the key the arena holds at at, in neither
// the table nor the tree.
func (ti *Index) newKey(at keyPlace) (uint32, ref) {
	id, ki := ti.slab.alloc()
	ki.setKey(at)
	return id, ref{ki, ti}
}

// remove drops key index ki, which has no revisions left, from the tree,
// the table, the arena and the slab. The caller holds mu exclusively.
func (ti *Index) remove(ki ref) {
	if !ti.tree.delete(ki.key()) {
		panic(fmt.Sprintf("index: removing %q: not in the tree", ki.key()))
	}
	key := unsafe.Slice(unsafe.StringData(ki.key()), ki.keyLen)
	tag := ti.table.tag(key)
	id, found := ti.table.find(tag, key, ti)
	if found != ki.keyIndex {
		panic(fmt.Sprintf("index: removing %q: not in the key table", key))
	}
	ti.table.remove(tag, id)
	ki.setHist(nil)
	ti.keys.release(keyPlace{ki.keyChunk, ki.keyOff, ki.keyLen})
	ti.slab.release(id)
	if ti.keys.wantsRewrite() {
		ti.rewriteKeys()
	}
}

// rewriteKeys copies the keys in use to a fresh arena, leaving the old
// chunks to the collector: Compact pays it under the write lock, a pass over
// the slab, once the keys it removed outweigh those left. The tree's order
// and the table's tags depend on the keys' bytes only, which do not change.
func (ti *Index) rewriteKeys() {
	var fresh keyArena
	for _, chunk := range ti.slab.chunks {
		for i := range chunk {
			ki := &chunk[i]
			if ki.keyLen == 0 {
				continue // unused, or the empty key
			}
			key := ti.keyOf(ki)
			if ki.keyLen > arenaMaxKey {
				// A chunk of its own: it moves as it is.
				ki.keyChunk = fresh.newChunk(ti.keys.dir[ki.keyChunk])
				continue
			}
			at, b := fresh.reserve(len(key))
			copy(b, key)
			ki.setKey(at)
		}
	}
	ti.keys = fresh
}

// Put records a put of key at rev. rev must be greater than every revision
// of key already in the index. It returns the revision that created the
// key's generation and the key's version, both as of this put: one lookup
// where a Get before the Put would take two.
func (ti *Index) Put(key []byte, rev Revision) (created Revision, ver int64) {
	ti.mu.Lock()
	defer ti.mu.Unlock()
	tag, ki := ti.lookup(key)
	if ki.keyIndex == nil {
		var id uint32
		id, ki = ti.add(tag, ti.keys.copy(key))
		ti.tree.insert(id)
	}
	if !ki.isLive() {
		ti.live.Add(1)
	}
	ki.put(rev)
	return ki.current()
}

// Tombstone records a delete of key at rev, ending its current generation.
// It returns ErrRevisionNotFound, changing nothing, when key is not live.
func (ti *Index) Tombstone(key []byte, rev Revision) error {
	ti.mu.Lock()
	defer ti.mu.Unlock()
	_, ki := ti.lookup(key)
	if ki.keyIndex == nil {
		return ErrRevisionNotFound
	}
	if err := ki.tombstone(rev); err != nil {
		return err
	}
	ti.live.Add(-1)
	return nil
}

// Restore adds a key whose history before modified was compacted away: its
// generation was created at created and is at version ver as of modified.
// It is for rebuilding the index from a compacted backend in revision order:
// for a key already in the index it is a Put of modified.
func (ti *Index) Restore(key []byte, created, modified Revision, ver int64) {
	ti.mu.Lock()
	defer ti.mu.Unlock()
	tag, ki := ti.lookup(key)
	if ki.keyIndex != nil {
		if !ki.isLive() {
			ti.live.Add(1)
		}
		ki.put(modified)
		return
	}
	id, ki := ti.add(tag, ti.keys.copy(key))
	ki.restore(created, modified, ver)
	ti.tree.insert(id)
	ti.live.Add(1)
}

// RestoreTombstone is Restore for a key whose first revision in the backend
// is a tombstone (its puts were compacted away): the key is kept, deleted,
// so that the tombstone is still seen by RangeSince and by compaction. For a
// key already in the index it is a Tombstone.
func (ti *Index) RestoreTombstone(key []byte, rev Revision) {
	ti.mu.Lock()
	defer ti.mu.Unlock()
	tag, ki := ti.lookup(key)
	if ki.keyIndex != nil {
		// ErrRevisionNotFound: already deleted; nothing to end.
		if ki.tombstone(rev) == nil {
			ti.live.Add(-1)
		}
		return
	}
	id, ki := ti.add(tag, ti.keys.copy(key))
	ki.restoreTombstone(rev)
	ti.tree.insert(id)
}

// Get returns the newest revision of key at or before atRev, the revision
// that created that generation, and the key's version there.
// ErrRevisionNotFound means the key did not exist at atRev.
func (ti *Index) Get(key []byte, atRev int64) (modified, created Revision, ver int64, err error) {
	ti.mu.RLock()
	defer ti.mu.RUnlock()
	_, ki := ti.lookup(key)
	if ki.keyIndex == nil {
		return Revision{}, Revision{}, 0, ErrRevisionNotFound
	}
	return ki.get(atRev)
}

// visit calls f for each key index in the range, in key order, until f
// returns false. The caller holds mu.
func (ti *Index) visit(key, end []byte, f func(ki ref) bool) {
	if len(end) == 0 {
		if _, ki := ti.lookup(key); ki.keyIndex != nil {
			f(ki)
		}
		return
	}
	fromKey := isFromKey(end)
	ti.tree.ascend(unsafe.String(unsafe.SliceData(key), len(key)), false, func(id uint32) bool {
		ki := ref{ti.slab.at(id), ti}
		if !fromKey && ki.key() >= string(end) {
			return false
		}
		return f(ki)
	})
}

// visitLive is visit of the keys live at atRev, with what ki.get says of
// each: its newest revision at or before atRev, its generation's create
// revision and its version there.
func (ti *Index) visitLive(key, end []byte, atRev int64, f func(ki ref, modified, created Revision, ver int64) bool) {
	ti.visit(key, end, func(ki ref) bool {
		modified, created, ver, err := ki.get(atRev)
		if err != nil {
			return true
		}
		return f(ki, modified, created, ver)
	})
}

// Range returns, in key order, the keys live at atRev in the range and their
// newest revisions at or before atRev, at most limit of them (limit <= 0: no
// limit). total counts every live key in the range, ignoring limit.
func (ti *Index) Range(key, end []byte, atRev int64, limit int) (keys [][]byte, revs []Revision, total int) {
	ti.mu.RLock()
	defer ti.mu.RUnlock()
	ti.visitLive(key, end, atRev, func(ki ref, rev, _ Revision, _ int64) bool {
		if limit <= 0 || len(revs) < limit {
			keys = append(keys, []byte(ki.key()))
			revs = append(revs, rev)
		}
		total++
		return true
	})
	return keys, revs, total
}

// Revisions is Range without the keys.
func (ti *Index) Revisions(key, end []byte, atRev int64, limit int) (revs []Revision, total int) {
	ti.mu.RLock()
	defer ti.mu.RUnlock()
	ti.visitLive(key, end, atRev, func(_ ref, rev, _ Revision, _ int64) bool {
		if limit <= 0 || len(revs) < limit {
			revs = append(revs, rev)
		}
		total++
		return true
	})
	return revs, total
}

// Versions calls f, in key order, for each key live at atRev in the range
// with the revision that created its generation, its newest revision at or
// before atRev and its version there, until f returns false: a Range's
// create revision, mod revision and version without reading a value. f must
// not call into the index.
func (ti *Index) Versions(key, end []byte, atRev int64, f func(created, modified Revision, ver int64) bool) {
	ti.mu.RLock()
	defer ti.mu.RUnlock()
	ti.visitLive(key, end, atRev, func(_ ref, modified, created Revision, ver int64) bool {
		return f(created, modified, ver)
	})
}

// CountRevisions returns the number of keys live at atRev in the range.
func (ti *Index) CountRevisions(key, end []byte, atRev int64) int {
	ti.mu.RLock()
	defer ti.mu.RUnlock()
	total := 0
	ti.visitLive(key, end, atRev, func(ref, Revision, Revision, int64) bool {
		total++
		return true
	})
	return total
}

// RangeSince returns, ascending, every revision with Main >= rev of the keys
// in the range (tombstones included); of several revisions of one key in the
// same main revision only the last is returned. Watchers catch up with it.
func (ti *Index) RangeSince(key, end []byte, rev int64) []Revision {
	ti.mu.RLock()
	defer ti.mu.RUnlock()
	var revs []Revision
	ti.visit(key, end, func(ki ref) bool {
		revs = append(revs, ki.since(rev)...)
		return true
	})
	slices.SortFunc(revs, compareRevisions)
	return revs
}

// Compact drops the history at or before rev that no read or watch at rev or
// later needs: per key, every revision <= rev except the newest one, which
// stays if the key is live at rev or if it is a tombstone exactly at rev; and
// every generation that ended before rev. Keys left without revisions are
// removed. It returns the revisions <= rev that were kept; the backend may
// delete every other revision <= rev.
//
// Compact holds the write lock per key, not for the whole walk, so it can run
// beside readers and the writer. Revisions added concurrently must be > rev.
// It walks the keys in batches, each taken under the read lock from the
// last key of the one before: a key index it removes goes back to the slab,
// where a new key may take it, after its visit.
func (ti *Index) Compact(rev int64) map[Revision]struct{} {
	available := make(map[Revision]struct{})
	batch := make([]uint32, 0, compactBatch)
	var last string // aliases the arena, whose bytes stay as they are
	for first := true; ; first = false {
		batch = batch[:0]
		ti.mu.RLock()
		ti.tree.ascend(last, first, func(id uint32) bool {
			if !first && len(batch) == 0 && ti.keyOf(ti.slab.at(id)) == last {
				return true // the last batch's last key, still there
			}
			batch = append(batch, id)
			return len(batch) < compactBatch
		})
		ti.mu.RUnlock()
		if len(batch) == 0 {
			return available
		}
		for _, id := range batch {
			ti.mu.Lock()
			ki := ref{ti.slab.at(id), ti}
			last = ki.key()
			ki.compact(rev, available)
			if invariants {
				if err := ki.check(); err != nil {
					panic("index: after compaction at " + fmt.Sprint(rev) + ": " + err.Error())
				}
			}
			if ki.isEmpty() {
				ti.remove(ki)
			}
			ti.mu.Unlock()
		}
	}
}

// compactBatch is how many keys Compact takes from the tree at a time.
const compactBatch = 256

// Keep returns the revisions Compact(rev) would keep, without compacting,
// leaving out tombstones (as etcd, for HashKV).
func (ti *Index) Keep(rev int64) map[Revision]struct{} {
	available := make(map[Revision]struct{})
	ti.mu.RLock()
	defer ti.mu.RUnlock()
	ti.tree.ascend("", true, func(id uint32) bool {
		ref{ti.slab.at(id), ti}.keep(rev, available)
		return true
	})
	return available
}

// Live returns the number of live keys: put and not deleted since
// (etcd's keys_total). Safe from any goroutine.
func (ti *Index) Live() int64 { return ti.live.Load() }

// Len returns the number of keys with history in the index (live or not).
func (ti *Index) Len() int {
	ti.mu.RLock()
	defer ti.mu.RUnlock()
	return ti.tree.len()
}

// check verifies every key index's invariants; tests call it.
func (ti *Index) check() error {
	ti.mu.RLock()
	defer ti.mu.RUnlock()
	var err error
	ti.tree.ascend("", true, func(id uint32) bool {
		err = ref{ti.slab.at(id), ti}.check()
		return err == nil
	})
	if err == nil {
		err = ti.tree.check()
	}
	return err
}
