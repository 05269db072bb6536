package index

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

// TestIDTree runs random inserts and deletes against a sorted slice, with
// runs of ascending and descending keys (which split and merge the tree's
// edges), checking the tree's invariants and an ascent from a random key
// after every few steps, and every ascent and descent at the end.
func TestIDTree(t *testing.T) {
	for seed := range uint64(4) {
		rng := rand.New(rand.NewPCG(seed, 11))
		keys := map[uint32]string{}
		tr := &idTree{keyOf: func(id uint32) string { return keys[id] }}
		var model []string // sorted
		byKey := map[string]uint32{}
		next := uint32(1)
		add := func(key string) {
			if _, ok := byKey[key]; ok {
				return
			}
			id := next
			next++
			keys[id], byKey[key] = key, id
			tr.insert(id)
			i := sort.SearchStrings(model, key)
			model = slices.Insert(model, i, key)
		}
		del := func(key string) {
			_, ok := byKey[key]
			if got := tr.delete(key); got != ok {
				t.Fatalf("seed %d: delete %q = %v, want %v", seed, key, got, ok)
			}
			if ok {
				delete(byKey, key)
				i := sort.SearchStrings(model, key)
				model = slices.Delete(model, i, i+1)
			}
		}
		// A descending run from below every key, prepended.
		for k := 99999; k > 99000; k-- {
			key := fmt.Sprintf("-%06d", k)
			keys[next], byKey[key] = key, next
			tr.prepend(next)
			next++
			model = slices.Insert(model, 0, key)
		}
		for step := range 250 {
			switch op := rng.IntN(10); {
			case op < 4: // random keys
				for range rng.IntN(200) {
					add(fmt.Sprintf("%06d", rng.IntN(100000)))
				}
			case op < 6: // a run up or down
				start, n := rng.IntN(100000), rng.IntN(500)
				for j := range n {
					k := start + j
					if op == 5 {
						k = start - j
					}
					add(fmt.Sprintf("%06d", k))
				}
			case op < 8: // random deletes, some of absent keys
				for range rng.IntN(300) {
					if len(model) > 0 && rng.IntN(4) > 0 {
						del(model[rng.IntN(len(model))])
					} else {
						del(fmt.Sprintf("%06d", rng.IntN(100000)))
					}
				}
			default: // delete a run of neighbours
				if len(model) > 0 {
					i := rng.IntN(len(model))
					for _, k := range slices.Clone(model[i:min(len(model), i+rng.IntN(600))]) {
						del(k)
					}
				}
			}
			if err := tr.check(); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			if tr.len() != len(model) {
				t.Fatalf("seed %d step %d: %d ids, want %d", seed, step, tr.len(), len(model))
			}
			from := fmt.Sprintf("%06d", rng.IntN(100000))
			i := sort.SearchStrings(model, from)
			limit := rng.IntN(50)
			var got []string
			tr.ascend(from, false, func(id uint32) bool {
				got = append(got, keys[id])
				return len(got) < limit
			})
			want := model[i:min(len(model), i+max(limit, 1))]
			if limit == 0 {
				want = model[i:min(len(model), i+1)]
			}
			if !slices.Equal(got, want) {
				t.Fatalf("seed %d step %d: ascend from %s limit %d: %v, want %v", seed, step, from, limit, got, want)
			}
		}
		var all, down []string
		tr.ascend("", true, func(id uint32) bool { all = append(all, keys[id]); return true })
		tr.descend(func(id uint32) bool { down = append(down, keys[id]); return true })
		slices.Reverse(down)
		if !slices.Equal(all, model) || !slices.Equal(down, model) {
			t.Fatalf("seed %d: full ascent or descent differs from the model", seed)
		}
		for _, k := range slices.Clone(model) {
			del(k)
		}
		if tr.root != nil || tr.len() != 0 {
			t.Fatalf("seed %d: tree not empty after deleting every key", seed)
		}
	}
}
