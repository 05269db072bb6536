package bolt_test

import (
	"bytes"
	"testing"

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

func BenchmarkBolt(b *testing.B) {
	backendtest.Bench(b, func(b *testing.B, dir string) backend.Backend { return open(b, dir) })
}

func TestSnapshotRestore(t *testing.T) {
	src := open(t, t.TempDir())
	defer src.Close()
	err := src.Update(func(tx backend.WriteTx) error {
		if err := tx.Put(backend.Key, []byte("a"), []byte("1")); err != nil {
			return err
		}
		return tx.Put("custom", []byte("c"), []byte("3"))
	})
	if err != nil {
		t.Fatal(err)
	}
	var snap bytes.Buffer
	if _, err := src.Snapshot(&snap); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}

	dir := t.TempDir()
	// Restore replaces what the directory held.
	old := open(t, dir)
	if err := old.Update(func(tx backend.WriteTx) error { return tx.Put(backend.Key, []byte("old"), []byte("x")) }); err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	if err := bolt.Restore(backend.Options{Dir: dir}, bolt.Options{}, &snap); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	dst := open(t, dir)
	defer dst.Close()
	rtx, err := dst.ReadTx()
	if err != nil {
		t.Fatal(err)
	}
	defer rtx.Release()
	for _, c := range []struct {
		b    backend.Bucket
		k, v string
		ok   bool
	}{{backend.Key, "a", "1", true}, {"custom", "c", "3", true}, {backend.Key, "old", "", false}} {
		v, ok, err := rtx.Get(c.b, []byte(c.k))
		if err != nil || ok != c.ok || string(v) != c.v {
			t.Errorf("Get %s/%s = %q, %v, %v; want %q, %v", c.b, c.k, v, ok, err, c.v, c.ok)
		}
	}
}

func TestRestoreRejectsGarbage(t *testing.T) {
	dir := t.TempDir()
	be := open(t, dir)
	if err := be.Update(func(tx backend.WriteTx) error { return tx.Put(backend.Key, []byte("a"), []byte("1")) }); err != nil {
		t.Fatal(err)
	}
	if err := be.Close(); err != nil {
		t.Fatal(err)
	}
	if err := bolt.Restore(backend.Options{Dir: dir}, bolt.Options{}, bytes.NewReader(bytes.Repeat([]byte("x"), 8192))); err == nil {
		t.Fatal("Restore of garbage succeeded")
	}
	be = open(t, dir)
	defer be.Close()
	rtx, err := be.ReadTx()
	if err != nil {
		t.Fatal(err)
	}
	defer rtx.Release()
	if v, ok, _ := rtx.Get(backend.Key, []byte("a")); !ok || string(v) != "1" {
		t.Fatalf("data lost after failed Restore: %q %v", v, ok)
	}
}

func TestBadFreelistType(t *testing.T) {
	if _, err := bolt.Open(backend.Options{Dir: t.TempDir()}, bolt.Options{FreelistType: "tree"}); err == nil {
		t.Fatal("Open accepted freelist type tree")
	}
}
