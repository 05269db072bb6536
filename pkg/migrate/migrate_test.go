package migrate

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/config"
	"github.com/kvd-dev/kvd/pkg/datadir"
	"github.com/kvd-dev/kvd/pkg/engine"
	"github.com/kvd-dev/kvd/pkg/mvcc"
)

func newConfig(t *testing.T, dataDir string) *config.Config {
	t.Helper()
	if dataDir == "" {
		dataDir = filepath.Join(t.TempDir(), "data")
	}
	return newConfigDir(dataDir)
}

func newConfigDir(dataDir string) *config.Config {
	c := config.Default()
	c.DataDir = dataDir
	return c
}

// writeData fills a data dir's backend of engine eng through the mvcc store
// as a member would: keys with several revisions, tombstones, a finished
// compaction, leases, members, auth records, alarms and the consistent
// index and term.
func writeData(t *testing.T, c *config.Config, eng string, n int) {
	t.Helper()
	be, err := engine.Open(c, eng, filepath.Join(c.SnapDir(), eng), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	s, err := mvcc.Open(be, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ci uint64
	apply := func(fn func(b *mvcc.Batch)) {
		t.Helper()
		ci++
		if err := s.Apply(func(b *mvcc.Batch) error {
			fn(b)
			b.SetConsistentIndex(ci, 3)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	put := func(i int, lease int64) {
		apply(func(b *mvcc.Batch) {
			tw := b.Write()
			tw.Put(fmt.Appendf(nil, "key/%04d", i%(n/4+1)), fmt.Appendf(nil, "value-%d-%s", i, strings.Repeat("x", i%50)), lease)
			tw.End()
		})
	}
	for i := range n {
		put(i, int64(i%3))
	}
	apply(func(b *mvcc.Batch) {
		tw := b.Write()
		tw.DeleteRange([]byte("key/0001"), []byte("key/0005"))
		tw.End()
		for id := int64(1); id <= 3; id++ {
			b.PutLease(id, fmt.Appendf(nil, "lease-%d", id))
		}
		b.PutMember("members/8e9e05c52164694d", []byte(`{"id":1,"peerURLs":["http://127.0.0.1:2380"]}`))
		b.PutMember("members_removed/1234", []byte("removed"))
		b.PutAuth("authEnabled", []byte{1})
		b.PutAuth("users/root", []byte("root-user"))
		b.PutAuth("roles/root", []byte("root-role"))
		b.PutAlarm([]byte("alarm-nospace-1"))
	})
	var done <-chan struct{}
	apply(func(b *mvcc.Batch) {
		var err error
		if done, err = b.Compact(s.Rev() - int64(n/3)); err != nil {
			t.Fatal(err)
		}
	})
	<-done
	for i := n; i < n+n/4; i++ {
		put(i, 0)
	}
	apply(func(b *mvcc.Batch) {
		tw := b.Write()
		tw.DeleteRange([]byte("key/0010"), nil)
		tw.End()
		b.DeleteLease(2)
	})
	if err := errors.Join(s.Close(), be.Close()); err != nil {
		t.Fatal(err)
	}
}

// contents reads every bucket of the data dir's backend of engine eng.
func contents(t *testing.T, c *config.Config, eng string) map[backend.Bucket]map[string]string {
	t.Helper()
	be, err := engine.Open(c, eng, filepath.Join(c.SnapDir(), eng), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	tx, err := be.ReadTx()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Release()
	out := map[backend.Bucket]map[string]string{}
	for _, b := range backend.AllBuckets {
		m := map[string]string{}
		if err := tx.Range(b, nil, nil, 0, func(k, v []byte) bool { m[string(k)] = string(v); return true }); err != nil {
			t.Fatal(err)
		}
		out[b] = m
	}
	return out
}

func hashKV(t *testing.T, c *config.Config, eng string) state {
	t.Helper()
	be, err := engine.Open(c, eng, filepath.Join(c.SnapDir(), eng), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	st, err := storeState(be, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func equalContents(t *testing.T, what string, got, want map[backend.Bucket]map[string]string) {
	t.Helper()
	for _, b := range backend.AllBuckets {
		if !maps.Equal(got[b], want[b]) {
			t.Errorf("%s: bucket %s has %d records, want %d (or different values)", what, b, len(got[b]), len(want[b]))
		}
	}
}

// snapEntries lists the names in the snap dir other than raft snapshots.
func snapEntries(t *testing.T, c *config.Config) []string {
	t.Helper()
	ents, err := os.ReadDir(c.SnapDir())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func run(t *testing.T, c *config.Config, to string) (*Result, error) {
	t.Helper()
	var out strings.Builder
	res, err := Run(Options{Config: c, To: to, Progress: &out})
	if err == nil && !strings.Contains(out.String(), "done in") {
		t.Errorf("no final progress line: %q", out.String())
	}
	return res, err
}

func TestRoundTrip(t *testing.T) {
	c := newConfig(t, "")
	writeData(t, c, "bolt", 400)
	want := contents(t, c, "bolt")
	wantHash := hashKV(t, c, "bolt")
	if wantHash.compactRev <= 0 || len(want[backend.Lease]) != 2 || len(want[backend.Alarm]) != 1 || len(want[backend.Auth]) != 3 ||
		len(want[backend.Members]) != 2 || len(want[backend.Meta]) < 3 {
		t.Fatalf("test data lacks something: %+v, buckets %v", wantHash, func() map[backend.Bucket]int {
			m := map[backend.Bucket]int{}
			for b, r := range want {
				m[b] = len(r)
			}
			return m
		}())
	}
	for _, step := range []struct{ from, to string }{{"bolt", "badger"}, {"badger", "bolt"}} {
		res, err := run(t, c, step.to)
		if err != nil {
			t.Fatalf("%s -> %s: %v", step.from, step.to, err)
		}
		if res.From != step.from || res.To != step.to || res.HashBefore != res.HashAfter || res.HashAfter != wantHash.hash ||
			res.Rev != wantHash.rev || res.CompactRev != wantHash.compactRev || res.ConsistentIndex != wantHash.ci || res.Keys != wantHash.keys {
			t.Errorf("%s -> %s: result %+v, want state %+v", step.from, step.to, res, wantHash)
		}
		var recs int
		for _, m := range want {
			recs += len(m)
		}
		if res.Records != int64(recs) {
			t.Errorf("%s -> %s: %d records copied, want %d", step.from, step.to, res.Records, recs)
		}
		if got := snapEntries(t, c); !slices.Equal(got, []string{step.to}) {
			t.Fatalf("%s -> %s: snap dir holds %v", step.from, step.to, got)
		}
		equalContents(t, step.from+" -> "+step.to, contents(t, c, step.to), want)
		if got := hashKV(t, c, step.to); got != wantHash {
			t.Errorf("%s -> %s: store %+v, want %+v", step.from, step.to, got, wantHash)
		}
	}
}

func TestRefusals(t *testing.T) {
	c := newConfig(t, "")
	writeData(t, c, "bolt", 40)
	want := contents(t, c, "bolt")

	lock, err := datadir.Acquire(c.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, c, "badger"); !errors.Is(err, datadir.ErrInUse) {
		t.Errorf("migrate of a locked data dir: %v, want ErrInUse", err)
	}
	lock.Release()

	if _, err := run(t, c, "bolt"); !errors.Is(err, ErrSameEngine) {
		t.Errorf("--to the engine in use: %v", err)
	}
	if _, err := Run(Options{Config: c, From: "bolt", To: "bbolt"}); !errors.Is(err, ErrSameEngine) {
		t.Errorf("--from bolt --to bbolt: %v", err)
	}
	if _, err := Run(Options{Config: c, From: "badger", To: "bolt"}); !errors.Is(err, ErrNoBackend) {
		t.Errorf("--from an engine not present: %v", err)
	}
	if _, err := run(t, c, "rocksdb"); err == nil || !strings.Contains(err.Error(), "unknown engine") {
		t.Errorf("--to rocksdb: %v", err)
	}
	missing := newConfig(t, filepath.Join(t.TempDir(), "nope"))
	if _, err := run(t, missing, "badger"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing data dir: %v", err)
	}
	if _, err := os.Stat(missing.DataDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("migrate created the missing data dir: %v", err)
	}
	empty := newConfig(t, "")
	if err := os.MkdirAll(empty.SnapDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, empty, "badger"); !errors.Is(err, ErrNoBackend) {
		t.Errorf("data dir without a backend: %v", err)
	}
	if got := snapEntries(t, c); !slices.Equal(got, []string{"bolt"}) {
		t.Errorf("snap dir holds %v after refusals", got)
	}
	equalContents(t, "after refusals", contents(t, c, "bolt"), want)
}

func TestBothEngines(t *testing.T) {
	c := newConfig(t, "")
	writeData(t, c, "bolt", 40)
	want := contents(t, c, "bolt")
	writeData(t, c, "badger", 10) // a stale backend of the other engine
	if _, err := run(t, c, "badger"); !errors.Is(err, ErrBothEngines) {
		t.Fatalf("both engines, no --from: %v", err)
	}
	res, err := Run(Options{Config: c, From: "bolt", To: "badger"})
	if err != nil {
		t.Fatal(err)
	}
	if res.From != "bolt" {
		t.Errorf("from %s", res.From)
	}
	if got := snapEntries(t, c); !slices.Equal(got, []string{"badger"}) {
		t.Fatalf("snap dir holds %v", got)
	}
	equalContents(t, "--from bolt over a stale badger", contents(t, c, "badger"), want)
}

func TestLeftoversCleaned(t *testing.T) {
	c := newConfig(t, "")
	writeData(t, c, "bolt", 40)
	want := contents(t, c, "bolt")
	snap := c.SnapDir()
	// Index files left by clean stops: bolt's describes the backend the
	// migrate replaces, badger's none at all.
	for _, f := range []string{"bolt.index", "badger.index"} {
		if err := os.WriteFile(filepath.Join(snap, f), []byte("index"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A partial copy of an earlier migrate, and one into the other engine.
	for _, d := range []string{"badger" + tempSuffix, "bolt" + tempSuffix} {
		if err := os.MkdirAll(filepath.Join(snap, d, "sub"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(snap, d, "sub", "junk"), []byte("junk"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := run(t, c, "badger"); err != nil {
		t.Fatal(err)
	}
	if got := snapEntries(t, c); !slices.Equal(got, []string{"badger"}) {
		t.Fatalf("snap dir holds %v", got)
	}
	equalContents(t, "after leftovers", contents(t, c, "badger"), want)
}

func TestRecover(t *testing.T) {
	// mk makes each name in snap: an index file for a ".index" name, else
	// a directory holding a file that names it.
	mk := func(t *testing.T, snap string, names ...string) {
		for _, d := range names {
			file := filepath.Join(snap, d, "id")
			if strings.HasSuffix(d, ".index") {
				file = filepath.Join(snap, d)
			}
			if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, []byte(d), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		name   string
		before []string
		after  []string
		// origin[dir] is the directory whose files dir holds afterwards.
		origin map[string]string
	}{
		{"nothing", []string{"bolt"}, []string{"bolt"}, nil},
		{"partial copy", []string{"bolt", "badger.migrate"}, []string{"bolt"}, nil},
		{"crash between the renames", []string{"bolt.migrated", "badger.migrate"}, []string{"bolt"}, map[string]string{"bolt": "bolt.migrated"}},
		{"crash after the switch", []string{"badger", "bolt.migrated"}, []string{"badger"}, map[string]string{"badger": "badger"}},
		{"the other way", []string{"badger.migrated", "bolt.migrate"}, []string{"badger"}, map[string]string{"badger": "badger.migrated"}},
		{"no snap dir", nil, nil, nil},
		// Index files: the live engine's is kept for the store to check, the
		// other engine's has no backend to describe.
		{"index files", []string{"badger", "badger.index", "bolt.index"}, []string{"badger", "badger.index"}, nil},
		{"index file, crash after the switch", []string{"badger", "bolt.migrated", "bolt.index"}, []string{"badger"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := filepath.Join(t.TempDir(), "snap")
			mk(t, snap, tc.before...)
			for range 2 { // idempotent
				if err := Recover(snap, zap.NewNop()); err != nil {
					t.Fatal(err)
				}
			}
			var got []string
			ents, _ := os.ReadDir(snap)
			for _, e := range ents {
				got = append(got, e.Name())
			}
			if !slices.Equal(got, tc.after) {
				t.Fatalf("after Recover: %v, want %v", got, tc.after)
			}
			for dir, from := range tc.origin {
				if b, err := os.ReadFile(filepath.Join(snap, dir, "id")); err != nil || string(b) != from {
					t.Errorf("%s holds %q (%v), want %s's files", dir, b, err, from)
				}
			}
		})
	}
}

// failingBackend fails every Update after the first ok ones with err.
type failingBackend struct {
	backend.Backend
	ok  int
	err error
}

func (f *failingBackend) Update(fn func(backend.WriteTx) error) error {
	if f.ok == 0 {
		return f.err
	}
	f.ok--
	return f.Backend.Update(fn)
}

func TestFailureMidCopy(t *testing.T) {
	c := newConfig(t, "")
	writeData(t, c, "bolt", 400)
	want := contents(t, c, "bolt")
	enospc := &os.PathError{Op: "write", Path: "000001.vlog", Err: syscall.ENOSPC}
	t.Cleanup(func() { openEngine = engine.Open })
	openEngine = func(cc *config.Config, name, dir string, lg *zap.Logger) (backend.Backend, error) {
		be, err := engine.Open(cc, name, dir, lg)
		if err != nil || !strings.HasSuffix(dir, tempSuffix) {
			return be, err
		}
		return &failingBackend{Backend: be, ok: 3, err: enospc}, nil
	}
	_, err := Run(Options{Config: c, To: "badger", BatchBytes: 1 << 10})
	if !errors.Is(err, ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("migrate with a disk that fills: %v", err)
	}
	t.Log(err)
	if got := snapEntries(t, c); !slices.Equal(got, []string{"bolt"}) {
		t.Fatalf("snap dir holds %v", got)
	}
	openEngine = engine.Open
	equalContents(t, "after a failed copy", contents(t, c, "bolt"), want)
}

func TestFailureAtSteps(t *testing.T) {
	for _, at := range []string{"copied", "verified", "aside"} {
		t.Run(at, func(t *testing.T) {
			c := newConfig(t, "")
			writeData(t, c, "bolt", 100)
			want := contents(t, c, "bolt")
			t.Cleanup(func() { step = func(string) error { return nil } })
			boom := errors.New("boom")
			step = func(s string) error {
				if s == at {
					return boom
				}
				return nil
			}
			if _, err := Run(Options{Config: c, To: "badger"}); !errors.Is(err, boom) {
				t.Fatalf("failure at %s: %v", at, err)
			}
			if got := snapEntries(t, c); !slices.Equal(got, []string{"bolt"}) {
				t.Fatalf("snap dir holds %v", got)
			}
			equalContents(t, "after a failure at "+at, contents(t, c, "bolt"), want)
		})
	}
}

// TestCrash kills a migrate (in a child process, os.Exit at a step) and
// checks what Recover, as kvd's start runs it, makes of the leftovers: the
// source before the switch, the target after it, complete either way.
func TestCrash(t *testing.T) {
	if at := os.Getenv("KVD_MIGRATE_CRASH_AT"); at != "" {
		step = func(s string) error {
			if s == at {
				os.Exit(3)
			}
			return nil
		}
		_, err := Run(Options{Config: newConfig(t, os.Getenv("KVD_MIGRATE_DATA_DIR")), To: "badger"})
		t.Fatalf("migrate did not crash at %s: %v", at, err)
	}
	for _, tc := range []struct{ at, live string }{
		{"copied", "bolt"}, {"verified", "bolt"}, {"aside", "bolt"}, {"switched", "badger"},
	} {
		t.Run(tc.at, func(t *testing.T) {
			c := newConfig(t, "")
			writeData(t, c, "bolt", 100)
			want := contents(t, c, "bolt")
			wantHash := hashKV(t, c, "bolt")
			cmd := exec.Command(os.Args[0], "-test.run=^TestCrash$")
			cmd.Env = append(os.Environ(), "KVD_MIGRATE_CRASH_AT="+tc.at, "KVD_MIGRATE_DATA_DIR="+c.DataDir)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 3 {
				t.Fatalf("child: %v\n%s", err, out)
			}
			t.Logf("left by the crash: %v", snapEntries(t, c))
			if err := Recover(c.SnapDir(), zap.NewNop()); err != nil {
				t.Fatal(err)
			}
			if got := snapEntries(t, c); !slices.Equal(got, []string{tc.live}) {
				t.Fatalf("after Recover: %v, want [%s]", got, tc.live)
			}
			equalContents(t, "after the crash", contents(t, c, tc.live), want)
			if got := hashKV(t, c, tc.live); got != wantHash {
				t.Errorf("store %+v, want %+v", got, wantHash)
			}
		})
	}
}

// TestDiskFull fills a small tmpfs (it needs root to mount one): the
// migrate fails with a clear error, no partial copy is left and the source
// is untouched. Into bolt the copy runs until a write fails; into Badger,
// which would die of SIGBUS writing its memory-mapped memtable log on a
// full disk, it is refused before it starts.
func TestDiskFull(t *testing.T) {
	for _, tc := range []struct{ from, to string }{{"badger", "bolt"}, {"bolt", "badger"}} {
		t.Run(tc.from+"-"+tc.to, func(t *testing.T) {
			src := newConfig(t, "")
			writeData(t, src, tc.from, 3000)
			want := contents(t, src, tc.from)
			var size int64
			_ = filepath.Walk(src.DataDir, func(_ string, fi os.FileInfo, err error) error {
				if err == nil && fi.Mode().IsRegular() {
					if st, ok := fi.Sys().(*syscall.Stat_t); ok {
						size += st.Blocks * 512
					}
				}
				return nil
			})
			mnt := t.TempDir()
			limit := size + 32<<10
			if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, fmt.Sprintf("size=%d", limit)); err != nil {
				t.Skipf("mount a tmpfs (needs root): %v", err)
			}
			t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
			c := newConfig(t, filepath.Join(mnt, "data"))
			if out, err := exec.Command("cp", "-a", src.DataDir, c.DataDir).CombinedOutput(); err != nil {
				t.Fatalf("cp: %v\n%s", err, out)
			}
			_, err := Run(Options{Config: c, To: tc.to})
			if !errors.Is(err, ErrNoSpace) {
				t.Fatalf("migrate into a full tmpfs (%d bytes, source %d): %v", limit, size, err)
			}
			t.Log(err)
			if got := snapEntries(t, c); !slices.Equal(got, []string{tc.from}) {
				t.Fatalf("snap dir holds %v", got)
			}
			equalContents(t, "after a full disk", contents(t, c, tc.from), want)
		})
	}
}

// storeState opens the mvcc store on be (it writes nothing: no compaction
// runs, nothing is applied) and reads its HashKV at the current revision:
// what kvHasher must compute without the store.
func storeState(be backend.Backend, lg *zap.Logger) (st state, err error) {
	s, err := mvcc.OpenWithOptions(be, mvcc.Options{Logger: lg.Named("mvcc"), ExternalCompactor: true})
	if err != nil {
		return st, err
	}
	defer func() { err = errors.Join(err, s.Close()) }()
	st.hash, st.rev, st.compactRev, err = s.HashByRev(0)
	if err != nil {
		return st, err
	}
	st.ci, st.term = s.ConsistentIndex(), s.ConsistentTerm()
	r := s.Read()
	defer r.End()
	rr, err := r.Range([]byte{0}, []byte{0}, mvcc.RangeOptions{Count: true})
	if err != nil {
		return st, err
	}
	st.keys = rr.Count
	return st, nil
}
