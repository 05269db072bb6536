package bolt_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/backend/backendtest"
	"github.com/kvd-dev/kvd/pkg/backend/bolt"
)

func open(tb testing.TB, dir string) backend.Backend {
	tb.Helper()
	be, err := bolt.Open(backend.Options{Dir: dir}, bolt.Options{})
	if err != nil {
		tb.Fatalf("open bolt: %v", err)
	}
	return be
}

func TestConformance(t *testing.T) {
	backendtest.Run(t, func(t *testing.T, dir string) backend.Backend { return open(t, dir) })
}

// TestConformanceSmallMap runs the suite with a 1 MiB first memory map, so
// that writers grow it while readers hold views: a commit that remaps waits
// for every open read transaction (ReadersSeeEveryFinishedCommit would hang
// on a read view kept across commits).
func TestConformanceSmallMap(t *testing.T) {
	backendtest.Run(t, func(t *testing.T, dir string) backend.Backend {
		be, err := bolt.Open(backend.Options{Dir: dir}, bolt.Options{InitialMmapSize: 1 << 20})
		if err != nil {
			t.Fatalf("open bolt: %v", err)
		}
		return be
	})
}

func BenchmarkBolt(b *testing.B) {
	backendtest.Bench(b, func(b *testing.B, dir string) backend.Backend { return open(b, dir) })
}

func TestSnapshotRestore(t *testing.T) {
	backendtest.RunRestore(t,
		func(t *testing.T, dir string) backend.Backend { return open(t, dir) },
		func(dir string, r io.Reader) error { return bolt.Restore(backend.Options{Dir: dir}, bolt.Options{}, r) })
}

func TestBadFreelistType(t *testing.T) {
	if _, err := bolt.Open(backend.Options{Dir: t.TempDir()}, bolt.Options{FreelistType: "tree"}); err == nil {
		t.Fatal("Open accepted freelist type tree")
	}
}

func fill(t *testing.T, be backend.Backend, n int) {
	t.Helper()
	value := bytes.Repeat([]byte{'v'}, 1000)
	err := be.Update(func(tx backend.WriteTx) error {
		for i := 0; i < n; i++ {
			if err := tx.Put(backend.Key, []byte(fmt.Sprintf("k%06d", i)), value); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestDefragReclaimsSpace(t *testing.T) {
	be := open(t, t.TempDir())
	defer be.Close()
	fill(t, be, 5000)
	err := be.Update(func(tx backend.WriteTx) error {
		for i := 0; i < 4900; i++ {
			if err := tx.Delete(backend.Key, []byte(fmt.Sprintf("k%06d", i))); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	size, inUse := be.Size(), be.SizeInUse()
	if inUse >= size/2 {
		t.Fatalf("after deleting 98%%: SizeInUse %d, Size %d; want most pages free", inUse, size)
	}
	if err := be.Defrag(); err != nil {
		t.Fatalf("Defrag: %v", err)
	}
	if after := be.Size(); after >= size/2 {
		t.Fatalf("Size %d after Defrag, %d before; want it to shrink", after, size)
	}
}

// Defrag swaps files without waiting for views open on the old one.
func TestDefragDoesNotWaitForReaders(t *testing.T) {
	be := open(t, t.TempDir())
	defer be.Close()
	fill(t, be, 100)
	rtx, err := be.ReadTx()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- be.Defrag() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Defrag: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Defrag blocked behind an open ReadTx")
	}
	if _, ok, err := rtx.Get(backend.Key, []byte("k000001")); err != nil || !ok {
		t.Fatalf("old view after Defrag: %v %v", ok, err)
	}
	rtx.Release()
}

func TestOpenRemovesInterruptedDefrag(t *testing.T) {
	dir := t.TempDir()
	be := open(t, dir)
	fill(t, be, 10)
	if err := be.Close(); err != nil {
		t.Fatal(err)
	}
	leftover := filepath.Join(dir, bolt.FileName+".defrag")
	if err := os.WriteFile(leftover, []byte("half a file"), 0o600); err != nil {
		t.Fatal(err)
	}
	be = open(t, dir)
	defer be.Close()
	if _, err := os.Stat(leftover); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("leftover defrag file: %v", err)
	}
}

// The Key bucket, written in key order in many updates as the MVCC store
// writes it, packs its pages: 20,000 records of 216 bytes take little more
// than their size, where bolt's default of half-full pages would double it.
// Other buckets keep bolt's default.
func TestKeyBucketPacksPages(t *testing.T) {
	be := open(t, t.TempDir())
	defer be.Close()
	const n, valueSize, perUpdate = 20000, 200, 100
	value := bytes.Repeat([]byte("v"), valueSize)
	for i := 0; i < n; i += perUpdate {
		err := be.Update(func(tx backend.WriteTx) error {
			for j := i; j < i+perUpdate; j++ {
				if err := tx.Put(backend.Key, fmt.Appendf(nil, "%016x", j), value); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	data := int64(n * (16 + valueSize))
	if inUse := be.SizeInUse(); inUse > data*27/20 {
		t.Fatalf("%d bytes in use for %d bytes of records: pages not packed", inUse, data)
	}
}
