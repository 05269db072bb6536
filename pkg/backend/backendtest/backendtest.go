// Package backendtest is the conformance suite every storage engine passes,
// and the benchmarks that compare them. Engines call Run and Bench from their
// own tests.
package backendtest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvd-dev/kvd/pkg/backend"
)

// OpenFunc opens the engine under test on dir. Opening the same dir again
// after Close must find the data committed before.
type OpenFunc func(t *testing.T, dir string) backend.Backend

// Run runs the conformance suite against the engine that open opens.
func Run(t *testing.T, open OpenFunc) {
	s := suite{open: open}
	tests := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"GetPutDelete", s.getPutDelete},
		{"EmptyValue", s.emptyValue},
		{"InvalidWrites", s.invalidWrites},
		{"RangeOrder", s.rangeOrder},
		{"RangeBounds", s.rangeBounds},
		{"BucketIsolation", s.bucketIsolation},
		{"SnapshotIsolation", s.snapshotIsolation},
		{"ReadYourWrites", s.readYourWrites},
		{"Rollback", s.rollback},
		{"FailedWriteCommitsNothing", s.failedWriteCommitsNothing},
		{"ConcurrentReadersAndWriters", s.concurrent},
		{"ReadersSeeEveryFinishedCommit", s.freshReads},
		{"Reopen", s.reopen},
		{"ByteSlices", s.byteSlices},
		{"OwnedValues", s.ownedValues},
		{"Snapshot", s.snapshot},
		{"Size", s.size},
		{"Defrag", s.defrag},
		{"TxDone", s.txDone},
		{"Closed", s.closed},
	}
	for _, tc := range tests {
		t.Run(tc.name, tc.fn)
	}
}

type suite struct {
	open OpenFunc
}

// openAt opens dir and closes the backend when the test ends.
func (s suite) openAt(t *testing.T, dir string) backend.Backend {
	t.Helper()
	be := s.open(t, dir)
	t.Cleanup(func() {
		if err := be.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return be
}

func (s suite) openNew(t *testing.T) backend.Backend {
	t.Helper()
	return s.openAt(t, t.TempDir())
}

// kv is one key-value pair; a nil value in a want list means absent.
type kv struct{ k, v string }

func put(t *testing.T, be backend.Backend, b backend.Bucket, pairs ...kv) {
	t.Helper()
	err := be.Update(func(tx backend.WriteTx) error {
		for _, p := range pairs {
			if err := tx.Put(b, []byte(p.k), []byte(p.v)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Update put: %v", err)
	}
}

func del(t *testing.T, be backend.Backend, b backend.Bucket, keys ...string) {
	t.Helper()
	err := be.Update(func(tx backend.WriteTx) error {
		for _, k := range keys {
			if err := tx.Delete(b, []byte(k)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Update delete: %v", err)
	}
}

func view(t *testing.T, be backend.Backend) backend.ReadTx {
	t.Helper()
	rtx, err := be.ReadTx()
	if err != nil {
		t.Fatalf("ReadTx: %v", err)
	}
	t.Cleanup(rtx.Release)
	return rtx
}

// get returns the value as a string and whether it was found.
func get(t *testing.T, rtx backend.ReadTx, b backend.Bucket, k string) (string, bool) {
	t.Helper()
	v, ok, err := rtx.Get(b, []byte(k))
	if err != nil {
		t.Fatalf("Get %s/%q: %v", b, k, err)
	}
	if !ok && v != nil {
		t.Fatalf("Get %s/%q: not found but value %q", b, k, v)
	}
	return string(v), ok
}

func wantGet(t *testing.T, rtx backend.ReadTx, b backend.Bucket, k, want string, wantOK bool) {
	t.Helper()
	v, ok := get(t, rtx, b, k)
	if ok != wantOK || v != want {
		t.Fatalf("Get %s/%q = %q, %v; want %q, %v", b, k, v, ok, want, wantOK)
	}
}

func wantValue(t *testing.T, be backend.Backend, b backend.Bucket, k, want string, wantOK bool) {
	t.Helper()
	rtx, err := be.ReadTx()
	if err != nil {
		t.Fatalf("ReadTx: %v", err)
	}
	defer rtx.Release()
	wantGet(t, rtx, b, k, want, wantOK)
}

func rangeAll(t *testing.T, rtx backend.ReadTx, b backend.Bucket, start, end []byte, limit int) []kv {
	t.Helper()
	var got []kv
	err := rtx.Range(b, start, end, limit, func(k, v []byte) bool {
		got = append(got, kv{string(k), string(v)})
		return true
	})
	if err != nil {
		t.Fatalf("Range %s [%q, %q) limit %d: %v", b, start, end, limit, err)
	}
	return got
}

func wantRange(t *testing.T, got, want []kv) {
	t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Range got %q\nwant %q", got, want)
	}
}

func (s suite) getPutDelete(t *testing.T) {
	be := s.openNew(t)
	wantValue(t, be, backend.Key, "a", "", false)
	put(t, be, backend.Key, kv{"a", "1"}, kv{"b", "2"})
	wantValue(t, be, backend.Key, "a", "1", true)
	wantValue(t, be, backend.Key, "b", "2", true)
	put(t, be, backend.Key, kv{"a", "3"})
	wantValue(t, be, backend.Key, "a", "3", true)
	del(t, be, backend.Key, "a", "never-written")
	wantValue(t, be, backend.Key, "a", "", false)
	wantValue(t, be, backend.Key, "b", "2", true)
	// A bucket nobody wrote to reads as empty; writing creates it.
	rtx := view(t, be)
	wantGet(t, rtx, "fresh", "a", "", false)
	wantRange(t, rangeAll(t, rtx, "fresh", nil, nil, 0), nil)
	rtx.Release()
	put(t, be, "fresh", kv{"a", "x"})
	wantValue(t, be, "fresh", "a", "x", true)
	if err := be.Sync(); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}

// ownedValues: an engine whose read transactions claim OwnedValues hands
// out values that outlive the view and that no later write, nor the
// caller's own change, reaches.
func (s suite) ownedValues(t *testing.T) {
	be := s.openNew(t)
	put(t, be, backend.Key, kv{"a", "before"})
	rtx := view(t, be)
	if _, ok := rtx.(backend.OwnedValues); !ok {
		rtx.Release()
		t.Skip("this engine's values are valid until Release only")
	}
	v, ok, err := rtx.Get(backend.Key, []byte("a"))
	if err != nil || !ok {
		t.Fatalf("Get: %q, %v, %v", v, ok, err)
	}
	rtx.Release()
	put(t, be, backend.Key, kv{"a", "after!"})
	for i := 0; i < 100; i++ {
		put(t, be, backend.Key, kv{fmt.Sprintf("fill%03d", i), "xxxxxxxxxxxxxxxx"})
	}
	if string(v) != "before" {
		t.Fatalf("value after Release and later writes: %q, want %q", v, "before")
	}
	copy(v, "BEFORE")
	wantValue(t, be, backend.Key, "a", "after!", true)
	rtx = view(t, be)
	defer rtx.Release()
	w, _, _ := rtx.Get(backend.Key, []byte("a"))
	copy(w, "CHANGE")
	wantGet(t, rtx, backend.Key, "a", "after!", true)
}

func (s suite) emptyValue(t *testing.T) {
	be := s.openNew(t)
	err := be.Update(func(tx backend.WriteTx) error {
		if err := tx.Put(backend.Meta, []byte("nil"), nil); err != nil {
			return err
		}
		return tx.Put(backend.Meta, []byte("empty"), []byte{})
	})
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	rtx := view(t, be)
	for _, k := range []string{"nil", "empty"} {
		v, ok, err := rtx.Get(backend.Meta, []byte(k))
		if err != nil || !ok || v == nil || len(v) != 0 {
			t.Fatalf("Get %q = %q (nil %v), %v, %v; want empty non-nil, true", k, v, v == nil, ok, err)
		}
	}
	wantRange(t, rangeAll(t, rtx, backend.Meta, nil, nil, 0), []kv{{"empty", ""}, {"nil", ""}})
}

func (s suite) invalidWrites(t *testing.T) {
	be := s.openNew(t)
	for _, tc := range []struct {
		name string
		b    backend.Bucket
		k    []byte
	}{
		{"empty key", backend.Key, nil},
		{"empty bucket", "", []byte("k")},
		{"long bucket", backend.Bucket(bytes.Repeat([]byte("b"), backend.MaxBucketLen+1)), []byte("k")},
	} {
		err := be.Update(func(tx backend.WriteTx) error { return tx.Put(tc.b, tc.k, []byte("v")) })
		if err == nil {
			t.Errorf("%s: Put succeeded", tc.name)
		}
	}
	rtx := view(t, be)
	if _, _, err := rtx.Get("", []byte("k")); err == nil {
		t.Errorf("Get in empty bucket name succeeded")
	}
}

func (s suite) rangeOrder(t *testing.T) {
	be := s.openNew(t)
	rng := rand.New(rand.NewSource(1))
	seen := map[string]bool{}
	var pairs []kv
	for len(pairs) < 300 {
		k := make([]byte, 1+rng.Intn(6))
		for i := range k {
			// Mostly 0x00, 0x01, 0xfe, 0xff: where signedness and prefix bugs show.
			k[i] = []byte{0x00, 0x01, 'a', 0x7f, 0x80, 0xfe, 0xff}[rng.Intn(7)]
		}
		if seen[string(k)] {
			continue
		}
		seen[string(k)] = true
		pairs = append(pairs, kv{string(k), fmt.Sprint(len(pairs))})
	}
	put(t, be, backend.Key, pairs...)
	sort.Slice(pairs, func(i, j int) bool { return pairs[i].k < pairs[j].k })
	rtx := view(t, be)
	wantRange(t, rangeAll(t, rtx, backend.Key, nil, nil, 0), pairs)
	for i := 0; i < 50; i++ {
		a, b := rng.Intn(len(pairs)), rng.Intn(len(pairs)+1)
		if a > b {
			a, b = b, a
		}
		var end []byte
		if b < len(pairs) {
			end = []byte(pairs[b].k)
		} else {
			b = len(pairs)
		}
		wantRange(t, rangeAll(t, rtx, backend.Key, []byte(pairs[a].k), end, 0), pairs[a:b])
	}
}

func (s suite) rangeBounds(t *testing.T) {
	be := s.openNew(t)
	put(t, be, backend.Key, kv{"a", "1"}, kv{"b", "2"}, kv{"c", "3"}, kv{"d", "4"}, kv{"e", "5"})
	rtx := view(t, be)
	all := []kv{{"a", "1"}, {"b", "2"}, {"c", "3"}, {"d", "4"}, {"e", "5"}}
	for _, tc := range []struct {
		name       string
		start, end string // "-" is nil
		limit      int
		want       []kv
	}{
		{"all", "-", "-", 0, all},
		{"start inclusive end exclusive", "b", "d", 0, all[1:3]},
		{"nil end to bucket end", "c", "-", 0, all[2:]},
		{"start between keys", "bb", "-", 0, all[2:]},
		{"end between keys", "-", "cc", 0, all[:3]},
		{"limit", "b", "-", 2, all[1:3]},
		{"limit above count", "-", "-", 10, all},
		{"negative limit is none", "-", "-", -1, all},
		{"empty interval", "c", "c", 0, nil},
		{"end before start", "d", "b", 0, nil},
		{"start past last", "f", "-", 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var start, end []byte
			if tc.start != "-" {
				start = []byte(tc.start)
			}
			if tc.end != "-" {
				end = []byte(tc.end)
			}
			wantRange(t, rangeAll(t, rtx, backend.Key, start, end, tc.limit), tc.want)
		})
	}
	var got []string
	err := rtx.Range(backend.Key, nil, nil, 0, func(k, v []byte) bool {
		got = append(got, string(k))
		return len(got) < 2
	})
	if err != nil || fmt.Sprint(got) != "[a b]" {
		t.Fatalf("early stop: got %q, %v; want [a b]", got, err)
	}
	// Get inside a Range callback is allowed.
	err = rtx.Range(backend.Key, nil, nil, 0, func(k, v []byte) bool {
		got2, ok, err := rtx.Get(backend.Key, k)
		if err != nil || !ok || !bytes.Equal(got2, v) {
			t.Errorf("Get %q inside Range = %q, %v, %v; want %q", k, got2, ok, err, v)
		}
		return true
	})
	if err != nil {
		t.Fatalf("Range with nested Get: %v", err)
	}
}

func (s suite) bucketIsolation(t *testing.T) {
	be := s.openNew(t)
	// Names that are prefixes of one another, and pairs whose naive
	// concatenation bucket+key would collide ("ke"+"yx" == "key"+"x").
	buckets := append([]backend.Bucket{"keyx", "ke", "k", "kex"}, backend.AllBuckets...)
	for _, b := range buckets {
		put(t, be, b, kv{"x", "x in " + string(b)}, kv{"yx", "yx in " + string(b)})
	}
	rtx := view(t, be)
	for _, b := range buckets {
		wantRange(t, rangeAll(t, rtx, b, nil, nil, 0), []kv{{"x", "x in " + string(b)}, {"yx", "yx in " + string(b)}})
		wantGet(t, rtx, b, "x", "x in "+string(b), true)
	}
	rtx.Release()
	del(t, be, "key", "x")
	rtx = view(t, be)
	wantGet(t, rtx, "key", "x", "", false)
	for _, b := range buckets {
		if b != "key" {
			wantGet(t, rtx, b, "x", "x in "+string(b), true)
		}
	}
	// A range to the end of "ke" must not run into "key" or "kex".
	wantRange(t, rangeAll(t, rtx, "ke", []byte("x"), nil, 0), []kv{{"x", "x in ke"}, {"yx", "yx in ke"}})
}

func (s suite) snapshotIsolation(t *testing.T) {
	be := s.openNew(t)
	put(t, be, backend.Key, kv{"a", "old"}, kv{"b", "old"})
	before := view(t, be)
	put(t, be, backend.Key, kv{"a", "new"}, kv{"c", "new"})
	del(t, be, backend.Key, "b")
	after := view(t, be)

	wantGet(t, before, backend.Key, "a", "old", true)
	wantGet(t, before, backend.Key, "b", "old", true)
	wantGet(t, before, backend.Key, "c", "", false)
	wantRange(t, rangeAll(t, before, backend.Key, nil, nil, 0), []kv{{"a", "old"}, {"b", "old"}})

	wantGet(t, after, backend.Key, "a", "new", true)
	wantGet(t, after, backend.Key, "b", "", false)
	wantRange(t, rangeAll(t, after, backend.Key, nil, nil, 0), []kv{{"a", "new"}, {"c", "new"}})
}

func (s suite) readYourWrites(t *testing.T) {
	be := s.openNew(t)
	put(t, be, backend.Key, kv{"a", "1"}, kv{"c", "3"}, kv{"e", "5"})
	err := be.Update(func(tx backend.WriteTx) error {
		if err := tx.Put(backend.Key, []byte("b"), []byte("2")); err != nil {
			return err
		}
		if err := tx.Put(backend.Key, []byte("c"), []byte("33")); err != nil {
			return err
		}
		if err := tx.Delete(backend.Key, []byte("e")); err != nil {
			return err
		}
		wantGet(t, tx, backend.Key, "b", "2", true)
		wantGet(t, tx, backend.Key, "c", "33", true)
		wantGet(t, tx, backend.Key, "e", "", false)
		wantRange(t, rangeAll(t, tx, backend.Key, nil, nil, 0), []kv{{"a", "1"}, {"b", "2"}, {"c", "33"}})
		wantRange(t, rangeAll(t, tx, backend.Key, []byte("b"), nil, 1), []kv{{"b", "2"}})
		// Outside the tx nothing is visible yet.
		wantValue(t, be, backend.Key, "b", "", false)
		return nil
	})
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	wantValue(t, be, backend.Key, "b", "2", true)
	wantValue(t, be, backend.Key, "e", "", false)
}

func (s suite) rollback(t *testing.T) {
	be := s.openNew(t)
	put(t, be, backend.Key, kv{"a", "1"})
	errBoom := errors.New("boom")
	err := be.Update(func(tx backend.WriteTx) error {
		for i := 0; i < 100; i++ {
			if err := tx.Put(backend.Key, []byte(fmt.Sprintf("k%03d", i)), []byte("v")); err != nil {
				return err
			}
		}
		if err := tx.Put(backend.Meta, []byte("m"), []byte("v")); err != nil {
			return err
		}
		if err := tx.Delete(backend.Key, []byte("a")); err != nil {
			return err
		}
		return errBoom
	})
	if !errors.Is(err, errBoom) {
		t.Fatalf("Update = %v, want %v", err, errBoom)
	}
	rtx := view(t, be)
	wantRange(t, rangeAll(t, rtx, backend.Key, nil, nil, 0), []kv{{"a", "1"}})
	wantGet(t, rtx, backend.Meta, "m", "", false)
	rtx.Release()
	// The backend still takes writes after a rollback.
	put(t, be, backend.Key, kv{"b", "2"})
	wantValue(t, be, backend.Key, "b", "2", true)
}

func (s suite) failedWriteCommitsNothing(t *testing.T) {
	be := s.openNew(t)
	err := be.Update(func(tx backend.WriteTx) error {
		if err := tx.Put(backend.Key, []byte("good"), []byte("v")); err != nil {
			return err
		}
		_ = tx.Put(backend.Key, nil, []byte("v")) // fails: empty key
		return nil                                // and fn ignores it
	})
	if err == nil {
		t.Fatalf("Update with a failed Put returned nil")
	}
	wantValue(t, be, backend.Key, "good", "", false)
}

// concurrent runs readers beside writers and Defrag; every committed state
// keeps the invariant that keys a and b hold the same counter, and a reader
// never sees the counter go back.
func (s suite) concurrent(t *testing.T) {
	be := s.openNew(t)
	const writes = 100
	enc := func(n int) []byte { return binary.BigEndian.AppendUint64(nil, uint64(n)) }
	put(t, be, backend.Key, kv{"a", string(enc(0))}, kv{"b", string(enc(0))})

	var wg sync.WaitGroup
	done := make(chan struct{})
	errs := make(chan error, 16)
	var mu sync.Mutex
	counter := 0
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < writes/2; i++ {
				err := be.Update(func(tx backend.WriteTx) error {
					v, ok, err := tx.Get(backend.Key, []byte("a"))
					if err != nil || !ok {
						return fmt.Errorf("get a in update: %v %v", ok, err)
					}
					n := enc(int(binary.BigEndian.Uint64(v)) + 1)
					if err := tx.Put(backend.Key, []byte("a"), n); err != nil {
						return err
					}
					if err := tx.Put(backend.Key, []byte(fmt.Sprintf("log%08d", binary.BigEndian.Uint64(n))), n); err != nil {
						return err
					}
					return tx.Put(backend.Key, []byte("b"), n)
				})
				if err != nil {
					errs <- fmt.Errorf("writer: %w", err)
					return
				}
				mu.Lock()
				counter++
				mu.Unlock()
			}
		}()
	}
	var rg sync.WaitGroup
	for r := 0; r < 4; r++ {
		rg.Add(1)
		go func() {
			defer rg.Done()
			last := uint64(0)
			for {
				select {
				case <-done:
					return
				default:
				}
				rtx, err := be.ReadTx()
				if err != nil {
					errs <- fmt.Errorf("reader: %w", err)
					return
				}
				a, _, errA := rtx.Get(backend.Key, []byte("a"))
				b, _, errB := rtx.Get(backend.Key, []byte("b"))
				logs := 0
				errR := rtx.Range(backend.Key, []byte("log"), []byte("loh"), 0, func(k, v []byte) bool {
					logs++
					return true
				})
				if errA != nil || errB != nil || errR != nil {
					rtx.Release()
					errs <- fmt.Errorf("reader: %v %v %v", errA, errB, errR)
					return
				}
				na, nb := binary.BigEndian.Uint64(a), binary.BigEndian.Uint64(b)
				rtx.Release()
				if na != nb || uint64(logs) != na || na < last {
					errs <- fmt.Errorf("reader saw a=%d b=%d logs=%d after %d", na, nb, logs, last)
					return
				}
				last = na
			}
		}()
	}
	// Defrag while they run: it may block writers, never break a reader.
	for i := 0; i < 3; i++ {
		if err := be.Defrag(); err != nil {
			t.Errorf("Defrag under load: %v", err)
		}
	}
	wg.Wait()
	close(done)
	rg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	wantValue(t, be, backend.Key, "a", string(enc(writes)), true)
}

// freshReads: a ReadTx opened after an Update returned sees that Update,
// while other readers hold views from before it and the writes grow the
// store (bolt remaps its file, waiting for open read transactions; engines
// may share a read view between commits, and must never hand out one from
// before a finished commit or keep one that stalls a writer).
func (s suite) freshReads(t *testing.T) {
	be := s.open(t, t.TempDir())
	var wedged atomic.Bool // Close would wait for a stuck writer
	t.Cleanup(func() {
		if wedged.Load() {
			return
		}
		if err := be.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	enc := func(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }
	put(t, be, backend.Key, kv{"n", string(enc(0))})
	var committed atomic.Uint64 // the last Update that returned
	stop := make(chan struct{})
	errs := make(chan error, 8)
	var rg sync.WaitGroup
	for r := 0; r < 4; r++ {
		rg.Add(1)
		go func() {
			defer rg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				want := committed.Load()
				rtx, err := be.ReadTx()
				if err != nil {
					errs <- fmt.Errorf("reader: %w", err)
					return
				}
				v, ok, err := rtx.Get(backend.Key, []byte("n"))
				if i%16 == 0 {
					time.Sleep(time.Millisecond) // hold the view across a commit now and then
				}
				var got uint64
				if ok {
					got = binary.BigEndian.Uint64(v)
				}
				rtx.Release()
				if err != nil || !ok || got < want {
					errs <- fmt.Errorf("reader opened a view after commit %d returned and saw n=%d (ok %v, err %v)", want, got, ok, err)
					return
				}
			}
		}()
	}
	big := make([]byte, 32<<10)
	written := make(chan error, 1)
	go func() {
		for i := uint64(1); i <= 200; i++ {
			err := be.Update(func(tx backend.WriteTx) error {
				for j := 0; j < 8; j++ { // 256 KiB a commit: the file grows as it goes
					if err := tx.Put(backend.Key, []byte(fmt.Sprintf("big%05d-%d", i, j)), big); err != nil {
						return err
					}
				}
				return tx.Put(backend.Key, []byte("n"), enc(i))
			})
			if err != nil {
				written <- err
				return
			}
			committed.Store(i)
		}
		written <- nil
	}()
	select {
	case err := <-written:
		if err != nil {
			t.Errorf("writer: %v", err)
		}
	case <-time.After(2 * time.Minute):
		wedged.Store(true)
		t.Fatal("200 commits did not finish within 2 minutes beside 4 readers: a writer waits for a read view nobody releases")
	}
	close(stop)
	rg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func (s suite) reopen(t *testing.T) {
	dir := t.TempDir()
	be := s.open(t, dir)
	put(t, be, backend.Key, kv{"a", "1"})
	put(t, be, "custom", kv{"c", "3"})
	put(t, be, backend.Meta, kv{"m", "2"})
	del(t, be, backend.Key, "gone")
	if err := be.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	be = s.openAt(t, dir)
	rtx := view(t, be)
	wantGet(t, rtx, backend.Key, "a", "1", true)
	wantGet(t, rtx, backend.Meta, "m", "2", true)
	wantGet(t, rtx, "custom", "c", "3", true)
	rtx.Release()
	put(t, be, backend.Key, kv{"b", "2"})
	wantValue(t, be, backend.Key, "b", "2", true)
}

func (s suite) byteSlices(t *testing.T) {
	be := s.openNew(t)
	key := []byte("key1")
	val := []byte("value1")
	err := be.Update(func(tx backend.WriteTx) error {
		if err := tx.Put(backend.Key, key, val); err != nil {
			return err
		}
		// Reusing the buffers after Put must not change what was put.
		copy(key, "key2")
		copy(val, "value2")
		if err := tx.Put(backend.Key, key, val); err != nil {
			return err
		}
		copy(key, "XXXX")
		copy(val, "XXXXXX")
		return nil
	})
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	rtx := view(t, be)
	wantRange(t, rangeAll(t, rtx, backend.Key, nil, nil, 0), []kv{{"key1", "value1"}, {"key2", "value2"}})
	v, _, _ := rtx.Get(backend.Key, []byte("key1"))
	kept := bytes.Clone(v)
	rtx.Release()
	put(t, be, backend.Key, kv{"key1", "other!"})
	if string(kept) != "value1" {
		t.Fatalf("copied value changed to %q", kept)
	}
}

func (s suite) snapshot(t *testing.T) {
	be := s.openNew(t)
	put(t, be, backend.Key, kv{"a", "1"}, kv{"b", "2"})
	var buf bytes.Buffer
	n, err := be.Snapshot(&buf)
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	if n <= 0 || n != int64(buf.Len()) {
		t.Fatalf("Snapshot reported %d bytes, wrote %d", n, buf.Len())
	}
}

func (s suite) size(t *testing.T) {
	be := s.openNew(t)
	var pairs []kv
	for i := 0; i < 1000; i++ {
		pairs = append(pairs, kv{fmt.Sprintf("k%05d", i), string(bytes.Repeat([]byte{'v'}, 100))})
	}
	put(t, be, backend.Key, pairs...)
	size, inUse := be.Size(), be.SizeInUse()
	if size <= 0 || inUse <= 0 || inUse > size {
		t.Fatalf("Size %d SizeInUse %d; want 0 < SizeInUse <= Size", size, inUse)
	}
}

func (s suite) defrag(t *testing.T) {
	dir := t.TempDir()
	be := s.open(t, dir)
	var pairs []kv
	for i := 0; i < 2000; i++ {
		pairs = append(pairs, kv{fmt.Sprintf("k%05d", i), string(bytes.Repeat([]byte{byte('a' + i%26)}, 200))})
	}
	put(t, be, backend.Key, pairs...)
	put(t, be, backend.Meta, kv{"m", "1"})
	var gone []string
	for i := 0; i < len(pairs); i += 2 {
		gone = append(gone, pairs[i].k)
	}
	del(t, be, backend.Key, gone...)
	var live []kv
	for i := 1; i < len(pairs); i += 2 {
		live = append(live, pairs[i])
	}
	before, err := be.ReadTx()
	if err != nil {
		t.Fatalf("ReadTx: %v", err)
	}
	if err := be.Defrag(); err != nil {
		before.Release()
		t.Fatalf("Defrag: %v", err)
	}
	// A view opened before Defrag still reads its snapshot.
	wantRange(t, rangeAll(t, before, backend.Key, nil, nil, 0), live)
	before.Release()
	rtx := view(t, be)
	wantRange(t, rangeAll(t, rtx, backend.Key, nil, nil, 0), live)
	wantGet(t, rtx, backend.Meta, "m", "1", true)
	rtx.Release()
	put(t, be, backend.Key, kv{"after", "defrag"})
	if err := be.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	be = s.openAt(t, dir)
	rtx = view(t, be)
	wantRange(t, rangeAll(t, rtx, backend.Key, nil, nil, 0), append([]kv{{"after", "defrag"}}, live...))
}

func (s suite) txDone(t *testing.T) {
	be := s.openNew(t)
	put(t, be, backend.Key, kv{"a", "1"})
	rtx, err := be.ReadTx()
	if err != nil {
		t.Fatalf("ReadTx: %v", err)
	}
	rtx.Release()
	rtx.Release()
	if _, _, err := rtx.Get(backend.Key, []byte("a")); !errors.Is(err, backend.ErrTxDone) {
		t.Errorf("Get after Release = %v, want ErrTxDone", err)
	}
	if err := rtx.Range(backend.Key, nil, nil, 0, func(k, v []byte) bool { return true }); !errors.Is(err, backend.ErrTxDone) {
		t.Errorf("Range after Release = %v, want ErrTxDone", err)
	}
	var leaked backend.WriteTx
	if err := be.Update(func(tx backend.WriteTx) error { leaked = tx; tx.Release(); return nil }); err != nil {
		t.Fatalf("Update: %v", err)
	}
	if err := leaked.Put(backend.Key, []byte("b"), []byte("2")); !errors.Is(err, backend.ErrTxDone) {
		t.Errorf("Put after Update = %v, want ErrTxDone", err)
	}
	if _, _, err := leaked.Get(backend.Key, []byte("a")); !errors.Is(err, backend.ErrTxDone) {
		t.Errorf("Get after Update = %v, want ErrTxDone", err)
	}
}

func (s suite) closed(t *testing.T) {
	be := s.open(t, t.TempDir())
	if err := be.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := be.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := be.ReadTx(); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("ReadTx after Close = %v, want ErrClosed", err)
	}
	if err := be.Update(func(backend.WriteTx) error { return nil }); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("Update after Close = %v, want ErrClosed", err)
	}
	if _, err := be.Snapshot(&bytes.Buffer{}); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("Snapshot after Close = %v, want ErrClosed", err)
	}
	if err := be.Defrag(); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("Defrag after Close = %v, want ErrClosed", err)
	}
	if err := be.Sync(); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("Sync after Close = %v, want ErrClosed", err)
	}
}
