package engine

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/config"
)

// Open maps a bolt file as Config.BoltInitialMmapSize says: a quota other
// than the default sizes the first map (quota + 10%, which bbolt rounds up
// to whole GiB), so the file does not outgrow it before the quota alarm.
func TestOpenMapsBoltFromTheQuota(t *testing.T) {
	for _, tc := range []struct {
		quota   int64
		wantGiB int64
	}{{0, 10}, {3 << 30, 4}, {17 << 30, 19}} {
		c := config.Default()
		c.QuotaBackendBytes = tc.quota
		c.Complete()
		dir := t.TempDir()
		be, err := Open(c, "bolt", dir, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		got := mappedBytes(t, filepath.Join(dir, "db"))
		if err := be.Close(); err != nil {
			t.Fatal(err)
		}
		if got != tc.wantGiB<<30 {
			t.Errorf("quota %d: the file is mapped %d bytes, want %d GiB", tc.quota, got, tc.wantGiB)
		}
	}
}

// mappedBytes is the size of this process's mappings of path.
func mappedBytes(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var n int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[5] != path {
			continue
		}
		lo, hi, _ := strings.Cut(fields[0], "-")
		a, err1 := strconv.ParseUint(lo, 16, 64)
		b, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("maps line %q", sc.Text())
		}
		n += int64(b - a)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}
