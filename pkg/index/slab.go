package index

import (
	"fmt"
	"unsafe"
)

// slabChunk is the number of key indexes in one chunk of a slab: 24 KiB.
const slabChunk = 512

// slab holds an index's key indexes in chunks of slabChunk, each numbered
// by an id: a store of millions of keys is then a few thousand objects for
// the garbage collector, none of which it scans (key indexes hold no
// pointer), and the tree and the key table refer to a key index by 32 bits.
// A chunk never moves, so a *keyIndex stays valid until its id is
// released; released ids are handed out again first.
//
// A slab is not safe for concurrent use: the index's writer and its
// compactor change it under the index's write lock, except while Decode
// builds the index: then the inserter reads key indexes the decoder handed
// it while the decoder adds more, so a chunk's directory entry is written
// before its first id is handed on and the directory does not grow
// (reserve).
type slab struct {
	// chunks is the directory; used counts the ids ever handed out, so
	// its first chunksInUse entries hold chunks.
	chunks [][]keyIndex
	used   uint32
	free   []uint32
}

// chunksInUse is the number of chunks the ids handed out take.
func (s *slab) chunksInUse() int { return (int(s.used) + slabChunk - 1) / slabChunk }

// reserve grows the directory for n more key indexes.
func (s *slab) reserve(n int) {
	want := (int(s.used) + n + slabChunk - 1) / slabChunk
	if want > len(s.chunks) {
		chunks := make([][]keyIndex, want)
		copy(chunks, s.chunks[:s.chunksInUse()])
		s.chunks = chunks
	}
}

// alloc returns a zeroed key index and its id.
func (s *slab) alloc() (uint32, *keyIndex) {
	if n := len(s.free); n > 0 {
		id := s.free[n-1]
		s.free = s.free[:n-1]
		return id, s.at(id)
	}
	if s.used%slabChunk == 0 {
		n := s.chunksInUse()
		if s.used > maxSlabID-slabChunk {
			panic("index: more than 2^32 keys")
		}
		if n == len(s.chunks) {
			s.reserve(max(slabChunk, int(s.used)))
		}
		s.chunks[n] = make([]keyIndex, slabChunk)
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
	// arenaMaxKey is the longest key an arena packs into its chunks; a
	// longer one gets a chunk of its own, as it would waste much of a
	// chunk's tail.
	arenaMaxKey = 4 << 10
	// arenaMinGarbage is the least garbage worth a rewrite.
	arenaMinGarbage = 1 << 20
)

// keyPlace is where a key arena holds a key: n bytes at off in chunk.
type keyPlace struct{ chunk, off, n uint32 }

// keyArena holds an index's keys back to back in chunks of arenaChunk,
// numbered in a directory, so that a key index refers to its key without a
// pointer and a key costs the collector nothing of its own to mark. A key's
// bytes are never written again while its chunk is reachable: a string
// aliasing them stays valid for as long as it is held.
//
// Keys released (their key index removed) leave garbage in their chunk;
// when the garbage outgrows the keys still in use, the index copies those
// into a fresh arena (Index.rewriteKeys) and the old chunks are collected.
// Like the slab, it changes only under the index's write lock, except
// while Decode builds the index: then one goroutine adds keys while
// another compares those it was handed, so a chunk's directory entry is
// written once, before its first key is handed on, and the directory does
// not grow (reserveChunks).
type keyArena struct {
	// dir holds the chunks by number, every entry of its full length; used
	// counts the entries handed out. A released big key's entry is nil,
	// and its number in free.
	dir  [][]byte
	used uint32
	free []uint32
	// cur is the chunk small keys go to, with room bytes free at its end
	// (none at first).
	cur  uint32
	room int
	// live and garbage count the bytes of the packed keys in use and
	// released.
	live, garbage int64
}

// str returns the key at at, aliasing the arena.
func (a *keyArena) str(chunk, off, n uint32) string {
	if n == 0 {
		return ""
	}
	return unsafe.String(&a.dir[chunk][off], n)
}

// reserveChunks grows the directory for n more chunks.
func (a *keyArena) reserveChunks(n int) {
	if want := int(a.used) + n; want > len(a.dir) {
		dir := make([][]byte, want)
		copy(dir, a.dir[:a.used])
		a.dir = dir
	}
}

// newChunk adds chunk to the directory and returns its number.
func (a *keyArena) newChunk(chunk []byte) uint32 {
	if n := len(a.free); n > 0 {
		c := a.free[n-1]
		a.free = a.free[:n-1]
		a.dir[c] = chunk
		return c
	}
	if int(a.used) == len(a.dir) {
		if a.used >= 1<<32-1 {
			panic("index: key arena beyond 2^32 chunks")
		}
		a.reserveChunks(max(16, len(a.dir)))
	}
	a.dir[a.used] = chunk
	a.used++
	return a.used - 1
}

// reserve returns the place of a key of n bytes and the bytes to fill
// before the key is used.
func (a *keyArena) reserve(n int) (keyPlace, []byte) {
	if n > maxKeyLen {
		panic(fmt.Sprintf("index: key of %d bytes", n))
	}
	if n == 0 {
		return keyPlace{}, nil
	}
	if n > arenaMaxKey {
		b := make([]byte, n)
		return keyPlace{chunk: a.newChunk(b), n: uint32(n)}, b
	}
	if n > a.room {
		a.cur, a.room = a.newChunk(make([]byte, arenaChunk)), arenaChunk
	}
	at := keyPlace{chunk: a.cur, off: uint32(arenaChunk - a.room), n: uint32(n)}
	a.room -= n
	a.live += int64(n)
	return at, a.dir[at.chunk][at.off : int(at.off)+n : int(at.off)+n]
}

// copy returns the place of a copy of key in the arena.
func (a *keyArena) copy(key []byte) keyPlace {
	at, b := a.reserve(len(key))
	copy(b, key)
	return at
}

// release accounts the key at at as no longer in use.
func (a *keyArena) release(at keyPlace) {
	if at.n > arenaMaxKey {
		a.dir[at.chunk] = nil
		a.free = append(a.free, at.chunk)
		return
	}
	a.live -= int64(at.n)
	a.garbage += int64(at.n)
}

// wantsRewrite reports whether the garbage is worth copying the keys in
// use to a fresh arena.
func (a *keyArena) wantsRewrite() bool {
	return a.garbage >= arenaMinGarbage && a.garbage > a.live
}

// maxKeyLen is the longest key keyIndex.keyLen holds.
const maxKeyLen = 1<<32 - 1

// histories holds the histories of an index's keys not in the compact form,
// by id (0 is none), so that a key index holds no pointer. Only this list
// is scanned by the collector, and only for the keys that have one.
type histories struct {
	list []*history
	free []uint32
}

// add stores h and returns its id.
func (hs *histories) add(h *history) uint32 {
	if n := len(hs.free); n > 0 {
		id := hs.free[n-1]
		hs.free = hs.free[:n-1]
		hs.list[id] = h
		return id
	}
	if len(hs.list) == 0 {
		hs.list = append(hs.list, nil) // id 0 is none
	}
	if len(hs.list) > maxSlabID {
		panic("index: more than 2^32 histories")
	}
	hs.list = append(hs.list, h)
	return uint32(len(hs.list) - 1)
}

// release drops the history of id, for the collector.
func (hs *histories) release(id uint32) {
	hs.list[id] = nil
	hs.free = append(hs.free, id)
}
