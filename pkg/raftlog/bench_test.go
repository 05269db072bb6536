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

// BenchmarkRecover measures Open over a WAL of 100,000 1 KiB entries in
// 16 MiB segments, with a snapshot 1,000 entries before the end: recovery
// reads every segment kept but decodes only the entries after the
// snapshot.
func BenchmarkRecover(b *testing.B) {
	dir := b.TempDir()
	opts := Options{Dir: dir, SegmentSize: 16 << 20, NoSync: true, NoPreallocate: true}
	l, err := Open(opts)
	if err != nil {
		b.Fatal(err)
	}
	const total, batch = 100000, 100
	data := make([]byte, 1024)
	for next := uint64(1); next <= total; next += batch {
		es := make([]*raftpb.Entry, batch)
		for i := range es {
			es[i] = &raftpb.Entry{Index: new(next + uint64(i)), Term: new(uint64(1)), Data: data}
		}
		if err := l.Save(hardState(1, 1, next+batch-1), es, nil); err != nil {
			b.Fatal(err)
		}
	}
	if err := l.CreateSnapshot(total-1000, &raftpb.ConfState{Voters: []uint64{1}}, nil); err != nil {
		b.Fatal(err)
	}
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(total * 1024)
	b.ReportAllocs()
	for b.Loop() {
		l, err := Open(opts)
		if err != nil {
			b.Fatal(err)
		}
		if got := l.st.lastIndex(); got != total {
			b.Fatalf("recovered up to %d, want %d", got, total)
		}
		if err := l.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
