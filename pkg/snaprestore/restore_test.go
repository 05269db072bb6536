package snaprestore

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/kvd-dev/kvd/pkg/config"
	"github.com/kvd-dev/kvd/pkg/datadir"
	"github.com/kvd-dev/kvd/pkg/engine"
	"github.com/kvd-dev/kvd/pkg/etcddb"
	"github.com/kvd-dev/kvd/pkg/membership"
	"github.com/kvd-dev/kvd/pkg/mvcc"
	"github.com/kvd-dev/kvd/pkg/raftlog"
)

// etcdSnapshot is pkg/etcddb's real etcd v3.7.3 snapshot: revision 6,
// compacted at 3, keys a and c (c with a lease), auth enabled.
const etcdSnapshot = "../etcddb/testdata/etcd-v3.7.3.snapshot"

const cluster = "n1=http://127.0.0.1:2380,n2=http://127.0.0.1:2480,n3=http://127.0.0.1:2580"

func restoreConfig(t *testing.T, eng string) Config {
	return Config{
		SnapshotPath:        etcdSnapshot,
		Name:                "n2",
		DataDir:             filepath.Join(t.TempDir(), "n2.kvd"),
		PeerURLs:            []string{"http://127.0.0.1:2480"},
		InitialCluster:      cluster,
		InitialClusterToken: "tok",
		Engine:              eng,
		Logger:              zap.NewNop(),
	}
}

// openRestored opens what Restore wrote as kvd would.
func openRestored(t *testing.T, cfg Config) (*mvcc.Store, *raftlog.Log) {
	t.Helper()
	c := config.Default()
	c.DataDir, c.WALDir = cfg.DataDir, ""
	c.Backend.Engine = cfg.Engine
	c.Complete()
	be, err := engine.Open(c, cfg.Engine, c.BackendDir(), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	st, err := mvcc.Open(be, zap.NewNop())
	if err != nil {
		be.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(); be.Close() })
	l, err := raftlog.Open(raftlog.Options{Dir: c.WALPath()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return st, l
}

func TestRestore(t *testing.T) {
	for _, eng := range engine.Names {
		t.Run(eng, func(t *testing.T) {
			cfg := restoreConfig(t, eng)
			res, err := Restore(cfg)
			if err != nil {
				t.Fatal(err)
			}
			urls := map[string][]string{"n1": {"http://127.0.0.1:2380"}, "n2": {"http://127.0.0.1:2480"}, "n3": {"http://127.0.0.1:2580"}}
			members, clusterID := membership.Initial(urls, "tok")
			if res.ClusterID != clusterID || len(res.Members) != 3 || res.Revision != 6 {
				t.Fatalf("result %+v, want cluster %x, 3 members, revision 6", res, clusterID)
			}
			id, err := datadir.ReadIdentity(filepath.Join(cfg.DataDir, "member", datadir.IdentityFile))
			if err != nil || id == nil || id.Name != "n2" || id.Bootstrap != "new" || id.Token != "tok" {
				t.Fatalf("identity %+v, %v", id, err)
			}
			if _, mid, _ := id.IDs(); mid != res.MemberID || members[slices.IndexFunc(members, func(m membership.Member) bool { return m.Name == "n2" })].ID != mid {
				t.Errorf("member ID %x is not n2's", mid)
			}
			if _, err := os.Stat(cfg.DataDir + ".restore-tmp"); !os.IsNotExist(err) {
				t.Errorf("staging dir left behind: %v", err)
			}
			st, l := openRestored(t, cfg)
			if st.Rev() != 6 || st.CompactRev() != 3 || st.ConsistentIndex() != 3 || st.ConsistentTerm() != 1 {
				t.Errorf("store rev %d compact %d ci %d term %d, want 6 3 3 1", st.Rev(), st.CompactRev(), st.ConsistentIndex(), st.ConsistentTerm())
			}
			var ld membership.Loader
			if err := st.Members(ld.Add); err != nil {
				t.Fatal(err)
			}
			if got := ld.Members(); len(got) != 3 || !slices.EqualFunc(got, members, func(a, b membership.Member) bool { return a.ID == b.ID && a.Name == b.Name }) {
				t.Errorf("members %v, want %v (the etcd cluster's own member must be gone)", got, members)
			}
			snap, err := l.Storage().Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			md := snap.GetMetadata()
			if md.GetIndex() != 3 || md.GetTerm() != 1 || len(md.GetConfState().GetVoters()) != 3 {
				t.Errorf("raft snapshot %v, want index 3 term 1 and 3 voters", md)
			}
			if hs := l.Storage().HardState(); hs.GetCommit() != 3 || hs.GetTerm() != 1 {
				t.Errorf("hard state %v, want commit 3 term 1", hs)
			}
		})
	}
}

func TestRestoreBumpRevision(t *testing.T) {
	cfg := restoreConfig(t, "bolt")
	cfg.RevisionBump, cfg.MarkCompacted = 1000, true
	res, err := Restore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := openRestored(t, cfg)
	// Open resumes the compaction the restore scheduled.
	for deadline := time.Now().Add(10 * time.Second); st.CompactRev() != 1006 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if res.Revision != 1006 || st.Rev() != 1006 || st.CompactRev() != 1006 {
		t.Errorf("revision %d/%d, compacted at %d: want 1006 for all", res.Revision, st.Rev(), st.CompactRev())
	}
	rt := st.Read()
	defer rt.End()
	r, err := rt.Range([]byte("a"), []byte("z"), mvcc.RangeOptions{})
	if err != nil || len(r.KVs) != 2 {
		t.Fatalf("range after bump: %v, %v", r, err)
	}
}

func TestRestoreRefuses(t *testing.T) {
	good, err := os.ReadFile(etcdSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	damaged := slices.Clone(good)
	damaged[9000] ^= 1
	for _, c := range []struct {
		name string
		edit func(t *testing.T, cfg *Config)
		want string
	}{
		{"not-in-cluster", func(_ *testing.T, cfg *Config) { cfg.Name = "n4" }, `member "n4" is not in --initial-cluster`},
		{"peer-urls", func(_ *testing.T, cfg *Config) { cfg.PeerURLs = []string{"http://127.0.0.1:9999"} }, "missing from --initial-advertise-peer-urls"},
		{"bump-alone", func(_ *testing.T, cfg *Config) { cfg.RevisionBump = 5 }, "--mark-compacted required"},
		{"mark-alone", func(_ *testing.T, cfg *Config) { cfg.MarkCompacted = true }, "--mark-compacted required"},
		{"engine", func(_ *testing.T, cfg *Config) { cfg.Engine = "rocks" }, "unknown engine"},
		{"missing-file", func(_ *testing.T, cfg *Config) { cfg.SnapshotPath = "nope.db" }, "no such file"},
		{"damaged", func(t *testing.T, cfg *Config) { cfg.SnapshotPath = writeFile(t, damaged) }, "expected sha256"},
		{"truncated", func(t *testing.T, cfg *Config) { cfg.SnapshotPath = writeFile(t, good[:len(good)/2]) }, "missing hash"},
		{"truncated-skip-hash", func(t *testing.T, cfg *Config) {
			cfg.SnapshotPath, cfg.SkipHashCheck = writeFile(t, good[:len(good)-32-4096]), true
		}, "not a sound bolt file"},
		{"garbage", func(t *testing.T, cfg *Config) {
			cfg.SnapshotPath, cfg.SkipHashCheck = writeFile(t, []byte(strings.Repeat("x", 8192))), true
		}, "not a sound bolt file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := restoreConfig(t, "bolt")
			c.edit(t, &cfg)
			_, err := Restore(cfg)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %q", err, c.want)
			}
			for _, d := range []string{cfg.DataDir, cfg.DataDir + ".restore-tmp"} {
				if _, err := os.Stat(d); !os.IsNotExist(err) {
					t.Errorf("%s left behind (%v)", d, err)
				}
			}
		})
	}
	t.Run("non-empty-data-dir", func(t *testing.T) {
		cfg := restoreConfig(t, "badger")
		if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
			t.Fatal(err)
		}
		keep := filepath.Join(cfg.DataDir, "keep")
		if err := os.WriteFile(keep, []byte("mine"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Restore(cfg); err == nil || !strings.Contains(err.Error(), "not empty") {
			t.Fatalf("err %v, want a refusal of the non-empty data dir", err)
		}
		if b, err := os.ReadFile(keep); err != nil || string(b) != "mine" {
			t.Errorf("data dir contents changed: %q %v", b, err)
		}
	})
	t.Run("empty-data-dir-is-used", func(t *testing.T) {
		cfg := restoreConfig(t, "bolt")
		if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
			t.Fatal(err)
		}
		if _, err := Restore(cfg); err != nil {
			t.Fatal(err)
		}
	})
}

func writeFile(t *testing.T, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "snap.db")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRestoreDiskFull restores onto a tmpfs too small for the result (it
// needs root to mount one): a clear error, and no data dir, whole or
// partial, is left.
func TestRestoreDiskFull(t *testing.T) {
	// A snapshot of ~4 MiB: a kvd backend with 4000 revisions of 1 KiB.
	src := filepath.Join(t.TempDir(), "src")
	be, err := engine.Open(config.Default(), "bolt", src, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	st, err := mvcc.Open(be, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	val := bytes.Repeat([]byte("v"), 1024)
	if err := st.Apply(func(b *mvcc.Batch) error {
		tw := b.Write()
		for i := range 4000 {
			tw.Put([]byte(fmt.Sprintf("key%05d", i)), val, 0)
		}
		tw.End()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := st.Flush(); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(t.TempDir(), "snap.db")
	tx, err := be.ReadTx()
	if err != nil {
		t.Fatal(err)
	}
	err = etcddb.Export(tx, snap)
	tx.Release()
	st.Close()
	be.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, eng := range engine.Names {
		t.Run(eng, func(t *testing.T) {
			mnt := t.TempDir()
			if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=2m"); err != nil {
				t.Skipf("mount a tmpfs (needs root): %v", err)
			}
			t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
			cfg := restoreConfig(t, eng)
			cfg.SnapshotPath, cfg.SkipHashCheck = snap, true
			cfg.DataDir = filepath.Join(mnt, "n2.kvd")
			_, err := Restore(cfg)
			if !errors.Is(err, engine.ErrNoSpace) {
				t.Fatalf("restore onto a full disk: %v, want ErrNoSpace", err)
			}
			t.Log(err)
			ents, _ := os.ReadDir(mnt)
			if len(ents) != 0 {
				t.Errorf("left on the disk: %v", ents)
			}
		})
	}
}

func TestRestoreWALDir(t *testing.T) {
	cfg := restoreConfig(t, "bolt")
	cfg.WALDir = filepath.Join(t.TempDir(), "wal")
	if _, err := Restore(cfg); err != nil {
		t.Fatal(err)
	}
	l, err := raftlog.Open(raftlog.Options{Dir: cfg.WALDir})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if snap, err := l.Storage().Snapshot(); err != nil || snap.GetMetadata().GetIndex() != 3 {
		t.Fatalf("wal-dir snapshot %v, %v", snap.GetMetadata(), err)
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "member", "wal")); !os.IsNotExist(err) {
		t.Errorf("a WAL in the data dir too: %v", err)
	}
	cfg2 := restoreConfig(t, "bolt")
	cfg2.WALDir = cfg.WALDir
	if _, err := Restore(cfg2); err == nil || !strings.Contains(err.Error(), "wal-dir") {
		t.Fatalf("restore onto an existing wal-dir: %v", err)
	}
}
