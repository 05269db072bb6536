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
		var sl slab
		tbl := newKeyTable()
		type entry struct {
			tag uint32
			id  uint32
		}
		model := map[string]entry{}
		var keys []string
		for step := range 1500 {
			if len(keys) == 0 || rng.IntN(3) > 0 && len(keys) < 100 {
				key := fmt.Sprintf("k%d-%d", seed, step)
				id, ki := sl.alloc()
				ki.setKey(key)
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
				if _, ki := tbl.find(e.tag, []byte(key), &sl); ki != nil {
					t.Fatalf("seed %d step %d: removed %q still found", seed, step, key)
				}
				sl.release(e.id)
			}
			if tbl.n != len(model) {
				t.Fatalf("seed %d step %d: table holds %d, want %d", seed, step, tbl.n, len(model))
			}
			if tbl.n*4 > len(tbl.slots)*3 {
				t.Fatalf("seed %d step %d: %d keys in %d slots", seed, step, tbl.n, len(tbl.slots))
			}
			for key, e := range model {
				id, ki := tbl.find(e.tag, []byte(key), &sl)
				if ki == nil || id != e.id || ki.keyString() != key {
					t.Fatalf("seed %d step %d: %q (tag %d) not found as id %d", seed, step, key, e.tag, e.id)
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
	for i := range 300 {
		kept = append(kept, fmt.Sprintf("keep/%04d", i))
		ti.Put([]byte(kept[i]), Revision{Main: rev})
		rev++
	}
	rewrites := 0
	for round := range 6 {
		before := ti.keys.garbage
		for i := range 1000 {
			ti.Put([]byte(fmt.Sprintf("r%d/%s%04d", round, pad, i)), Revision{Main: rev})
			rev++
		}
		for i := range 1000 {
			if err := ti.Tombstone([]byte(fmt.Sprintf("r%d/%s%04d", round, pad, i)), Revision{Main: rev}); err != nil {
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
	if err := ti.check(); err != nil {
		t.Fatal(err)
	}
}
