package server

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A backend older than the WAL's snapshot (here: a copy from before the
// snapshot put back in place) is refused at start, as etcd refuses it:
// raft would resume after the snapshot and never apply what the backend
// misses.
func TestStartRefusesBackendOlderThanSnapshot(t *testing.T) {
	for _, engine := range []string{"bolt", "badger"} {
		t.Run(engine, func(t *testing.T) {
			c := testConfig(t, engine, t.TempDir())
			c.SnapshotCount = 100
			m := startMember(t, c)
			put(t, m, "a", "1")
			m.stop()
			old := t.TempDir()
			copyTree(t, c.BackendDir(), old)
			m = startMember(t, c)
			for i := 0; i < 250; i++ {
				put(t, m, fmt.Sprintf("k%03d", i), "v")
			}
			m.stop()
			if err := os.RemoveAll(c.BackendDir()); err != nil {
				t.Fatal(err)
			}
			copyTree(t, old, c.BackendDir())
			err := startErr(t, c)
			if err == nil || !strings.Contains(err.Error(), "does not match with snapshot") {
				t.Fatalf("start over a backend older than the snapshot: %v", err)
			}
		})
	}
}

func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o700)
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		out, err := os.Create(dst)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, src); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}
