package raftlog

import (
	"fmt"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// BenchmarkSave measures one Save (with its real fdatasync) per iteration
// for batches of 256-byte entries.
func BenchmarkSave(b *testing.B) {
	for _, batch := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("batch-%d", batch), func(b *testing.B) {
			l, err := Open(Options{Dir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			data := make([]byte, 256)
			next := uint64(1)
			b.SetBytes(int64(batch * len(data)))
			b.ReportAllocs()
			for b.Loop() {
				es := make([]*raftpb.Entry, batch)
				for i := range es {
					es[i] = &raftpb.Entry{Index: new(next), Term: new(uint64(1)), Data: data}
					next++
				}
				if err := l.Save(hardState(1, 1, next-1), es, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "entries/s")
		})
	}
}
