package backendtest

import (
	"encoding/binary"
	"math/rand"
	"sync/atomic"
	"testing"

	"github.com/kvd-dev/kvd/pkg/backend"
)

// BenchOpenFunc opens the engine under benchmark on dir.
type BenchOpenFunc func(b *testing.B, dir string) backend.Backend

const (
	benchKeys     = 10000
	benchValueLen = 256
)

// benchKey is shaped like an mvcc revision key: 8-byte main, '_', 8-byte sub.
func benchKey(i int) []byte {
	k := binary.BigEndian.AppendUint64(nil, uint64(i))
	k = append(k, '_')
	return binary.BigEndian.AppendUint64(k, 0)
}

// Bench runs the engine benchmarks: a batched Update of 100 puts, a ReadTx
// with one Get, and a Range over 1000 keys.
func Bench(b *testing.B, open BenchOpenFunc) {
	b.Run("Update100Puts", func(b *testing.B) {
		be := benchOpen(b, open)
		value := make([]byte, benchValueLen)
		b.SetBytes(100 * (17 + benchValueLen))
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			err := be.Update(func(tx backend.WriteTx) error {
				for j := 0; j < 100; j++ {
					if err := tx.Put(backend.Key, benchKey(i*100+j), value); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatalf("Update: %v", err)
			}
		}
	})
	b.Run("ReadTxGet", func(b *testing.B) {
		be := benchOpen(b, open)
		benchFill(b, be)
		rng := rand.New(rand.NewSource(1))
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			rtx, err := be.ReadTx()
			if err != nil {
				b.Fatalf("ReadTx: %v", err)
			}
			if _, ok, err := rtx.Get(backend.Key, benchKey(rng.Intn(benchKeys))); err != nil || !ok {
				b.Fatalf("Get: %v %v", ok, err)
			}
			rtx.Release()
		}
	})
	// Readers on every CPU, as the gRPC handlers of 1-key ranges are:
	// what engines share between readers shows here.
	b.Run("ReadTxGetParallel", func(b *testing.B) {
		be := benchOpen(b, open)
		benchFill(b, be)
		b.ReportAllocs()
		b.ResetTimer()
		var seed atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			rng := rand.New(rand.NewSource(seed.Add(1)))
			for pb.Next() {
				rtx, err := be.ReadTx()
				if err != nil {
					b.Errorf("ReadTx: %v", err)
					return
				}
				if _, ok, err := rtx.Get(backend.Key, benchKey(rng.Intn(benchKeys))); err != nil || !ok {
					b.Errorf("Get: %v %v", ok, err)
				}
				rtx.Release()
			}
		})
	})
	b.Run("Range1000", func(b *testing.B) {
		be := benchOpen(b, open)
		benchFill(b, be)
		rng := rand.New(rand.NewSource(1))
		b.SetBytes(1000 * (17 + benchValueLen))
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			rtx, err := be.ReadTx()
			if err != nil {
				b.Fatalf("ReadTx: %v", err)
			}
			n := 0
			start := rng.Intn(benchKeys - 1000)
			err = rtx.Range(backend.Key, benchKey(start), nil, 1000, func(k, v []byte) bool {
				n++
				return true
			})
			rtx.Release()
			if err != nil || n != 1000 {
				b.Fatalf("Range: %d keys, %v", n, err)
			}
		}
	})
}

func benchOpen(b *testing.B, open BenchOpenFunc) backend.Backend {
	b.Helper()
	be := open(b, b.TempDir())
	b.Cleanup(func() {
		if err := be.Close(); err != nil {
			b.Errorf("Close: %v", err)
		}
	})
	return be
}

func benchFill(b *testing.B, be backend.Backend) {
	b.Helper()
	value := make([]byte, benchValueLen)
	for i := 0; i < benchKeys; i += 1000 {
		err := be.Update(func(tx backend.WriteTx) error {
			for j := i; j < i+1000; j++ {
				if err := tx.Put(backend.Key, benchKey(j), value); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatalf("fill: %v", err)
		}
	}
}
