package badger_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/backend/backendtest"
	"github.com/kvd-dev/kvd/pkg/backend/badger"
)

// testOptions keeps memtables small: tests open many databases.
var testOptions = badger.Options{MaxUpdateBytes: 1 << 20}

func open(tb testing.TB, dir string, bo badger.Options) *badger.Backend {
	tb.Helper()
	be, err := badger.Open(backend.Options{Dir: dir}, bo)
	if err != nil {
		tb.Fatalf("open badger: %v", err)
	}
	return be
}

func TestConformance(t *testing.T) {
	backendtest.Run(t, func(t *testing.T, dir string) backend.Backend { return open(t, dir, testOptions) })
}

func BenchmarkBadger(b *testing.B) {
	backendtest.Bench(b, func(b *testing.B, dir string) backend.Backend { return open(b, dir, badger.Options{}) })
}

func putN(t *testing.T, be backend.Backend, b backend.Bucket, n, valueLen int) error {
	t.Helper()
	value := bytes.Repeat([]byte{'v'}, valueLen)
	return be.Update(func(tx backend.WriteTx) error {
		for i := 0; i < n; i++ {
			if err := tx.Put(b, []byte(fmt.Sprintf("k%08d", i)), value); err != nil {
				return err
			}
		}
		return nil
	})
}

func count(t *testing.T, be backend.Backend, b backend.Bucket) int {
	t.Helper()
	rtx, err := be.ReadTx()
	if err != nil {
		t.Fatal(err)
	}
	defer rtx.Release()
	n := 0
	if err := rtx.Range(b, nil, nil, 0, func(k, v []byte) bool { n++; return true }); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestUpdateTooLargeCommitsNothing(t *testing.T) {
	be := open(t, t.TempDir(), badger.Options{MaxUpdateBytes: 1 << 20})
	defer be.Close()
	// 900 writes of ~1 KiB fit in 1 MiB.
	if err := putN(t, be, backend.Key, 900, 1000); err != nil {
		t.Fatalf("Update within the limit: %v", err)
	}
	if err := putN(t, be, backend.Meta, 2000, 1000); !errors.Is(err, backend.ErrUpdateTooLarge) {
		t.Fatalf("Update over the limit = %v, want ErrUpdateTooLarge", err)
	}
	if n := count(t, be, backend.Meta); n != 0 {
		t.Fatalf("%d keys of a too-large Update are visible", n)
	}
	// Even when fn swallows the error, nothing commits.
	err := be.Update(func(tx backend.WriteTx) error {
		value := bytes.Repeat([]byte{'v'}, 1000)
		for i := 0; i < 2000; i++ {
			_ = tx.Put(backend.Lease, []byte(fmt.Sprintf("k%08d", i)), value)
		}
		return nil
	})
	if !errors.Is(err, backend.ErrUpdateTooLarge) {
		t.Fatalf("Update swallowing the error = %v, want ErrUpdateTooLarge", err)
	}
	if n := count(t, be, backend.Lease); n != 0 {
		t.Fatalf("%d keys of a too-large Update are visible", n)
	}
}

func TestMaxUpdateBytesFits(t *testing.T) {
	for _, tc := range []struct {
		name    string
		bo      badger.Options
		payload int
	}{
		{"4MiB", badger.Options{MaxUpdateBytes: 4 << 20}, 4<<20 - 128<<10},
		{"default 64MiB", badger.Options{}, 64<<20 - 1<<20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.bo.MaxUpdateBytes == 0 && (testing.Short() || raceEnabled) {
				t.Skip("moves 63 MiB; runs without -race and -short")
			}
			be := open(t, t.TempDir(), tc.bo)
			defer be.Close()
			// Values under ValueThreshold, so they count in full against the limit.
			const valueLen = 16 << 10
			n := tc.payload / valueLen
			if err := putN(t, be, backend.Key, n, valueLen); err != nil {
				t.Fatalf("Update of %d bytes: %v", tc.payload, err)
			}
			if got := count(t, be, backend.Key); got != n {
				t.Fatalf("got %d keys, want %d", got, n)
			}
		})
	}
}

func TestSnapshotRestore(t *testing.T) {
	backendtest.RunRestore(t,
		func(t *testing.T, dir string) backend.Backend { return open(t, dir, testOptions) },
		func(dir string, r io.Reader) error { return badger.Restore(backend.Options{Dir: dir}, testOptions, r) })
}

// TestCloseLeavesNoGoroutines checks that Close stops everything Badger and
// its cache started.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	be := open(t, t.TempDir(), testOptions)
	if err := putN(t, be, backend.Key, 100, 100); err != nil {
		t.Fatal(err)
	}
	if _, err := be.Snapshot(&bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if err := be.Close(); err != nil {
		t.Fatal(err)
	}
	waitNoEngineGoroutines(t)
}

// waitNoEngineGoroutines fails unless every Badger goroutine ends soon.
func waitNoEngineGoroutines(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		leaked := engineGoroutines()
		if leaked == "" {
			return
		}
		if testing.Verbose() {
			t.Logf("waiting for:\n%s", leaked)
		}
		if time.Now().After(deadline) {
			t.Fatalf("goroutines left after Close:\n%s", leaked)
		}
		runtime.Gosched()
		time.Sleep(10 * time.Millisecond)
	}
}

func engineGoroutines() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var leaked []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "dgraph-io/badger") || strings.Contains(g, "dgraph-io/ristretto") {
			leaked = append(leaked, g)
		}
	}
	return strings.Join(leaked, "\n\n")
}

func TestLoggerQuiet(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	be := open(t, t.TempDir(), badger.Options{MaxUpdateBytes: 4 << 20, Logger: zap.New(core)})
	if err := putN(t, be, backend.Key, 10, 10); err != nil {
		t.Fatal(err)
	}
	if err := be.Close(); err != nil {
		t.Fatal(err)
	}
	if n := logs.Len(); n != 0 {
		t.Fatalf("badger logged %d entries at info or above on a clean open/close: %v", n, logs.All())
	}
}

func TestBadOptions(t *testing.T) {
	for _, bo := range []badger.Options{
		{MaxUpdateBytes: 1 << 30},
		{ValueThreshold: 2 << 20},
		{NumCompactors: 1},
		{ValueLogFileSize: 1 << 10},
		{MemTableSize: 2 << 30},
	} {
		if _, err := badger.Open(backend.Options{Dir: t.TempDir()}, bo); err == nil {
			t.Errorf("Open accepted %+v", bo)
		}
	}
}

func TestOpenRemovesInterruptedRestore(t *testing.T) {
	dir := t.TempDir()
	be := open(t, dir, testOptions)
	if err := putN(t, be, backend.Key, 10, 10); err != nil {
		t.Fatal(err)
	}
	if err := be.Close(); err != nil {
		t.Fatal(err)
	}
	half := filepath.Join(dir, "data-12345")
	if err := os.MkdirAll(half, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "CURRENT.tmp"), []byte("data-12"), 0o600); err != nil {
		t.Fatal(err)
	}
	be = open(t, dir, testOptions)
	defer be.Close()
	for _, p := range []string{half, filepath.Join(dir, "CURRENT.tmp")} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("leftover %s: %v", p, err)
		}
	}
	if n := count(t, be, backend.Key); n != 10 {
		t.Fatalf("%d keys after reopen, want 10", n)
	}
}

// TestHeapArenaBytes checks the arena size against what opening a database
// really keeps live on the Go heap, so that a Badger upgrade that changes its
// arena shows here.
func TestHeapArenaBytes(t *testing.T) {
	bo := badger.Options{MaxUpdateBytes: 8 << 20} // a ~70 MiB arena
	dir := t.TempDir()
	be := open(t, dir, bo) // the first open also allocates process-wide state
	if err := be.Close(); err != nil {
		t.Fatal(err)
	}
	before := liveHeap()
	be = open(t, dir, bo)
	defer be.Close()
	grew := liveHeap() - before
	arena := be.HeapArenaBytes()
	if arena <= 0 || grew < arena*9/10 || grew > arena+16<<20 {
		t.Fatalf("HeapArenaBytes %d, but opening grew the live heap by %d", arena, grew)
	}
}

func liveHeap() int64 {
	// Objects with finalizers (files, earlier tests' databases) are freed
	// only by the GC after the one that runs their finalizer.
	for range 3 {
		runtime.GC()
	}
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}
