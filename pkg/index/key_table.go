package index

import (
	"hash/maphash"
	"math/bits"
	"unsafe"
)

// keyTable finds a key's key index by the key's hash: a one-key read or
// write looks there, where a walk down the B-tree compares the key with a
// score of others through two pointers each, a cache miss apiece once the
// index outgrows the CPU's caches (BenchmarkPutExisting). The tree stays for
// ranges, which need the order.
//
// It is open addressing with linear probing over a power-of-two array of
// slots, each the low 32 bits of the key's hash (the tag) above the key
// index's slab id plus one (0 is an empty slot). The tag's low bits are the
// slot a key starts probing from, so the table grows and deletes without
// hashing a key again, and its other bits turn away most wrong slots before
// their key is compared. It grows at 3/4 full and halves below 1/8: after a
// fill, 11-21 bytes a key, all in one pointer-free array the collector does
// not scan.
//
// A keyTable is not safe for concurrent use; the index guards it with its
// lock (readers find, the writer and the compactor change).
type keyTable struct {
	seed  maphash.Seed
	slots []uint64
	n     int // occupied slots
}

const minTableSlots = 16

func newKeyTable() keyTable {
	return keyTable{seed: maphash.MakeSeed(), slots: make([]uint64, minTableSlots)}
}

// tag is the part of key's hash the table keeps.
func (t *keyTable) tag(key []byte) uint32 {
	return uint32(maphash.Bytes(t.seed, key))
}

// tagString is tag of a key held as a string (maphash hashes a string and
// its bytes alike).
func (t *keyTable) tagString(key string) uint32 {
	return uint32(maphash.String(t.seed, key))
}

func (t *keyTable) mask() uint32 { return uint32(len(t.slots) - 1) }

func slotOf(tag, id uint32) uint64 { return uint64(tag)<<32 | uint64(id+1) }

func slotTag(s uint64) uint32 { return uint32(s >> 32) }

func slotID(s uint64) uint32 { return uint32(s) - 1 }

// find returns the id and key index of key, whose tag is tag, in ti, or
// nil.
func (t *keyTable) find(tag uint32, key []byte, ti *Index) (uint32, *keyIndex) {
	m := t.mask()
	for i := tag & m; ; i = (i + 1) & m {
		s := t.slots[i]
		if s == 0 {
			return 0, nil
		}
		if slotTag(s) != tag {
			continue
		}
		id := slotID(s)
		if ki := ti.slab.at(id); ti.keyOf(ki) == unsafe.String(unsafe.SliceData(key), len(key)) {
			return id, ki
		}
	}
}

// insert adds id under tag; its key must not be in the table.
func (t *keyTable) insert(tag, id uint32) {
	if (t.n+1)*4 > len(t.slots)*3 {
		t.resize(len(t.slots) * 2)
	}
	t.place(slotOf(tag, id))
	t.n++
}

// place puts s into the first empty slot from its tag's.
func (t *keyTable) place(s uint64) {
	m := t.mask()
	i := slotTag(s) & m
	for t.slots[i] != 0 {
		i = (i + 1) & m
	}
	t.slots[i] = s
}

// fillRegion is how many slots fill works on at a time: 32 KiB of them, so
// that the placements of one region hit the CPU's caches.
const fillRegion = 4096

// fill inserts the slot values in pending (slotOf of keys not in the table)
// and reorders pending meanwhile. Inserted one by one in key order, as a
// start reads the index file, every placement is a cache miss and, once the
// table outgrows the TLB's reach, a page walk too; fill instead sorts them
// in place by the region of the table their probing starts in (one counting
// pass, then cycles of swaps, as an American flag sort does) and places
// them region by region. Linear probing gives a valid table whatever the
// order of insertion.
func (t *keyTable) fill(pending []uint64) {
	t.reserve(t.n + len(pending))
	m := t.mask()
	regions := len(t.slots) / fillRegion
	if regions > 1 {
		shift := bits.TrailingZeros(fillRegion)
		region := func(s uint64) int { return int(slotTag(s)&m) >> shift }
		next := make([]int, regions+1) // a region's first unsorted value
		for _, s := range pending {
			next[region(s)+1]++
		}
		for r := range regions {
			next[r+1] += next[r]
		}
		end := make([]int, regions) // where a region's values end
		copy(end, next[1:])
		for r := range regions {
			for next[r] < end[r] {
				s := pending[next[r]]
				for d := region(s); d != r; d = region(s) {
					pending[next[d]], s = s, pending[next[d]]
					next[d]++
				}
				pending[next[r]] = s
				next[r]++
			}
		}
	}
	for _, s := range pending {
		t.place(s)
	}
	t.n += len(pending)
}

// reserve grows the table for n keys in all, so that inserting them moves
// nothing.
func (t *keyTable) reserve(n int) {
	size := len(t.slots)
	for n*4 > size*3 {
		size *= 2
	}
	if size > len(t.slots) {
		t.resize(size)
	}
}

func (t *keyTable) resize(n int) {
	if uint64(n) > 1<<32 {
		panic("index: key table beyond 2^32 slots")
	}
	old := t.slots
	t.slots = make([]uint64, n)
	for _, s := range old {
		if s != 0 {
			t.place(s)
		}
	}
}

// remove deletes id, stored under tag. The slots after it that probed past
// it move back, so that no lookup stops at the hole (backward-shift
// deletion): no tombstones to pile up under churn.
func (t *keyTable) remove(tag, id uint32) {
	m := t.mask()
	want := slotOf(tag, id)
	i := tag & m
	for t.slots[i] != want {
		if t.slots[i] == 0 {
			panic("index: key table: removing an id it does not hold")
		}
		i = (i + 1) & m
	}
	for j := (i + 1) & m; t.slots[j] != 0; j = (j + 1) & m {
		// The entry at j may fill the hole at i unless its home slot lies
		// cyclically in (i, j]: then a lookup for it never passes i.
		home := slotTag(t.slots[j]) & m
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = 0
	t.n--
	if len(t.slots) > minTableSlots && t.n*8 < len(t.slots) {
		t.resize(len(t.slots) / 2)
	}
}
