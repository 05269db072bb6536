package index

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"testing"
)

// randomIndex applies n random puts, deletes (several to a transaction)
// and compactions to an index over a few keys.
func randomIndex(rng *rand.Rand, n int) *Index {
	ti := New()
	rev := int64(1)
	for range n {
		rev++
		for sub := range rng.IntN(3) + 1 {
			key := []byte(fmt.Sprintf("k%02d", rng.IntN(40)))
			if rng.IntN(4) == 0 {
				_ = ti.Tombstone(key, Revision{Main: rev, Sub: int64(sub)})
			} else {
				ti.Put(key, Revision{Main: rev, Sub: int64(sub)})
			}
		}
		if rng.IntN(50) == 0 {
			ti.Compact(rev - rng.Int64N(10))
		}
	}
	return ti
}

// sameAnswers fails the test when a and b answer some read differently:
// Range and RangeSince at every revision up to maxRev, Keep, and the counts.
func sameAnswers(t *testing.T, what string, a, b *Index, maxRev int64) {
	t.Helper()
	if a.Live() != b.Live() || a.Len() != b.Len() {
		t.Fatalf("%s: live %d keys %d, and %d and %d", what, a.Live(), a.Len(), b.Live(), b.Len())
	}
	for rev := int64(0); rev <= maxRev; rev++ {
		k1, r1, n1 := a.Range([]byte("k"), []byte{0}, rev, 0)
		k2, r2, n2 := b.Range([]byte("k"), []byte{0}, rev, 0)
		if !reflect.DeepEqual(k1, k2) || !reflect.DeepEqual(r1, r2) || n1 != n2 {
			t.Fatalf("%s: Range at %d differs", what, rev)
		}
		if s1, s2 := a.RangeSince([]byte("k"), []byte{0}, rev), b.RangeSince([]byte("k"), []byte{0}, rev); !reflect.DeepEqual(s1, s2) {
			t.Fatalf("%s: RangeSince %d differs:\n%v\n%v", what, rev, s1, s2)
		}
		if k1, k2 := a.Keep(rev), b.Keep(rev); !reflect.DeepEqual(k1, k2) {
			t.Fatalf("%s: Keep(%d) differs", what, rev)
		}
	}
}

// An encoded index decodes to one that answers every read as the original
// does, encodes the same again, and goes on taking writes as the original.
func TestEncodeRoundTrip(t *testing.T) {
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, seed))
		ti := randomIndex(rng, 400)
		enc := ti.AppendEncoded(nil)
		got, err := Decode(enc)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		what := fmt.Sprintf("seed %d", seed)
		sameAnswers(t, what, ti, got, 1000)
		if again := got.AppendEncoded(nil); !bytes.Equal(again, enc) {
			t.Fatalf("seed %d: re-encoding differs", seed)
		}
		for i, key := range []string{"k00", "k01", "k02", "new"} {
			rev := Revision{Main: 1000 + int64(i)}
			if i%2 == 0 {
				ti.Put([]byte(key), rev)
				got.Put([]byte(key), rev)
			} else {
				_ = ti.Tombstone([]byte(key), rev)
				_ = got.Tombstone([]byte(key), rev)
			}
		}
		ti.Compact(1001)
		got.Compact(1001)
		sameAnswers(t, what+", after writes and a compaction", ti, got, 1010)
	}
	empty, err := Decode(New().AppendEncoded(nil))
	if err != nil || empty.Len() != 0 {
		t.Fatalf("empty index: %v, %d keys", err, empty.Len())
	}
}

// Damaged input is an error, never a panic: every truncation, and byte
// flips at every offset.
func TestDecodeDamaged(t *testing.T) {
	enc := randomIndex(rand.New(rand.NewPCG(1, 2)), 200).AppendEncoded(nil)
	for n := range len(enc) {
		if _, err := Decode(enc[:n]); !errors.Is(err, errEncoded) {
			t.Fatalf("truncated to %d of %d bytes: %v", n, len(enc), err)
		}
	}
	if _, err := Decode(append(enc[:len(enc):len(enc)], 0)); !errors.Is(err, errEncoded) {
		t.Fatalf("trailing byte: %v", err)
	}
	for i := range enc {
		b := bytes.Clone(enc)
		b[i] ^= 0xff
		if _, err := Decode(b); err != nil && !errors.Is(err, errEncoded) {
			t.Fatalf("flip at %d: %v", i, err)
		}
	}
}

// Decode never panics and what it accepts encodes back to its input.
func FuzzDecode(f *testing.F) {
	f.Add(randomIndex(rand.New(rand.NewPCG(3, 4)), 50).AppendEncoded(nil))
	f.Add(New().AppendEncoded(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		ti, err := Decode(b)
		if err != nil {
			return
		}
		if again := ti.AppendEncoded(nil); !bytes.Equal(again, b) {
			t.Fatalf("accepted %x, encodes as %x", b, again)
		}
	})
}

// encodedKeys returns the encoding of an index of n keys put once, as a
// store filled with sequential keys holds them.
func encodedKeys(n int) []byte {
	ti := New()
	for i := range n {
		ti.Put([]byte(fmt.Sprintf("fill/%08d", i)), Revision{Main: int64(i + 2)})
	}
	return ti.AppendEncoded(nil)
}

// BenchmarkDecode is a start's reading of the index file: one op decodes
// an index of 1,048,576 keys.
func BenchmarkDecode(b *testing.B) {
	const keys = 1 << 20
	enc := encodedKeys(keys)
	// Measured before the loop, which keeps its last index alive.
	retained := retainedPerKey(b, enc, keys)
	b.SetBytes(int64(len(enc)))
	for b.Loop() {
		if _, err := Decode(enc); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/keys, "ns/key")
	b.ReportMetric(retained, "heap-B/key")
}

// retainedPerKey decodes enc once more and returns the heap the index
// keeps, per key: what a start from the index file holds in memory.
func retainedPerKey(b *testing.B, enc []byte, keys int) float64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc
	ti, err := Decode(enc)
	if err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	runtime.KeepAlive(ti)
	return float64(int64(ms.HeapAlloc)-int64(before)) / float64(keys)
}

// BenchmarkAppendEncoded is a clean stop's encoding of the same index.
func BenchmarkAppendEncoded(b *testing.B) {
	const keys = 1 << 20
	ti, err := Decode(encodedKeys(keys))
	if err != nil {
		b.Fatal(err)
	}
	var buf []byte
	for b.Loop() {
		buf = ti.AppendEncoded(buf[:0])
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/keys, "ns/key")
}
