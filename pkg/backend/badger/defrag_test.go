package badger_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/backend/badger"
)

// defragOptions send values of 1 KiB and more to the value log, so the
// test covers both places Badger keeps values.
var defragOptions = badger.Options{MaxUpdateBytes: 1 << 20, ValueThreshold: 1 << 10, ValueLogFileSize: 4 << 20}

func deleteRange(t *testing.T, be backend.Backend, b backend.Bucket, from, to int) {
	t.Helper()
	for lo := from; lo < to; lo += 500 {
		err := be.Update(func(tx backend.WriteTx) error {
			for i := lo; i < min(lo+500, to); i++ {
				if err := tx.Delete(b, []byte(fmt.Sprintf("k%08d", i))); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func get(t *testing.T, be backend.Backend, b backend.Bucket, key string) ([]byte, bool) {
	t.Helper()
	rtx, err := be.ReadTx()
	if err != nil {
		t.Fatal(err)
	}
	defer rtx.Release()
	v, ok, err := rtx.Get(b, []byte(key))
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Clone(v), ok
}

// sizeNow is Size once its one-second cache has lapsed.
func sizeNow(be *badger.Backend) int64 {
	time.Sleep(1100 * time.Millisecond)
	return be.Size()
}

// Deleting most keys and defragmenting gives the space back, keeps every
// live key, and leaves a database that takes writes and survives reopening.
func TestDefragReclaimsSpace(t *testing.T) {
	dir := t.TempDir()
	be := open(t, dir, defragOptions)
	for i := 0; i < 20; i++ { // 20 x 500 keys of 2 KiB, in the value log
		if err := be.Update(func(tx backend.WriteTx) error {
			for j := 0; j < 500; j++ {
				k := fmt.Sprintf("k%08d", i*500+j)
				if err := tx.Put(backend.Key, []byte(k), bytes.Repeat([]byte{byte(j)}, 2048)); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := putN(t, be, backend.Meta, 100, 100); err != nil { // small values, in the LSM tree
		t.Fatal(err)
	}
	deleteRange(t, be, backend.Key, 0, 9500)
	before := sizeNow(be)
	if err := be.Defrag(); err != nil {
		t.Fatalf("Defrag: %v", err)
	}
	after := be.Size()
	t.Logf("size before defrag %d, after %d", before, after)
	if after > before/4 {
		t.Fatalf("size after defrag %d, before %d: want less than a quarter", after, before)
	}
	if n := count(t, be, backend.Key); n != 500 {
		t.Fatalf("%d keys after defrag, want 500", n)
	}
	if n := count(t, be, backend.Meta); n != 100 {
		t.Fatalf("%d meta keys after defrag, want 100", n)
	}
	if v, ok := get(t, be, backend.Key, "k00009999"); !ok || !bytes.Equal(v, bytes.Repeat([]byte{499 % 256}, 2048)) {
		t.Fatalf("k00009999 after defrag: ok=%v len=%d", ok, len(v))
	}
	if _, ok := get(t, be, backend.Key, "k00000001"); ok {
		t.Fatal("a deleted key is back after defrag")
	}
	// Writes after the swap see and overwrite the copied data.
	if err := be.Update(func(tx backend.WriteTx) error {
		if err := tx.Put(backend.Key, []byte("k00009999"), []byte("new")); err != nil {
			return err
		}
		return tx.Put(backend.Key, []byte("after"), []byte("x"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := be.Close(); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var subdirs []string
	for _, e := range entries {
		if e.IsDir() {
			subdirs = append(subdirs, e.Name())
		}
	}
	if len(subdirs) != 1 {
		t.Fatalf("data subdirectories after defrag: %v, want the new one only", subdirs)
	}
	be = open(t, dir, defragOptions)
	defer be.Close()
	if v, _ := get(t, be, backend.Key, "k00009999"); string(v) != "new" {
		t.Fatalf("k00009999 after reopen = %q, want the write made after defrag", v)
	}
	if n := count(t, be, backend.Key); n != 501 {
		t.Fatalf("%d keys after reopen, want 501", n)
	}
}

// A reader open across a defragment keeps reading its snapshot of the old
// database, which is closed and removed only once that reader is done.
func TestDefragKeepsOldDatabaseForReaders(t *testing.T) {
	dir := t.TempDir()
	be := open(t, dir, defragOptions)
	defer be.Close()
	if err := putN(t, be, backend.Key, 100, 10); err != nil {
		t.Fatal(err)
	}
	rtx, err := be.ReadTx()
	if err != nil {
		t.Fatal(err)
	}
	deleteRange(t, be, backend.Key, 0, 50)
	if err := be.Defrag(); err != nil {
		t.Fatalf("Defrag: %v", err)
	}
	if n := subdirCount(t, dir); n != 2 {
		t.Fatalf("%d data subdirectories while a reader pins the old one, want 2", n)
	}
	if err := be.Update(func(tx backend.WriteTx) error { return tx.Put(backend.Meta, []byte("w"), []byte("1")) }); err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := rtx.Range(backend.Key, nil, nil, 0, func(k, v []byte) bool { n++; return true }); err != nil {
		t.Fatalf("Range on the old snapshot after defrag: %v", err)
	}
	if n != 100 {
		t.Fatalf("old snapshot sees %d keys, want 100", n)
	}
	rtx.Release()
	deadline := time.Now().Add(10 * time.Second)
	for subdirCount(t, dir) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the replaced database was not removed after its last reader left")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := count(t, be, backend.Key); n != 50 {
		t.Fatalf("%d keys after defrag, want 50", n)
	}
}

// Close waits for a replaced database still pinned at the time of Defrag.
func TestCloseAfterDefragLeavesNoGoroutines(t *testing.T) {
	dir := t.TempDir()
	be := open(t, dir, defragOptions)
	if err := putN(t, be, backend.Key, 100, 10); err != nil {
		t.Fatal(err)
	}
	rtx, err := be.ReadTx()
	if err != nil {
		t.Fatal(err)
	}
	if err := be.Defrag(); err != nil {
		t.Fatal(err)
	}
	rtx.Release()
	if err := be.Close(); err != nil {
		t.Fatal(err)
	}
	if n := subdirCount(t, dir); n != 1 {
		t.Fatalf("%d data subdirectories after Close, want 1", n)
	}
	waitNoEngineGoroutines(t)
}

func subdirCount(t *testing.T, dir string) int {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "data*"))
	if err != nil {
		t.Fatal(err)
	}
	return len(m)
}

// An empty database defragments to an empty one.
func TestDefragEmpty(t *testing.T) {
	be := open(t, t.TempDir(), defragOptions)
	defer be.Close()
	if err := be.Defrag(); err != nil {
		t.Fatalf("Defrag of an empty db: %v", err)
	}
	if err := putN(t, be, backend.Key, 10, 10); err != nil {
		t.Fatal(err)
	}
	if n := count(t, be, backend.Key); n != 10 {
		t.Fatalf("%d keys, want 10", n)
	}
}

// Size counts committed bytes between directory walks, so a burst of
// writes shows at once rather than a second later.
func TestSizeCountsRecentWrites(t *testing.T) {
	be := open(t, t.TempDir(), defragOptions)
	defer be.Close()
	base := be.Size()
	if err := putN(t, be, backend.Key, 400, 2048); err != nil {
		t.Fatal(err)
	}
	if got := be.Size(); got < base+400*2048 {
		t.Fatalf("Size right after writing 800 KiB = %d, base %d", got, base)
	}
}
