package bolt

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvd-dev/kvd/pkg/backend"
)

func fileMeta(t *testing.T, path string) meta {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := readMeta(f)
	if err != nil {
		t.Fatalf("read meta of %s: %v", path, err)
	}
	return m
}

// TestCloseWritesFreelist: a clean Close leaves a file whose freelist the
// next Open reads instead of rebuilding it from a walk of every page; that
// freelist is the one the backend had, and the first commit after the open
// goes back to commits without one (what a crash leaves is unchanged).
func TestCloseWritesFreelist(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	open := func() *Backend {
		be, err := Open(backend.Options{Dir: dir}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		return be
	}
	key := func(i int) []byte { return []byte(fmt.Sprintf("k%06d", i)) }
	value := bytes.Repeat([]byte{'v'}, 512)
	be := open()
	const n = 4000
	for _, del := range []bool{false, true} {
		err := be.Update(func(tx backend.WriteTx) error {
			for i := 0; i < n; i++ {
				switch {
				case !del:
					if err := tx.Put(backend.Key, key(i), value); err != nil {
						return err
					}
				case i%2 == 0:
					if err := tx.Delete(backend.Key, key(i)); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// Two more commits, so that the pages the deletes freed are no longer
	// pending for an older transaction.
	for i := 0; i < 2; i++ {
		if err := be.Update(func(tx backend.WriteTx) error { return tx.Put(backend.Meta, []byte("m"), value) }); err != nil {
			t.Fatal(err)
		}
	}
	size, inUse := be.Size(), be.SizeInUse()
	if inUse >= size {
		t.Fatalf("in use %d of %d bytes after deleting half the keys: no free pages to keep", inUse, size)
	}
	if m := fileMeta(t, path); m.freelist != noFreelist {
		t.Fatalf("an open backend's file names freelist page %d, want none (commits skip it)", m.freelist)
	}
	if err := be.Close(); err != nil {
		t.Fatal(err)
	}
	m := fileMeta(t, path)
	if m.freelist == noFreelist || m.freelist >= m.high {
		t.Fatalf("after Close the file's freelist page is %d (high-water mark %d), want one written", m.freelist, m.high)
	}
	if err := CheckFile(path); err != nil {
		t.Fatalf("check after Close: %v", err)
	}

	be = open()
	defer func() {
		if err := be.Close(); err != nil {
			t.Error(err)
		}
	}()
	// The open's own first commit (its buckets) dropped the freelist page
	// again; in use it still counts the same pages, less the page that held
	// the freelist, now free itself.
	if m := fileMeta(t, path); m.freelist != noFreelist {
		t.Fatalf("after a reopen the file names freelist page %d, want none", m.freelist)
	}
	if got := be.SizeInUse(); got > inUse || got < inUse-int64(os.Getpagesize())*2 {
		t.Fatalf("in use after the reopen %d bytes, before the close %d: the freelist read back differs", got, inUse)
	}
	rtx, err := be.ReadTx()
	if err != nil {
		t.Fatal(err)
	}
	defer rtx.Release()
	for i := 0; i < n; i++ {
		v, ok, err := rtx.Get(backend.Key, key(i))
		if err != nil || ok != (i%2 == 1) || (ok && !bytes.Equal(v, value)) {
			t.Fatalf("key %d after the reopen: found %v, %d bytes, %v", i, ok, len(v), err)
		}
	}
}
