package badger_test

import (
	"bufio"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	dgbadger "github.com/dgraph-io/badger/v4"
)

// A table Badger has written stays on disk and in the page cache, not in
// the process: third_party/ristretto's z.Msync drops a new table's pages
// from the mapping once they are synced. Without it every table written
// through the map stays resident until it is deleted (at 8 GiB of data,
// 3.5 GiB of a kvd-badger member's RSS).
func TestWrittenTablesLeaveTheMapping(t *testing.T) {
	dir := t.TempDir()
	db, err := dgbadger.Open(dgbadger.DefaultOptions(dir).WithMemTableSize(2 << 20).WithValueThreshold(64 << 10).
		WithNumLevelZeroTables(20).WithNumLevelZeroTablesStall(40).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	val := make([]byte, 1024)
	wb := db.NewWriteBatch()
	for i := range 24 << 10 { // 24 MiB of incompressible values
		for j := range val {
			val[j] = byte(rng.Uint32())
		}
		if err := wb.Set([]byte(strconv.Itoa(i)), val); err != nil {
			t.Fatal(err)
		}
	}
	if err := wb.Flush(); err != nil {
		t.Fatal(err)
	}
	// Wait for the memtables to reach the disk as tables.
	deadline := time.Now().Add(10 * time.Second)
	for tablesBytes(db) < 8<<20 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	size, rss := tableMappings(t, dir)
	t.Logf("tables %d bytes, mapped %d, resident %d", tablesBytes(db), size, rss)
	if size < 8<<20 {
		t.Fatalf("only %d bytes of tables mapped; want 8 MiB of what was written flushed", size)
	}
	if rss > size/4 {
		t.Errorf("%d of %d bytes of mapped tables resident, want at most a quarter", rss, size)
	}
}

func tablesBytes(db *dgbadger.DB) int64 {
	var n int64
	for _, ti := range db.Tables() {
		n += int64(ti.OnDiskSize)
	}
	return n
}

// tableMappings sums Size and Rss of this process's mappings of the .sst
// files under dir (/proc/self/smaps).
func tableMappings(t *testing.T, dir string) (size, rss int64) {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if !strings.HasSuffix(fields[0], ":") { // a mapping's header line
			in = len(fields) >= 6 && strings.HasPrefix(fields[5], dir) && strings.HasSuffix(fields[5], ".sst")
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
		t.Fatal(err)
	}
	return size, rss
}
