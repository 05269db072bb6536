package badger

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dgraph-io/ristretto/v2/z"

	"github.com/kvd-dev/kvd/pkg/backend"
)

// mapped sums the size and the resident memory (Rss) of this process's
// mappings of files whose path satisfies match, from /proc/self/smaps.
func mapped(t *testing.T, match func(path string) bool) (size, rss int64) {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			// A mapping's header: range perms offset dev inode [path].
			in = len(fields) >= 6 && match(fields[5])
			continue
		}
		if !in || len(fields) < 2 {
			continue
		}
		kb, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			continue
		}
		switch fields[0] {
		case "Size:":
			size += kb << 10
		case "Rss:":
			rss += kb << 10
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read /proc/self/smaps: %v", err)
	}
	return size, rss
}

// TestMsyncDropsPagesSyncKeepsThem checks the patch to ristretto's z in
// third_party: z.Msync, which Badger calls only on a table it has just
// written through its map, leaves none of the table's pages resident in the
// process (they read back from the page cache), while MmapFile.Sync, which
// Badger calls on the memtable and value logs it keeps writing, keeps them.
func TestMsyncDropsPagesSyncKeepsThem(t *testing.T) {
	const size = 8 << 20
	for _, tc := range []struct {
		name     string
		sync     func(mf *z.MmapFile) error
		resident bool
	}{
		{"z.Msync", func(mf *z.MmapFile) error { return z.Msync(mf.Data) }, false},
		{"MmapFile.Sync", func(mf *z.MmapFile) error { return mf.Sync() }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "000001.sst")
			mf, err := z.OpenMmapFile(path, os.O_CREATE|os.O_RDWR|os.O_EXCL, size)
			if err != z.NewFile {
				t.Fatalf("OpenMmapFile: %v, want z.NewFile", err)
			}
			defer func() {
				if err := mf.Close(-1); err != nil {
					t.Errorf("close: %v", err)
				}
			}()
			for i := range mf.Data {
				mf.Data[i] = byte(i / 4096)
			}
			isFile := func(p string) bool { return p == path }
			if _, rss := mapped(t, isFile); rss < size/2 {
				t.Fatalf("%d KiB resident of %d KiB just written: cannot tell a drop", rss>>10, size>>10)
			}
			if err := tc.sync(mf); err != nil {
				t.Fatalf("sync: %v", err)
			}
			_, rss := mapped(t, isFile)
			if tc.resident && rss < size/2 {
				t.Fatalf("%d KiB resident after the sync, want the %d KiB written", rss>>10, size>>10)
			}
			if !tc.resident && rss > size/16 {
				t.Fatalf("%d KiB of %d KiB still resident after the sync, want them dropped", rss>>10, size>>10)
			}
			for i := 0; i < size; i += 4096 {
				if got := mf.Data[i]; got != byte(i/4096) {
					t.Fatalf("byte %d reads %d after the sync, want %d", i, got, byte(i/4096))
				}
			}
			onDisk, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(onDisk, mf.Data) {
				t.Fatal("the file's contents differ from the map's")
			}
		})
	}
}

// TestFlushedTablesNotResident: the tables Badger writes as it flushes
// memtables are not kept in the process's memory (its RSS) once written,
// and values (every 97th of each update) read back from them.
func TestFlushedTablesNotResident(t *testing.T) {
	dir := t.TempDir()
	be, err := Open(backend.Options{Dir: dir}, Options{MaxUpdateBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := be.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	// Values that do not compress, or Badger's Snappy makes the tables tiny.
	value := func(u, i int) []byte {
		v := make([]byte, 1000)
		r := rand.New(rand.NewPCG(uint64(u), uint64(i)))
		for j := range v {
			v[j] = byte(r.Uint32())
		}
		return v
	}
	const updates, perUpdate = 64, 900 // ~56 MiB, eight memtables of ~7 MiB
	for u := 0; u < updates; u++ {
		err := be.Update(func(tx backend.WriteTx) error {
			for i := 0; i < perUpdate; i++ {
				if err := tx.Put(backend.Key, []byte(fmt.Sprintf("k%03d-%04d", u, i)), value(u, i)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("update %d: %v", u, err)
		}
	}
	isTable := func(p string) bool { return strings.HasPrefix(p, dir+"/") && strings.HasSuffix(p, ".sst") }
	// Flushes and compactions run in the background: wait until the tables
	// hold most of the data and their set has stopped changing.
	var size, rss int64
	deadline := time.Now().Add(30 * time.Second)
	for stable := 0; stable < 5; {
		if time.Now().After(deadline) {
			t.Fatalf("tables never settled: %d MiB mapped, %d MiB resident", size>>20, rss>>20)
		}
		time.Sleep(100 * time.Millisecond)
		s, r := mapped(t, isTable)
		if s == size && s >= 32<<20 {
			stable++
		} else {
			stable = 0
		}
		size, rss = s, r
	}
	if rss > size/4 {
		t.Fatalf("%d MiB of the flushed tables' %d MiB resident, want them dropped after the write", rss>>20, size>>20)
	}
	rtx, err := be.ReadTx()
	if err != nil {
		t.Fatal(err)
	}
	defer rtx.Release()
	for u := 0; u < updates; u++ {
		for i := 0; i < perUpdate; i += 97 {
			k := fmt.Sprintf("k%03d-%04d", u, i)
			v, ok, err := rtx.Get(backend.Key, []byte(k))
			if err != nil || !ok || !bytes.Equal(v, value(u, i)) {
				t.Fatalf("get %s: %d bytes, found %v, %v", k, len(v), ok, err)
			}
		}
	}
	t.Logf("tables: %d MiB mapped, %d MiB resident", size>>20, rss>>20)
}
