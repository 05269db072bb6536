package mvcc

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kvd-dev/kvd/pkg/actors"
	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/backend/enginetest"
)

// compactFailEngine opens e with compactions failing while *fail is set.
func compactFailEngine(e engine, fail *atomic.Bool) engine {
	return engine{name: e.name, open: func(dir string) (backend.Backend, error) {
		be, err := e.open(dir)
		if err != nil {
			return nil, err
		}
		return enginetest.KeyDeleteFaults{Backend: be, Fail: fail}, nil
	}}
}

// scheduleCompact applies a compaction at rev and returns its done channel.
func (ts *testStore) scheduleCompact(rev int64) <-chan struct{} {
	ts.t.Helper()
	var done <-chan struct{}
	ts.apply(func(b *Batch) {
		var err error
		if done, err = b.Compact(rev); err != nil {
			ts.t.Fatalf("compact at %d: %v", rev, err)
		}
	})
	return done
}

// waitCompaction is how a physical Compact waits (pkg/api): for the
// compaction, or for the compactor to end without it.
func waitCompaction(ts *testStore, done <-chan struct{}) error {
	select {
	case <-done:
		return nil
	case <-ts.CompactorDone():
		select {
		case <-done:
			return nil
		default:
			return ts.CompactorErr()
		}
	case <-time.After(20 * time.Second):
		return errors.New("timed out waiting for the compaction")
	}
}

// A compaction that fails stops the compactor actor with the reason: the
// actor group fails (the member stops), the compactions waited for end with
// an error instead of hanging, and no goroutine is left.
func TestCompactionFailureFailsActorGroup(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		leaks := goleak.IgnoreCurrent()
		var fail atomic.Bool
		ts := newTestStoreConfig(t, compactFailEngine(e, &fail), config{compactBatchLimit: 4, externalCompactor: true})
		failed := make(chan error, 1)
		g := actors.NewGroup(testLogger(t), func(err error) { failed <- err })
		g.Go("mvcc-compactor", ts.Compactor())

		writeHistory(ts, 10, 4)
		ts.compact(ts.Rev() - 30) // a compaction that works first
		fail.Store(true)
		first := ts.scheduleCompact(ts.Rev() - 20)
		second := ts.scheduleCompact(ts.Rev() - 10)

		if err := waitCompaction(ts, first); !errors.Is(err, enginetest.ErrInjected) {
			t.Fatalf("waiting for the failing compaction = %v, want the injected failure", err)
		}
		if err := waitCompaction(ts, second); !errors.Is(err, enginetest.ErrInjected) {
			t.Fatalf("waiting for the compaction queued behind = %v, want the injected failure", err)
		}
		select {
		case err := <-failed:
			if !errors.Is(err, enginetest.ErrInjected) {
				t.Fatalf("group failed with %v, want the injected failure", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the actor group did not fail")
		}
		if g.Context().Err() == nil {
			t.Fatal("the group's context is not cancelled after the compactor failed")
		}
		// A compaction applied after the failure is not waited for forever.
		third := ts.scheduleCompact(ts.Rev() - 5)
		if err := waitCompaction(ts, third); !errors.Is(err, enginetest.ErrInjected) {
			t.Fatalf("waiting for a compaction applied after the failure = %v", err)
		}
		if err := g.Stop(); !errors.Is(err, enginetest.ErrInjected) {
			t.Fatalf("group stop = %v, want the injected failure", err)
		}
		ts.close()
		goleak.VerifyNone(t, leaks)

		// The next Open resumes the compaction.
		ts.cfg = config{compactBatchLimit: 4}
		ts.e = e
		ts.open()
		if ts.resumed == nil {
			t.Fatal("reopen did not resume the failed compaction")
		}
		waitClosed(t, ts.resumed, "resumed compaction")
	})
}

// The store's own compactor goroutine (no ExternalCompactor) ends on a
// failure too, with the reason, and never leaves a waiter hanging.
func TestCompactionFailureEndsOwnCompactor(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		var fail atomic.Bool
		ts := newTestStoreConfig(t, compactFailEngine(e, &fail), config{compactBatchLimit: 4})
		writeHistory(ts, 10, 2)
		fail.Store(true)
		done := ts.scheduleCompact(ts.Rev() - 5)
		if err := waitCompaction(ts, done); !errors.Is(err, enginetest.ErrInjected) {
			t.Fatalf("waiting for the failing compaction = %v, want the injected failure", err)
		}
	})
}

// The compactor actor ends without error when its context is cancelled or
// the store closes; a store whose compactor never ran closes without
// waiting for it, and Run after Close returns at once.
func TestCompactorActorStops(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		ts := newTestStoreConfig(t, e, config{externalCompactor: true})
		ctx, cancel := context.WithCancel(context.Background())
		ran := make(chan error, 1)
		go func() { ran <- ts.Compactor().Run(ctx) }()
		ts.put("a", "1")
		ts.put("a", "2")
		ts.compact(2)
		cancel()
		if err := <-ran; err != nil {
			t.Fatalf("compactor after cancel = %v, want nil", err)
		}
		done := ts.scheduleCompact(3)
		if err := waitCompaction(ts, done); !errors.Is(err, errCompactorStopped) {
			t.Fatalf("waiting for a compaction after the compactor stopped = %v", err)
		}
		if err := ts.Compactor().Run(context.Background()); err == nil {
			t.Fatal("a second Run of the compactor succeeded")
		}

		idle := newTestStoreConfig(t, e, config{externalCompactor: true})
		st := idle.Store
		closed := make(chan struct{})
		go func() { idle.close(); close(closed) }()
		waitClosed(t, closed, "close of a store whose compactor never ran")
		if err := st.Compactor().Run(context.Background()); err != nil {
			t.Fatalf("Run after Close = %v, want nil", err)
		}
	})
}
