package index

import "unsafe"

// slabChunk is the number of key indexes in one chunk of a slab: 24 KiB.
const slabChunk = 512

// slab holds an index's key indexes in chunks of slabChunk, each numbered
// by an id: a store of millions of keys is then a few thousand objects for
// the garbage collector, scanned front to back, where one object per key
// costs it a cache miss per key and cycle (BenchmarkGCMark), and the key
// table finds a key index from 32 bits. A chunk never moves, so a
// *keyIndex stays valid until its id is released; released ids are handed
// out again first.
//
// A slab is not safe for concurrent use: the index's writer and its
// compactor change it under the index's write lock.
type slab struct {
	chunks [][]keyIndex
	// used counts the ids ever handed out: the last chunk's records from
	// used%slabChunk on are unused.
	used uint32
	free []uint32
}

// alloc returns a zeroed key index and its id.
func (s *slab) alloc() (uint32, *keyIndex) {
	if n := len(s.free); n > 0 {
		id := s.free[n-1]
		s.free = s.free[:n-1]
		return id, s.at(id)
	}
	if s.used == uint32(len(s.chunks))*slabChunk {
		if s.used > maxSlabID-slabChunk {
			panic("index: more than 2^32 keys")
		}
		s.chunks = append(s.chunks, make([]keyIndex, slabChunk))
	}
	id := s.used
	s.used++
	return id, s.at(id)
}

// maxSlabID bounds the ids, which the key table stores in 32 bits beside
// one reserved value.
const maxSlabID = 1<<32 - 2

// at returns the key index of id.
func (s *slab) at(id uint32) *keyIndex {
	return &s.chunks[id/slabChunk][id%slabChunk]
}

// release returns id's key index to the slab. It is zeroed, so that its key
// and history can be collected; nothing may use it afterwards.
func (s *slab) release(id uint32) {
	*s.at(id) = keyIndex{}
	s.free = append(s.free, id)
}

const (
	// arenaChunk is the size of one chunk of a key arena.
	arenaChunk = 64 << 10
	// arenaMaxKey is the longest key an arena holds; a longer one gets an
	// allocation of its own, as it would waste much of a chunk's tail.
	arenaMaxKey = 4 << 10
	// arenaMinGarbage is the least garbage worth a rewrite.
	arenaMinGarbage = 1 << 20
)

// keyArena holds an index's keys back to back in chunks of arenaChunk, so
// that a key costs the collector nothing of its own to mark and the heap no
// size-class rounding. A key's bytes are never written again while the
// chunk is reachable: a string aliasing them stays valid for as long as it
// is held, however the index changes.
//
// Keys released (their key index removed) leave garbage in their chunk;
// when the garbage outgrows the keys still in use, the index copies those
// into fresh chunks (Index.rewriteKeys) and the old chunks are collected.
// Like the slab, it changes only under the index's write lock.
type keyArena struct {
	chunk []byte // the current chunk: its free space is cap - len
	// live and garbage count the bytes of the arena's keys in use and
	// released.
	live, garbage int64
}

// reserve returns n bytes for a key, to be filled before the key is used.
func (a *keyArena) reserve(n int) []byte {
	if n > arenaMaxKey {
		return make([]byte, n)
	}
	if n > cap(a.chunk)-len(a.chunk) {
		a.chunk = make([]byte, 0, arenaChunk)
	}
	start := len(a.chunk)
	a.chunk = a.chunk[:start+n]
	a.live += int64(n)
	return a.chunk[start : start+n : start+n]
}

// copy returns key's bytes held in the arena, as a string.
func (a *keyArena) copy(key []byte) string {
	b := a.reserve(len(key))
	copy(b, key)
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// release accounts a key of n bytes that is no longer in use.
func (a *keyArena) release(n int) {
	if n <= arenaMaxKey {
		a.live -= int64(n)
		a.garbage += int64(n)
	}
}

// wantsRewrite reports whether the garbage is worth copying the keys in
// use to fresh chunks.
func (a *keyArena) wantsRewrite() bool {
	return a.garbage >= arenaMinGarbage && a.garbage > a.live
}
