package backendtest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kvd-dev/kvd/pkg/backend"
)

// DefragHooks reach into an engine's online Defrag, which must call its
// hook at three stages: "copy" (snapshot open, writers free, copy not
// begun), "replay" (copy done, writers free) and "swap" (writers held, new
// store complete, not yet live). A hook error fails the Defrag there.
type DefragHooks struct {
	// SetHook installs fn as the engine's Defrag hook; nil removes it.
	SetHook func(fn func(stage string) error)
	// SetJournalLimit sets the bytes the Defrag journal holds before writers
	// wait, and returns a function restoring the default.
	SetJournalLimit func(n int64) (restore func())
	// SetCopyPause, if not nil, sets the throttle of the engine's copy (the
	// pause after each step, in multiples of the step's time; 0 copies at
	// full speed) and returns a function restoring the default. The cases
	// run at full speed, but for WritesDuringThrottledCopy, which runs
	// WritesDuringCopy with the engine's default throttle.
	SetCopyPause func(pause float64) (restore func())
}

// guard bounds how long a step that must not block may take before the test
// calls it a deadlock. It is no performance threshold: every step it guards
// takes milliseconds when the engine is right, and never ends when it is not.
const guard = 60 * time.Second

// RunDefragOnline checks that Defrag does not hold writers for its copy and
// that every write committed while it runs ends up in the new store. The
// tests set package-level hooks: they must not run in parallel.
func RunDefragOnline(t *testing.T, open OpenFunc, h DefragHooks) {
	s := suite{open: open}
	t.Cleanup(func() { h.SetHook(nil) })
	if h.SetCopyPause != nil {
		t.Run("WritesDuringThrottledCopy", func(t *testing.T) { s.defragWritesDuringCopy(t, h, 1) })
		t.Cleanup(h.SetCopyPause(0))
	}
	t.Run("WritesDuringCopy", func(t *testing.T) { s.defragWritesDuringCopy(t, h, 2) })
	t.Run("WritersNotBlocked", func(t *testing.T) { s.defragWritersNotBlocked(t, h) })
	t.Run("FullJournalHoldsWriters", func(t *testing.T) { s.defragFullJournal(t, h) })
	t.Run("FailureKeepsOldStore", func(t *testing.T) { s.defragFailure(t, h) })
	t.Run("ConcurrentDefragAndClose", func(t *testing.T) { s.defragConcurrent(t, h) })
}

// model is the expected content of a backend, kept in step with the
// Updates that returned nil.
type model struct {
	mu sync.Mutex
	m  map[backend.Bucket]map[string]string
}

// newModel starts empty, with the bucket that only failed Updates write to
// (so check finds it empty).
func newModel() *model {
	return &model{m: map[backend.Bucket]map[string]string{"failbucket": {}}}
}

// update runs fn as one Update and, if it committed, applies its writes to
// the model. fn gets a writer that does both.
func (m *model) update(be backend.Backend, fn func(w *modelTx) error) error {
	w := &modelTx{}
	err := be.Update(func(tx backend.WriteTx) error {
		w.tx = tx
		return fn(w)
	})
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, o := range w.ops {
		if m.m[o.b] == nil {
			m.m[o.b] = map[string]string{}
		}
		if o.del {
			delete(m.m[o.b], o.k)
		} else {
			m.m[o.b][o.k] = o.v
		}
	}
	return nil
}

type modelOp struct {
	b    backend.Bucket
	k, v string
	del  bool
}

type modelTx struct {
	tx  backend.WriteTx
	ops []modelOp
}

func (w *modelTx) put(b backend.Bucket, k, v string) error {
	w.ops = append(w.ops, modelOp{b: b, k: k, v: v})
	return w.tx.Put(b, []byte(k), []byte(v))
}

func (w *modelTx) del(b backend.Bucket, k string) error {
	w.ops = append(w.ops, modelOp{b: b, k: k, del: true})
	return w.tx.Delete(b, []byte(k))
}

// check compares every bucket the model knows, and the standard ones, with
// what be holds.
func (m *model) check(t *testing.T, be backend.Backend, when string) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	buckets := slices.Clone(backend.AllBuckets)
	for b := range m.m {
		if !slices.Contains(buckets, b) {
			buckets = append(buckets, b)
		}
	}
	rtx := view(t, be)
	defer rtx.Release()
	for _, b := range buckets {
		got := map[string]string{}
		if err := rtx.Range(b, nil, nil, 0, func(k, v []byte) bool {
			got[string(k)] = string(v)
			return true
		}); err != nil {
			t.Fatalf("%s: Range %s: %v", when, b, err)
		}
		want := m.m[b]
		bad := 0
		for k, v := range want {
			if g, ok := got[k]; !ok || g != v {
				if bad++; bad <= 5 {
					t.Errorf("%s: bucket %s key %q = %.20q (present %v), want %.20q", when, b, k, g, ok, v)
				}
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				if bad++; bad <= 5 {
					t.Errorf("%s: bucket %s has key %q, want it absent", when, b, k)
				}
			}
		}
		if bad > 0 {
			t.Fatalf("%s: bucket %s: %d keys differ (%d present, %d expected)", when, b, bad, len(got), len(want))
		}
	}
}

// fillModel writes n keys of valueLen bytes to backend.Key, 500 per Update.
func fillModel(t *testing.T, m *model, be backend.Backend, n, valueLen int) {
	t.Helper()
	value := string(bytes.Repeat([]byte{'v'}, valueLen))
	for lo := 0; lo < n; lo += 500 {
		if err := m.update(be, func(w *modelTx) error {
			for i := lo; i < min(lo+500, n); i++ {
				if err := w.put(backend.Key, fmt.Sprintf("k%08d", i), value); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// writer runs Updates on its own keys (bucket name) until stop is closed:
// overwrites of a few hot keys, new keys, and deletes of some of them.
func writer(m *model, be backend.Backend, name backend.Bucket, stop <-chan struct{}, errs chan<- error) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		err := m.update(be, func(w *modelTx) error {
			if err := w.put(name, fmt.Sprintf("hot%d", i%3), fmt.Sprintf("v%d", i)); err != nil {
				return err
			}
			if err := w.put(name, fmt.Sprintf("n%06d", i), "x"); err != nil {
				return err
			}
			if i%2 == 1 {
				return w.del(name, fmt.Sprintf("n%06d", i-1))
			}
			return nil
		})
		if err != nil {
			errs <- fmt.Errorf("writer %s: %w", name, err)
			return
		}
	}
}

// duringCopy makes, from inside the Defrag, the writes the journal must
// carry over: deletes and overwrites of copied keys, a new bucket, and two
// Updates that commit nothing.
func duringCopy(m *model, be backend.Backend) error {
	if err := m.update(be, func(w *modelTx) error {
		for i := 0; i < 1000; i++ {
			if err := w.del(backend.Key, fmt.Sprintf("k%08d", i)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	for i := 0; i < 50; i++ {
		if err := m.update(be, func(w *modelTx) error {
			if err := w.put(backend.Key, "k00001000", fmt.Sprintf("over%d", i)); err != nil {
				return err
			}
			// A key put and deleted again within the copy.
			if err := w.put(backend.Meta, "transient", "t"); err != nil {
				return err
			}
			return w.put("newbucket", fmt.Sprintf("b%03d", i), fmt.Sprint(i))
		}); err != nil {
			return err
		}
	}
	if err := m.update(be, func(w *modelTx) error { return w.del(backend.Meta, "transient") }); err != nil {
		return err
	}
	rollback := errors.New("rolled back")
	if err := m.update(be, func(w *modelTx) error {
		if err := w.put(backend.Key, "rolledback", "x"); err != nil {
			return err
		}
		if err := w.del(backend.Key, "k00001001"); err != nil {
			return err
		}
		return rollback
	}); !errors.Is(err, rollback) {
		return fmt.Errorf("rolled back Update returned %v", err)
	}
	if err := m.update(be, func(w *modelTx) error {
		if err := w.put("failbucket", "failed", "x"); err != nil {
			return err
		}
		_ = w.tx.Put(backend.Key, nil, []byte("empty key fails"))
		return nil
	}); err == nil {
		return errors.New("Update with a failed Put returned nil")
	}
	return nil
}

// defragWritesDuringCopy runs defrags Defrags, one after the other, beside
// writers and with writes from inside each copy.
func (s suite) defragWritesDuringCopy(t *testing.T, h DefragHooks, defrags int) {
	dir := t.TempDir()
	be := s.open(t, dir)
	m := newModel()
	// 24 MiB: the copy takes a while, and runs beside the writers.
	fillModel(t, m, be, 24000, 1024)
	stop := make(chan struct{})
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for _, name := range []backend.Bucket{"writer1", "writer2"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			writer(m, be, name, stop, errs)
		}()
	}
	var copied int
	h.SetHook(func(stage string) error {
		if stage == "copy" {
			copied++
			return duringCopy(m, be)
		}
		return nil
	})
	for i := 0; i < defrags; i++ {
		if err := be.Defrag(); err != nil {
			t.Fatalf("Defrag %d: %v", i, err)
		}
	}
	h.SetHook(nil)
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if copied != defrags {
		t.Fatalf("hook saw %d copies, want %d", copied, defrags)
	}
	m.check(t, be, "after Defrag")
	// Writes after the swap land in the new store.
	if err := m.update(be, func(w *modelTx) error { return w.put(backend.Key, "after", "1") }); err != nil {
		t.Fatal(err)
	}
	if err := be.Close(); err != nil {
		t.Fatal(err)
	}
	be = s.openAt(t, dir)
	m.check(t, be, "after reopen")
}

// await waits for ch or fails the test after guard.
func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(guard):
		t.Fatalf("%s: still blocked after %v", what, guard)
		panic("unreachable")
	}
}

func (s suite) defragWritersNotBlocked(t *testing.T, h DefragHooks) {
	be := s.openNew(t)
	m := newModel()
	fillModel(t, m, be, 2000, 1024)
	reached := make(chan string)
	release := make(chan struct{})
	h.SetHook(func(stage string) error {
		if stage == "copy" || stage == "replay" {
			reached <- stage
			<-release
		}
		return nil
	})
	defer h.SetHook(nil)
	done := make(chan error, 1)
	go func() { done <- be.Defrag() }()
	for _, stage := range []string{"copy", "replay"} {
		if got := await(t, reached, "Defrag reaching its "+stage+" stage"); got != stage {
			t.Fatalf("Defrag at stage %q, want %q", got, stage)
		}
		// Defrag is parked inside its copy (or right after it): Updates
		// must commit now, or they wait for the copy.
		wrote := make(chan error, 1)
		go func() {
			for i := 0; i < 100; i++ {
				if err := m.update(be, func(w *modelTx) error {
					if err := w.put(backend.Key, fmt.Sprintf("%s%03d", stage, i), "x"); err != nil {
						return err
					}
					return w.del(backend.Key, fmt.Sprintf("k%08d", i))
				}); err != nil {
					wrote <- err
					return
				}
			}
			wrote <- nil
		}()
		if err := await(t, wrote, "Updates during Defrag's "+stage); err != nil {
			t.Fatal(err)
		}
		release <- struct{}{}
	}
	if err := await(t, done, "Defrag"); err != nil {
		t.Fatalf("Defrag: %v", err)
	}
	m.check(t, be, "after Defrag")
}

func (s suite) defragFullJournal(t *testing.T, h DefragHooks) {
	restore := h.SetJournalLimit(8 << 10)
	defer restore()
	be := s.openNew(t)
	m := newModel()
	fillModel(t, m, be, 2000, 1024)
	reached := make(chan struct{})
	release := make(chan struct{})
	h.SetHook(func(stage string) error {
		if stage == "copy" {
			close(reached)
			<-release
		}
		return nil
	})
	defer h.SetHook(nil)
	done := make(chan error, 1)
	go func() { done <- be.Defrag() }()
	await(t, reached, "Defrag reaching its copy")
	const writes = 64 // of 1 KiB: 64 KiB, eight times the limit
	wrote := make(chan error, 1)
	go func() {
		for i := 0; i < writes; i++ {
			if err := m.update(be, func(w *modelTx) error {
				return w.put(backend.Key, fmt.Sprintf("full%03d", i), string(bytes.Repeat([]byte{'f'}, 1024)))
			}); err != nil {
				wrote <- err
				return
			}
		}
		wrote <- nil
	}()
	// The journal fills long before the writes end; the writer then waits
	// for the copy, which waits for release.
	count := func() int {
		m.mu.Lock()
		defer m.mu.Unlock()
		c := 0
		for k := range m.m[backend.Key] {
			if len(k) == 7 && k[:4] == "full" {
				c++
			}
		}
		return c
	}
	deadline := time.Now().Add(guard)
	for last := -1; ; {
		c := count()
		if c == last && c >= 8 {
			break // made progress, then stopped
		}
		if c == writes {
			t.Fatalf("all %d writes of 1 KiB committed during the copy with an 8 KiB journal limit", writes)
		}
		if time.Now().After(deadline) {
			t.Fatalf("writer stuck at %d writes", c)
		}
		last = c
		time.Sleep(50 * time.Millisecond)
	}
	if c := count(); c > writes/2 {
		t.Fatalf("%d writes of 1 KiB committed during the copy with an 8 KiB journal limit", c)
	}
	select {
	case err := <-wrote:
		t.Fatalf("writer ended during the copy: %v", err)
	default:
	}
	close(release)
	if err := await(t, wrote, "writer after the copy"); err != nil {
		t.Fatal(err)
	}
	if err := await(t, done, "Defrag"); err != nil {
		t.Fatalf("Defrag: %v", err)
	}
	m.check(t, be, "after Defrag")
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func (s suite) defragFailure(t *testing.T, h DefragHooks) {
	dir := t.TempDir()
	be := s.open(t, dir)
	m := newModel()
	fillModel(t, m, be, 2000, 1024)
	before := dirNames(t, dir)
	injected := errors.New("injected failure")
	for _, failAt := range []string{"copy", "replay", "swap"} {
		h.SetHook(func(stage string) error {
			if stage == "copy" {
				if err := duringCopy(m, be); err != nil {
					return err
				}
			}
			if stage == failAt {
				return injected
			}
			return nil
		})
		if err := be.Defrag(); !errors.Is(err, injected) {
			t.Fatalf("Defrag failing at %s returned %v, want the injected error", failAt, err)
		}
		h.SetHook(nil)
		m.check(t, be, "after Defrag failed at "+failAt)
		if after := dirNames(t, dir); !slices.Equal(after, before) {
			t.Fatalf("files after Defrag failed at %s: %v, before: %v", failAt, after, before)
		}
		if err := m.update(be, func(w *modelTx) error { return w.put(backend.Key, "after-"+failAt, "1") }); err != nil {
			t.Fatal(err)
		}
	}
	// A Defrag that succeeds afterwards starts from a clean journal.
	if err := be.Defrag(); err != nil {
		t.Fatal(err)
	}
	m.check(t, be, "after a good Defrag")
	if err := be.Close(); err != nil {
		t.Fatal(err)
	}
	be = s.openAt(t, dir)
	m.check(t, be, "after reopen")
}

func (s suite) defragConcurrent(t *testing.T, h DefragHooks) {
	dir := t.TempDir()
	be := s.open(t, dir)
	m := newModel()
	fillModel(t, m, be, 2000, 1024)
	// Two at once: both succeed, one after the other.
	errs := make(chan error, 2)
	for i := 0; i < 2; i++ {
		go func() { errs <- be.Defrag() }()
	}
	for i := 0; i < 2; i++ {
		if err := await(t, errs, "concurrent Defrag"); err != nil {
			t.Fatalf("concurrent Defrag: %v", err)
		}
	}
	m.check(t, be, "after two concurrent Defrags")
	// Close while a Defrag copies: Close waits for it.
	reached := make(chan struct{})
	release := make(chan struct{})
	h.SetHook(func(stage string) error {
		if stage == "copy" {
			close(reached)
			<-release
		}
		return nil
	})
	defer h.SetHook(nil)
	go func() { errs <- be.Defrag() }()
	await(t, reached, "Defrag reaching its copy")
	closed := make(chan error, 1)
	go func() { closed <- be.Close() }()
	// Close cannot have returned: the Defrag it waits for is parked.
	select {
	case err := <-closed:
		t.Fatalf("Close returned %v while a Defrag was running", err)
	default:
	}
	close(release)
	if err := await(t, errs, "Defrag during Close"); err != nil {
		t.Fatalf("Defrag during Close: %v", err)
	}
	if err := await(t, closed, "Close after Defrag"); err != nil {
		t.Fatalf("Close: %v", err)
	}
	be = s.openAt(t, dir)
	m.check(t, be, "after reopen")
}
