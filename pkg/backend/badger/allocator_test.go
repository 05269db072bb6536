package badger

import (
	"bufio"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/dgraph-io/ristretto/v2/z"
)

// rssAnon is the process's anonymous resident memory, in bytes.
func rssAnon(t *testing.T) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "RssAnon:"); ok {
			v = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB"))
			kb, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("parse RssAnon %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Skip("no RssAnon in /proc/self/status")
	return 0
}

// TestAllocatorReleaseReturnsBigBuffers checks the patch to ristretto's z in
// third_party: the buffers of a z.Allocator (Badger's table builders hold
// hundreds of MiB in one while they flush a memtable) go back to the system
// when it releases them, with no garbage collection in between. On the Go
// heap they made the collector's goal, and the process's memory, grow by as
// much again.
func TestAllocatorReleaseReturnsBigBuffers(t *testing.T) {
	const total = 192 << 20
	runtime.GC()
	before := rssAnon(t)
	a := z.NewAllocator(1<<20, "test")
	for n := 0; n < total; n += 1 << 20 {
		b := a.Allocate(1 << 20)
		if b[0] != 0 || b[len(b)-1] != 0 {
			t.Fatalf("allocated memory at %d not zeroed", n)
		}
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
	}
	held := rssAnon(t)
	if held-before < total/2 {
		t.Fatalf("RssAnon grew by %d MiB for %d MiB of buffers written", (held-before)>>20, total>>20)
	}
	a.Release()
	a.Release() // a second release frees nothing twice
	after := rssAnon(t)
	if held-after < total/2 {
		t.Fatalf("RssAnon %d MiB before Release, %d MiB after: the buffers were not returned", held>>20, after>>20)
	}
}

// TestAllocatorTrimToKeepsTheRest: trimmed buffers are given back, the kept
// ones stay usable, and the allocator grows again after a reset, as
// Badger's allocator pool uses it.
func TestAllocatorTrimToKeepsTheRest(t *testing.T) {
	a := z.NewAllocator(1<<20, "test")
	defer a.Release()
	for round := byte(1); round <= 3; round++ {
		var bufs [][]byte
		for n := 0; n < 64<<20; n += 1 << 20 {
			b := a.Allocate(1 << 20)
			b[0], b[len(b)-1] = round, round
			bufs = append(bufs, b)
		}
		for i, b := range bufs {
			if b[0] != round || b[len(b)-1] != round {
				t.Fatalf("round %d: buffer %d overwritten", round, i)
			}
		}
		a.TrimTo(4 << 20)
		a.Reset()
	}
}

// TestAllocatorReusedBuffersAreZeroed: a released buffer's mapping is kept
// for the next buffer of its size with its pages dropped, so the next
// allocator sees zeros where the last one wrote, as z.Calloc promises.
func TestAllocatorReusedBuffersAreZeroed(t *testing.T) {
	fill := func(a *z.Allocator, v byte) {
		for n := 0; n < 32<<20; n += 1 << 20 {
			b := a.Allocate(1 << 20)
			for i := range b {
				if b[i] != 0 {
					t.Fatalf("byte %d of a fresh 1 MiB allocation at %d MiB is %d, want 0", i, n>>20, b[i])
				}
				b[i] = v
			}
		}
	}
	for v := byte(1); v <= 3; v++ {
		a := z.NewAllocator(1<<20, "test")
		fill(a, v)
		a.Release()
	}
}
