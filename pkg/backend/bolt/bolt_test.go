package bolt_test

import (
	"io"
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
	backendtest.RunRestore(t,
		func(t *testing.T, dir string) backend.Backend { return open(t, dir) },
		func(dir string, r io.Reader) error { return bolt.Restore(backend.Options{Dir: dir}, bolt.Options{}, r) })
}

func TestBadFreelistType(t *testing.T) {
	if _, err := bolt.Open(backend.Options{Dir: t.TempDir()}, bolt.Options{FreelistType: "tree"}); err == nil {
		t.Fatal("Open accepted freelist type tree")
	}
}
