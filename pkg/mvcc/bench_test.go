package mvcc

import (
	"fmt"
	"testing"
)

func forEachEngineB(b *testing.B, f func(b *testing.B, e engine)) {
	for _, e := range engines {
		b.Run(e.name, func(b *testing.B) { f(b, e) })
	}
}

// BenchmarkPut measures puts of 256-byte values, one txn each, applied in
// batches of 100 (one backend commit per batch).
func BenchmarkPut(b *testing.B) {
	forEachEngineB(b, func(b *testing.B, e engine) {
		ts := newTestStore(b, e)
		value := make([]byte, 256)
		const batch = 100
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i += batch {
			ts.apply(func(bt *Batch) {
				for j := i; j < min(i+batch, b.N); j++ {
					tw := bt.Write()
					tw.Put(fmt.Appendf(nil, "key-%010d", j%100000), value, 0)
					tw.End()
				}
			})
		}
	})
}

func populate(b *testing.B, ts *testStore, n int) {
	b.Helper()
	value := make([]byte, 256)
	for i := 0; i < n; i += 1000 {
		ts.apply(func(bt *Batch) {
			for j := i; j < min(i+1000, n); j++ {
				tw := bt.Write()
				tw.Put(fmt.Appendf(nil, "p%02d/key-%06d", j/1000, j), value, 0)
				tw.End()
			}
		})
	}
}

// BenchmarkRangeOneKey reads one key out of 10000 through a fresh read view.
func BenchmarkRangeOneKey(b *testing.B) {
	forEachEngineB(b, func(b *testing.B, e engine) {
		ts := newTestStore(b, e)
		populate(b, ts, 10000)
		key := []byte("p05/key-005123")
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			r := ts.Read()
			res, err := r.Range(key, nil, RangeOptions{})
			r.End()
			if err != nil || len(res.KVs) != 1 {
				b.Fatalf("range = %v %v", res, err)
			}
		}
	})
}

// BenchmarkRangePrefix1000 reads a 1000-key prefix out of 10000 keys.
func BenchmarkRangePrefix1000(b *testing.B) {
	forEachEngineB(b, func(b *testing.B, e engine) {
		ts := newTestStore(b, e)
		populate(b, ts, 10000)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			r := ts.Read()
			res, err := r.Range([]byte("p03/"), []byte("p030"), RangeOptions{})
			r.End()
			if err != nil || len(res.KVs) != 1000 {
				b.Fatalf("range = %d kvs %v", len(res.KVs), err)
			}
		}
	})
}

// BenchmarkRestore opens a store of 100,000 keys with 1 KiB values: the
// index rebuild a restart and a snapshot install pay (at 1 GiB, 10x this).
func BenchmarkRestore(b *testing.B) {
	forEachEngineB(b, func(b *testing.B, e engine) {
		ts := newTestStore(b, e)
		value := make([]byte, 1024)
		const n = 100000
		for i := 0; i < n; i += 1000 {
			ts.apply(func(bt *Batch) {
				for j := i; j < min(i+1000, n); j++ {
					tw := bt.Write()
					tw.Put(fmt.Appendf(nil, "fill/%08d", j), value, 0)
					tw.End()
				}
			})
		}
		ts.close()
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			ts.open()
			b.StopTimer()
			ts.close()
			b.StartTimer()
		}
		if got := func() int { ts.open(); return ts.idx.Len() }(); got != n {
			b.Fatalf("restored %d keys, want %d", got, n)
		}
	})
}
