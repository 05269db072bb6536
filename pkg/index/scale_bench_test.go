package index

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/metrics"
	"testing"
)

// scaleKeys is a large store's key count for the benchmarks below: 8 GiB
// of 1 KiB values is 8 million keys; 2 million keeps a run short and the
// index still far beyond the CPU's caches.
const scaleKeys = 2 << 20

// filledIndex is an index of n sequential keys, as a fill leaves it (each
// key put once), decoded as a start from the index file builds it.
func filledIndex(b *testing.B, n int) *Index {
	ti, err := Decode(encodedKeys(n))
	if err != nil {
		b.Fatal(err)
	}
	return ti
}

// BenchmarkGCMark measures what a large index costs the collector: one op
// is a full collection of a heap that holds little besides the index
// (gc-cpu-ns/key: the CPU the collector spent, as the runtime estimates
// it). The mark work of a collection grows with the objects and pointers
// the index holds; a running server pays it once per cycle, on its CPUs.
func BenchmarkGCMark(b *testing.B) {
	ti := filledIndex(b, scaleKeys)
	runtime.GC()
	gcCPU := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(gcCPU)
	before := gcCPU[0].Value.Float64()
	for b.Loop() {
		runtime.GC()
	}
	metrics.Read(gcCPU)
	runtime.KeepAlive(ti)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/scaleKeys, "ns/key")
	b.ReportMetric((gcCPU[0].Value.Float64()-before)*1e9/float64(b.N)/scaleKeys, "gc-cpu-ns/key")
}

// BenchmarkPutExisting is a put load over a large index's keys at random:
// the lookup of a key that is there, its new revision, no insert.
func BenchmarkPutExisting(b *testing.B) {
	ti := filledIndex(b, scaleKeys)
	keys := make([][]byte, 1<<16)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("fill/%08d", rng.IntN(scaleKeys)))
	}
	rev := int64(scaleKeys + 2)
	i := 0
	for b.Loop() {
		ti.Put(keys[i&(len(keys)-1)], Revision{Main: rev})
		rev++
		i++
	}
}
