package defrag

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
)

// fakeTarget is a new store that is a slice: the copy appends the
// snapshot, Replay appends ops.
type fakeTarget struct {
	live     *[]int // the live store, read by Snapshot
	got      []int
	calls    []string
	failAt   string
	onCopy   func() // runs inside the copy, without the writer lock
	swapped  bool
	aborted  bool
	released int
}

func (f *fakeTarget) fail(stage string) error {
	f.calls = append(f.calls, stage)
	if f.failAt == stage {
		return errors.New("injected " + stage)
	}
	return nil
}

func (f *fakeTarget) Snapshot() (func(*Pacer) error, func(), error) {
	if err := f.fail("snapshot"); err != nil {
		return nil, nil, err
	}
	snap := slices.Clone(*f.live)
	return func(*Pacer) error {
		if f.onCopy != nil {
			f.onCopy()
		}
		if err := f.fail("copy"); err != nil {
			return err
		}
		f.got = append(f.got, snap...)
		return nil
	}, func() { f.released++ }, nil
}

func (f *fakeTarget) Replay(ops []int, _ *Pacer) error {
	if err := f.fail("replay"); err != nil {
		return err
	}
	f.got = append(f.got, ops...)
	return nil
}

func (f *fakeTarget) Sync() error { return f.fail("sync") }

func (f *fakeTarget) Swap() error {
	if err := f.fail("swap"); err != nil {
		return err
	}
	f.swapped = true
	return nil
}

func (f *fakeTarget) Abort() { f.aborted = true }

// write is an Update of the engines: under writeMu, to the live store and
// to the journal of a running Run.
func write(mu *sync.Mutex, slot *atomic.Pointer[Journal[int]], live *[]int, v int) {
	mu.Lock()
	defer mu.Unlock()
	*live = append(*live, v)
	if j := slot.Load(); j != nil {
		j.Add([]int{v}, 1)
	}
}

func TestRunCopiesSnapshotAndJournal(t *testing.T) {
	var mu sync.Mutex
	var slot atomic.Pointer[Journal[int]]
	live := []int{1, 2, 3}
	f := &fakeTarget{live: &live}
	f.onCopy = func() { write(&mu, &slot, &live, 4); write(&mu, &slot, &live, 5) }
	st, err := Run(&mu, &slot, Target[int](f))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.got, live) {
		t.Errorf("new store %v, live %v", f.got, live)
	}
	if !f.swapped || f.aborted || f.released != 1 || slot.Load() != nil {
		t.Errorf("swapped %v aborted %v released %d journal still hooked %v", f.swapped, f.aborted, f.released, slot.Load() != nil)
	}
	if st.Replayed != 2 || st.Rounds < 1 {
		t.Errorf("stats %+v", st)
	}
	if !mu.TryLock() {
		t.Fatal("writeMu left locked")
	}
	mu.Unlock()
}

func TestRunFailureAbortsAndUnhooks(t *testing.T) {
	for _, stage := range []string{"snapshot", "copy", "replay", "sync", "swap"} {
		var mu sync.Mutex
		var slot atomic.Pointer[Journal[int]]
		live := []int{1}
		f := &fakeTarget{live: &live, failAt: stage}
		f.onCopy = func() { write(&mu, &slot, &live, 2) }
		if _, err := Run(&mu, &slot, Target[int](f)); err == nil {
			t.Errorf("%s: no error", stage)
			continue
		}
		if f.swapped || !f.aborted || slot.Load() != nil {
			t.Errorf("%s: swapped %v aborted %v journal hooked %v", stage, f.swapped, f.aborted, slot.Load() != nil)
		}
		if stage != "snapshot" && f.released != 1 {
			t.Errorf("%s: snapshot released %d times", stage, f.released)
		}
		if !mu.TryLock() {
			t.Fatalf("%s: writeMu left locked", stage)
		}
		mu.Unlock()
	}
}

func TestRunHookStopsBeforeCopy(t *testing.T) {
	defer func() { Hook = nil }()
	Hook = func(stage string) error {
		if stage == "copy" {
			return errors.New("stop")
		}
		return nil
	}
	var mu sync.Mutex
	var slot atomic.Pointer[Journal[int]]
	live := []int{1}
	f := &fakeTarget{live: &live}
	if _, err := Run(&mu, &slot, Target[int](f)); err == nil {
		t.Fatal("no error")
	}
	if len(f.got) != 0 || f.released != 1 || !f.aborted {
		t.Errorf("copied %v released %d aborted %v", f.got, f.released, f.aborted)
	}
}
