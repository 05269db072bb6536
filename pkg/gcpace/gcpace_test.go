package gcpace

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	for _, tc := range []struct {
		live, excluded int64
		base, want     int
	}{
		{live: 0, excluded: 0, base: 100, want: 100},
		{live: 100 << 20, excluded: 0, base: 100, want: 100},
		{live: 300 << 20, excluded: 200 << 20, base: 100, want: 33},
		{live: 300 << 20, excluded: 200 << 20, base: 50, want: 16},
		// The rest never counts as less than minRest (16 MiB), so a small
		// heap may grow by more than GOGC% of itself.
		{live: 202 << 20, excluded: 200 << 20, base: 100, want: 7},
		{live: 216 << 20, excluded: 200 << 20, base: 100, want: 7},
		{live: 3200 << 20, excluded: 3190 << 20, base: 100, want: 1},
		{live: 8 << 20, excluded: 200 << 20, base: 100, want: 200},
		{live: 1 << 20, excluded: 200 << 20, base: 100, want: 1600},
		{live: 4 << 20, excluded: 0, base: 100, want: 400},
		{live: 4 << 20, excluded: 0, base: 50, want: 200},
		{live: 32 << 20, excluded: 0, base: 100, want: 100},
	} {
		if got := percent(tc.live, tc.excluded, tc.base); got != tc.want {
			t.Errorf("percent(%d, %d, %d) = %d, want %d", tc.live, tc.excluded, tc.base, got, tc.want)
		}
	}
}

func readGoal() (live, goal uint64) {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64(), s[1].Value.Uint64()
}

// TestExcludedArenaLeavesThePacing keeps a 256 MiB pointer-free arena live:
// without the pacer the next collection waits for another 256 MiB; with it
// the heap may grow by about GOGC% of the rest only.
func TestExcludedArenaLeavesThePacing(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	const arenaSize = 256 << 20
	arena := make([]byte, arenaSize)
	runtime.GC()
	live, goal := readGoal()
	if goal-live < arenaSize/2 {
		t.Fatalf("before Exclude: goal %d - live %d: the arena should count", goal, live)
	}

	release := Exclude(arenaSize)
	// Exclude tunes at once from the last collection; later collections
	// keep it tuned.
	for range 3 {
		runtime.GC()
		deadline := time.Now().Add(5 * time.Second)
		for {
			live, goal = readGoal()
			if goal-live < 64<<20 || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Millisecond)
		}
		if goal-live >= 64<<20 {
			t.Fatalf("with the arena excluded: goal %d - live %d, want under 64 MiB", goal, live)
		}
	}

	// More heap outside the arena: the next collections retune upwards.
	other := make([]*[1 << 10]byte, 64<<10) // 64 MiB in 1 KiB objects
	for i := range other {
		other[i] = new([1 << 10]byte)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		runtime.GC()
		live, goal = readGoal()
		if goal-live >= 48<<20 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if goal-live < 48<<20 {
		t.Fatalf("with 64 MiB more outside the arena: goal %d - live %d, want at least 48 MiB", goal, live)
	}
	runtime.KeepAlive(other)

	release()
	release() // idempotent
	if p := gogc(); p != 100 {
		t.Fatalf("after release: GC percent %d, want 100 restored", p)
	}
	runtime.GC()
	live, goal = readGoal()
	if goal-live < arenaSize/2 {
		t.Fatalf("after release: goal %d - live %d: the arena should count again", goal, live)
	}
	runtime.KeepAlive(arena)
}

// TestSmallHeapWaitsForTheFloor: with nothing excluded, a small heap is
// collected after it grew by minRest (at GOGC=100), not after the runtime's
// 4 MiB; released, the runtime's pacing is back.
func TestSmallHeapWaitsForTheFloor(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	release := Exclude(0)
	runtime.GC()
	deadline := time.Now().Add(5 * time.Second)
	live, goal := readGoal()
	for goal-live < minRest*9/10 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
		live, goal = readGoal()
	}
	if live >= minRest {
		t.Skipf("live heap %d: not a small heap", live)
	}
	if goal-live < minRest*9/10 {
		t.Fatalf("with the floor: goal %d - live %d, want about %d", goal, live, minRest)
	}
	release()
	if p := gogc(); p != 100 {
		t.Fatalf("GC percent %d after release, want GOGC's 100", p)
	}
}

func TestGOGCOffIsLeftAlone(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	release := Exclude(64 << 20)
	defer release()
	if p := gogc(); p != -1 {
		t.Fatalf("GC percent %d after Exclude with GOGC=off, want -1", p)
	}
}
