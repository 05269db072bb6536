package index

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestKeyTable runs random inserts and removes against a map, with tags
// drawn from a handful of values so that probe runs are long, collide and
// wrap around the table's end, and checks every key is found (and every
// removed one is not) after each step, through growth and shrinking.
func TestKeyTable(t *testing.T) {
	for seed := range uint64(8) {
		rng := rand.New(rand.NewPCG(seed, 7))
		tags := []uint32{0, 1, 15, 31, 63, 1 << 20, 1<<32 - 1}
		ti := New()
		tbl := &ti.table
		type entry struct {
			tag uint32
			id  uint32
		}
		model := map[string]entry{}
		var keys []string
		for step := range 1500 {
			if len(keys) == 0 || rng.IntN(3) > 0 && len(keys) < 100 {
				key := fmt.Sprintf("k%d-%d", seed, step)
				id, ki := ti.slab.alloc()
				ki.setKey(ti.keys.copy([]byte(key)))
				tag := tags[rng.IntN(len(tags))]
				tbl.insert(tag, id)
				model[key] = entry{tag, id}
				keys = append(keys, key)
			} else {
				i := rng.IntN(len(keys))
				key := keys[i]
				keys[i] = keys[len(keys)-1]
				keys = keys[:len(keys)-1]
				e := model[key]
				delete(model, key)
				tbl.remove(e.tag, e.id)
				if _, ki := tbl.find(e.tag, []byte(key), ti); ki != nil {
					t.Fatalf("seed %d step %d: removed %q still found", seed, step, key)
				}
				ti.slab.release(e.id)
			}
			if tbl.n != len(model) {
				t.Fatalf("seed %d step %d: table holds %d, want %d", seed, step, tbl.n, len(model))
			}
			if tbl.n*4 > len(tbl.slots)*3 {
				t.Fatalf("seed %d step %d: %d keys in %d slots", seed, step, tbl.n, len(tbl.slots))
			}
			for key, e := range model {
				id, ki := tbl.find(e.tag, []byte(key), ti)
				if ki == nil || id != e.id || ti.keyOf(ki) != key {
					t.Fatalf("seed %d step %d: %q (tag %d) not found as id %d", seed, step, key, e.tag, e.id)
				}
			}
		}
	}
}

// TestKeyTableFill checks fill against one-by-one inserts: into an empty
// table and one already holding keys, with tags that crowd one region, end
// at the last slot (probing wraps) or spread over every region. Crowded
// tags make one probe chain of them all, so they stay fewer (a lookup
// walks the chain).
func TestKeyTableFill(t *testing.T) {
	for _, size := range []int{1, 100, 3000, 20000} {
		for _, shape := range []string{"spread", "crowded", "last"} {
			n := size
			if shape != "spread" {
				n = min(n, 5000)
			}
			for _, before := range []int{0, 500} {
				rng := rand.New(rand.NewPCG(uint64(n), uint64(before)))
				ti := New()
				tbl := &ti.table
				tags := map[string]uint32{}
				add := func(i int) (uint32, uint32) {
					key := fmt.Sprintf("%s-%d", shape, i)
					id, ki := ti.slab.alloc()
					ki.setKey(ti.keys.copy([]byte(key)))
					tag := rng.Uint32()
					switch shape {
					case "crowded":
						tag = tag&^0xffff | uint32(rng.IntN(64)) // one region's first slots
					case "last":
						tag |= 0xffff // the last slot of any table up to 64Ki slots
					}
					tags[key] = tag
					return tag, id
				}
				for i := range before {
					tbl.insert(add(i))
				}
				var pending []uint64
				for i := before; i < before+n; i++ {
					pending = append(pending, slotOf(add(i)))
				}
				tbl.fill(pending)
				// The placements go region by region: pending is left in
				// that order.
				m := tbl.mask()
				for i := 1; i < len(pending); i++ {
					if slotTag(pending[i-1])&m/fillRegion > slotTag(pending[i])&m/fillRegion {
						t.Fatalf("n %d %s before %d: pending not in region order at %d", n, shape, before, i)
					}
				}
				if tbl.n != before+n || tbl.n*4 > len(tbl.slots)*3 {
					t.Fatalf("n %d %s before %d: table holds %d in %d slots, want %d", n, shape, before, tbl.n, len(tbl.slots), before+n)
				}
				occupied := 0
				for _, s := range tbl.slots {
					if s != 0 {
						occupied++
					}
				}
				if occupied != tbl.n {
					t.Fatalf("n %d %s before %d: %d slots occupied, n %d", n, shape, before, occupied, tbl.n)
				}
				for key, tag := range tags {
					if _, ki := tbl.find(tag, []byte(key), ti); ki == nil || ti.keyOf(ki) != key {
						t.Fatalf("n %d %s before %d: %q (tag %#x) not found", n, shape, before, key, tag)
					}
				}
			}
		}
	}
}

// TestSlabReuse checks that keys compacted away give their key indexes and
// their arena bytes back: key indexes are handed out again, the arena is
// rewritten once its garbage outweighs the keys in use, and the keys that
// stay read the same throughout.
func TestSlabReuse(t *testing.T) {
	ti := New()
	pad := strings.Repeat("p", 1000) // 1,000 keys a round, 1 MB of keys
	rev := int64(1)
	var kept []string
	big := strings.Repeat("b", arenaMaxKey+1) // keys of a chunk of their own
	for i := range 300 {
		k := fmt.Sprintf("keep/%04d", i)
		if i%100 == 0 {
			k += big
		}
		kept = append(kept, k)
		ti.Put([]byte(k), Revision{Main: rev})
		rev++
	}
	churned := func(round, i int) []byte {
		if i%100 == 0 {
			return fmt.Appendf(nil, "r%d/%s%04d", round, big, i)
		}
		return fmt.Appendf(nil, "r%d/%s%04d", round, pad, i)
	}
	rewrites := 0
	for round := range 6 {
		before := ti.keys.garbage
		for i := range 1000 {
			ti.Put(churned(round, i), Revision{Main: rev})
			rev++
		}
		for i := range 1000 {
			if err := ti.Tombstone(churned(round, i), Revision{Main: rev}); err != nil {
				t.Fatal(err)
			}
			rev++
		}
		ti.Compact(rev) // after the last tombstone, which it would keep at its own revision
		if ti.keys.garbage < before {
			rewrites++
		}
		if n := ti.Len(); n != len(kept) {
			t.Fatalf("round %d: %d keys after compacting every delete, want %d", round, n, len(kept))
		}
		if ti.keys.garbage > ti.keys.live && ti.keys.garbage >= arenaMinGarbage {
			t.Fatalf("round %d: %d bytes of garbage beside %d in use, not rewritten", round, ti.keys.garbage, ti.keys.live)
		}
		keys, _, total := ti.Range([]byte("keep/"), []byte("keep0"), rev, 0)
		if total != len(kept) {
			t.Fatalf("round %d: %d kept keys, want %d", round, total, len(kept))
		}
		for i, k := range keys {
			if string(k) != kept[i] {
				t.Fatalf("round %d: key %d reads %q, want %q", round, i, k, kept[i])
			}
			if _, _, _, err := ti.Get(k, rev); err != nil {
				t.Fatalf("round %d: get %q: %v", round, k, err)
			}
		}
	}
	if rewrites == 0 {
		t.Fatal("the key arena was never rewritten")
	}
	if ti.slab.used > 1300 {
		t.Fatalf("%d key indexes handed out for 1,300 keys at a time", ti.slab.used)
	}
	// At most ~1 MiB of small keys live and garbage each before a rewrite
	// (16 chunks apiece), and 13 big keys of a chunk each.
	if n := int(ti.keys.used) - len(ti.keys.free); n > 50 {
		t.Fatalf("%d arena chunks in use for 1,300 keys at a time", n)
	}
	if err := ti.check(); err != nil {
		t.Fatal(err)
	}
}

// TestEmptyKey: the empty key (etcdutl's revision placeholders restore it)
// takes no arena space and reads back.
func TestEmptyKey(t *testing.T) {
	ti := New()
	ti.Restore(nil, Revision{Main: 2}, Revision{Main: 2}, 0)
	ti.Put([]byte("a"), Revision{Main: 3})
	keys, _, total := ti.Range([]byte{}, []byte{0}, 3, 0)
	if total != 2 || len(keys[0]) != 0 || string(keys[1]) != "a" {
		t.Fatalf("range: %q (%d)", keys, total)
	}
	if _, _, _, err := ti.Get(nil, 3); err != nil {
		t.Fatal(err)
	}
	dec, err := Decode(ti.AppendEncoded(nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := dec.Get(nil, 3); err != nil {
		t.Fatal(err)
	}
}

// TestDecodeKeysOfEveryLength decodes keys that share arena chunks, keys of
// a chunk of their own and keys that just fill or just overflow a chunk; the
// inserter compares keys while the decoder adds them (run with -race).
func TestDecodeKeysOfEveryLength(t *testing.T) {
	ti := New()
	var want []string
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 3000 {
		n := rng.IntN(64)
		switch i % 50 {
		case 0:
			n = arenaMaxKey + rng.IntN(3*arenaMaxKey)
		case 1:
			n = arenaMaxKey
		}
		key := fmt.Sprintf("%05d/%s", i, strings.Repeat("x", n))
		want = append(want, key)
		ti.Put([]byte(key), Revision{Main: int64(i + 2)})
	}
	dec, err := Decode(ti.AppendEncoded(nil))
	if err != nil {
		t.Fatal(err)
	}
	keys, _, total := dec.Range([]byte{0}, []byte{0}, 1<<20, 0)
	if total != len(want) {
		t.Fatalf("%d keys decoded, want %d", total, len(want))
	}
	for i, k := range keys {
		if string(k) != want[i] {
			t.Fatalf("key %d: %d bytes, want %d", i, len(k), len(want[i]))
		}
	}
	if err := dec.check(); err != nil {
		t.Fatal(err)
	}
}
