package server

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// A crash (here: a removal that fails half way, as a crash would leave it)
// while a member deletes the backend its snapshot install replaced must not
// bring that half-deleted backend back at the next start: the member keeps
// the installed one, with every key, and agrees with its peers.
func TestInstallInterruptedRemovalKeepsNewBackend(t *testing.T) {
	for _, engine := range []string{"bolt", "badger"} {
		t.Run(engine, func(t *testing.T) {
			cs := clusterConfigs(t, "bolt", "bolt", engine)
			for _, c := range cs {
				c.SnapshotCount = 100
				c.SnapshotCatchupEntries = 10
			}
			ms := startCluster(t, cs)
			put(t, ms[0], "before", "1")
			eventually(t, "m3 has the first write", func() error { return hasKeys(t, ms[2], "before", 1) })
			ms[2].stop()
			for i := 0; i < 300; i++ {
				put(t, ms[i%2], fmt.Sprintf("key-%03d", i), "v")
			}
			interrupted := interruptRemovals(t, cs[2].BackendDir())
			ms[2] = startMember(t, cs[2])
			eventually(t, "m3 caught up", func() error { return hasKeys(t, ms[2], "key-", 300) })
			if *interrupted == 0 {
				t.Fatal("no removal of a replaced backend was attempted: m3 did not install a snapshot")
			}
			ms[2].stop()
			removeAll = os.RemoveAll
			ms[2] = startMember(t, cs[2])
			if err := hasKeys(t, ms[2], "key-", 300); err != nil {
				t.Fatalf("after restart: %v", err)
			}
			eventually(t, "equal hashes", func() error { return sameHash(t, ms) })
			if _, err := os.Stat(cs[2].BackendDir() + discardedSuffix); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("the replaced backend is still there after a restart: %v", err)
			}
		})
	}
}

// interruptRemovals makes removals of the backend set aside under dir
// delete its files but leave the directory and fail, as an interrupted
// RemoveAll leaves it. It counts them.
func interruptRemovals(t *testing.T, dir string) *int {
	n := new(int)
	t.Cleanup(func() { removeAll = os.RemoveAll })
	removeAll = func(path string) error {
		if _, err := os.Stat(path); err != nil || !strings.HasPrefix(path, dir+".") {
			return os.RemoveAll(path)
		}
		*n++
		_ = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				_ = os.Remove(p)
			}
			return nil
		})
		return errors.New("injected: interrupted while removing")
	}
	return n
}

func hasKeys(t testing.TB, m *member, prefix string, want int64) error {
	end := []byte(prefix)
	end[len(end)-1]++
	r, err := m.kv.Range(ctx5(t), &pb.RangeRequest{Key: []byte(prefix), RangeEnd: end, CountOnly: true, Serializable: true})
	if err == nil && r.Count != want {
		err = fmt.Errorf("%d keys under %q, want %d", r.Count, prefix, want)
	}
	return err
}

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
