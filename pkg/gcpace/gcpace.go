// Package gcpace paces Go's garbage collector on the heap that needs
// collecting, leaving out big pointer-free arenas that live as long as the
// process (Badger's memtable skiplists), and never collecting more often
// than after minRest of growth (GOGC% of it).
//
// GOGC starts the next collection once the heap has grown by GOGC% of what
// the last one found live. A 200 MiB Badger arena on the Go heap therefore
// lets the heap grow by another 200 MiB between collections, and every
// allocation lands on memory the process has not touched for a long time or
// ever: page faults and cache misses all along the request path. In a
// 3-member Badger cluster that cost about 15% of the one-client put
// throughput. Marking an arena without pointers costs next to nothing, so
// collecting after GOGC% of the rest is cheap and keeps allocation on warm
// memory.
//
// A small heap needs the floor: a collection has a cost of its own besides
// the heap it marks (every goroutine's stack scanned, and shrunk; gRPC's
// 256 stream workers then grow theirs again on their next call), and with
// the runtime's 4 MiB minimum a member serving 1-key ranges from a small
// store collected every 600 requests.
//
// The tuner re-reads the live heap after every collection and sets the GC
// percent so that the heap may grow by GOGC% of (live - excluded), at least
// by GOGC% of minRest. GOGC=off turns it off.
package gcpace

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// minRest is the least heap the headroom is computed from. Against the
// runtime's own 4 MiB (one member, 100 clients, 100,000 requests a run,
// alternating; docs/benchmarks.md, "A floor under the GC's pace"): 1-key
// ranges 31 -> 21 µs of CPU on bolt, puts and txns 5-20% less, on both
// engines; 32 MiB did no better than 16. The allocation working set
// between collections costs cache misses, which is why it is not larger:
// on 3-member Badger clusters with one client 16 MiB gave 595 puts/s
// against 620 (3 rounds; at 100 clients 7,770 against 7,656), and an
// earlier 32 MiB floor 472 against 489.
const minRest = 16 << 20

var pacer struct {
	mu       sync.Mutex
	excluded int64
	// base is the GC percent in force before the first Exclude (GOGC); it is
	// restored once nothing is excluded.
	base int
	// gen counts starts; a cleanup of an older generation does nothing, so
	// a stop followed by a start never leaves two chains of sentinels.
	gen    uint64
	active bool
}

// Exclude takes n bytes of long-lived, pointer-free heap out of the GC pacing
// until release is called; Exclude(0) paces with the floor alone. Calls add
// up; release is idempotent, and the runtime's pacing comes back once every
// call is released.
func Exclude(n int64) (release func()) {
	if n < 0 {
		return func() {}
	}
	pacer.mu.Lock()
	defer pacer.mu.Unlock()
	if !pacer.active {
		pacer.base = gogc()
		if pacer.base < 0 {
			// GOGC=off: the user chose no pacing at all.
			return func() {}
		}
		pacer.active = true
		pacer.gen++
		arm(pacer.gen)
	}
	pacer.excluded += n
	tuneLocked()
	var once sync.Once
	return func() {
		once.Do(func() {
			pacer.mu.Lock()
			defer pacer.mu.Unlock()
			pacer.excluded -= n
			if pacer.excluded > 0 {
				tuneLocked()
				return
			}
			pacer.active = false
			debug.SetGCPercent(pacer.base)
		})
	}
}

// sentinel is garbage from the moment it is armed, so its cleanup runs after
// the next collection. The pointer keeps it out of the tiny allocator, whose
// objects may never be cleaned up.
type sentinel struct {
	_ *byte
	_ [16]byte
}

func arm(gen uint64) {
	runtime.AddCleanup(new(sentinel), afterGC, gen)
}

// afterGC runs once per collection while the pacer is active.
func afterGC(gen uint64) {
	pacer.mu.Lock()
	defer pacer.mu.Unlock()
	if !pacer.active || gen != pacer.gen {
		return
	}
	tuneLocked()
	arm(gen)
}

// readMetric reads one uint64 runtime metric.
func readMetric(name string) (uint64, bool) {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0, false
	}
	return s[0].Value.Uint64(), true
}

// gogc is the GC percent in force, -1 for off.
func gogc() int {
	v, ok := readMetric("/gc/gogc:percent")
	if !ok {
		return 100
	}
	if v > math.MaxInt32 {
		return -1 // off is -1 stored unsigned
	}
	return int(v)
}

// tuneLocked sets the GC percent from the heap the last collection found
// live. The pacer must be active.
func tuneLocked() {
	if live, ok := readMetric("/gc/heap/live:bytes"); ok {
		debug.SetGCPercent(percent(int64(live), pacer.excluded, pacer.base))
	}
}

// percent is the GC percent that lets a heap of live bytes grow by base% of
// its part outside excluded, at least by base% of minRest.
func percent(live, excluded int64, base int) int {
	if live <= 0 {
		return base
	}
	rest := max(live-excluded, minRest)
	p := int(rest * int64(base) / live)
	return max(p, 1)
}
