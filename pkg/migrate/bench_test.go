package migrate

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/kvd-dev/kvd/pkg/engine"
)

// BenchmarkBatchBytes times a migrate of a real data dir, named by
// KVD_MIGRATE_BENCH_DIR (a stopped member's, e.g. one filled as
// scripts/bench-migrate.sh fills it), into the other engine with several
// update sizes; each run works on a copy. It is how DefaultBatchBytes was
// chosen:
//
//	KVD_MIGRATE_BENCH_DIR=/path/data go test -run '^$' -bench BatchBytes -benchtime 1x ./pkg/migrate
func BenchmarkBatchBytes(b *testing.B) {
	src := os.Getenv("KVD_MIGRATE_BENCH_DIR")
	if src == "" {
		b.Skip("KVD_MIGRATE_BENCH_DIR names no data dir")
	}
	present, err := engine.Present(filepath.Join(src, "member", "snap"))
	if err != nil || len(present) != 1 {
		b.Fatalf("%s: engines %v, %v", src, present, err)
	}
	to := map[string]string{"bolt": "badger", "badger": "bolt"}[present[0]]
	for _, mib := range []int{1, 4, 16, 64} {
		if to == "badger" && mib > 16 {
			continue // past Badger's update limit (engine.Open: 24 MiB)
		}
		b.Run(fmt.Sprintf("%s-%dMiB", to, mib), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				dir := filepath.Join(b.TempDir(), "data")
				if out, err := exec.Command("cp", "-a", src, dir).CombinedOutput(); err != nil {
					b.Fatalf("cp: %v\n%s", err, out)
				}
				c := newConfigDir(dir)
				b.StartTimer()
				res, err := Run(Options{Config: c, To: to, BatchBytes: mib << 20})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(res.Copy.Seconds(), "copy-s")
				b.ReportMetric(res.Verify.Seconds(), "check-s")
				b.ReportMetric(float64(res.Bytes)/res.Copy.Seconds()/(1<<20), "copy-MiB/s")
			}
		})
	}
}
