package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// migrateKVD runs `kvd migrate --data-dir dir --to to` and requires it to
// succeed.
func migrateKVD(t *testing.T, dir, to string) harness.KVDResult {
	t.Helper()
	r := harness.RunKVD(t, 60*time.Second, "migrate", "--data-dir", dir, "--to", to)
	if r.Exit != 0 {
		t.Fatalf("kvd migrate --to %s: %v", to, r)
	}
	return r
}

// snapEngines lists the entries of a kvd data dir's member/snap directory
// that name engines or migrate leftovers.
func snapEngines(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, "member", "snap"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "bolt") || strings.HasPrefix(e.Name(), "badger") {
			out = append(out, e.Name())
		}
	}
	return out
}

// memberView is what a member serves at one revision: every key with its
// revisions, version and lease, the leases, and HashKV.
type memberView struct {
	kvs    []*mvccpb.KeyValue
	leases []clientv3.LeaseID
	hash   uint32
	rev    int64
}

func viewAt(t *testing.T, p *harness.Process, rev int64) memberView {
	t.Helper()
	cli := p.Client(t)
	ctx := testCtx(t)
	g, err := cli.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithRev(rev))
	mustOK(t, "range everything", err)
	h, err := cli.HashKV(ctx, p.Endpoint(), rev)
	mustOK(t, "hashkv", err)
	ls, err := cli.Leases(ctx)
	mustOK(t, "leases", err)
	v := memberView{kvs: g.Kvs, hash: h.Hash, rev: rev}
	for _, l := range ls.Leases {
		v.leases = append(v.leases, l.ID)
	}
	slices.Sort(v.leases)
	return v
}

func sameView(t *testing.T, what string, got, want memberView) {
	t.Helper()
	if got.hash != want.hash {
		t.Errorf("%s: HashKV at %d = %d, want %d", what, want.rev, got.hash, want.hash)
	}
	if !slices.Equal(got.leases, want.leases) {
		t.Errorf("%s: leases %v, want %v", what, got.leases, want.leases)
	}
	if len(got.kvs) != len(want.kvs) {
		t.Errorf("%s: %d keys at %d, want %d", what, len(got.kvs), want.rev, len(want.kvs))
		return
	}
	for i, w := range want.kvs {
		g := got.kvs[i]
		if string(g.Key) != string(w.Key) || string(g.Value) != string(w.Value) || g.CreateRevision != w.CreateRevision ||
			g.ModRevision != w.ModRevision || g.Version != w.Version || g.Lease != w.Lease {
			t.Errorf("%s: key %d = %v, want %v", what, i, g, w)
		}
	}
}

// TestMigrateMember moves one member's data bolt -> badger -> bolt with kvd
// migrate: the member serves the same keys (with their revisions, versions
// and leases), leases and HashKV after each move, and takes writes. A
// running member's data dir is refused, and so is a start on the engine
// the data left.
func TestMigrateMember(t *testing.T) {
	if harness.Kind() == harness.KindEtcd {
		t.Skip("kvd migrate is kvd's")
	}
	p := harness.StartKVD(t, harness.Options{Engine: "bolt"})
	cli := p.Client(t)
	ctx := testCtx(t)
	lease, err := cli.Grant(ctx, 600)
	mustOK(t, "grant", err)
	lease2, err := cli.Grant(ctx, 900)
	mustOK(t, "grant", err)
	var rev int64
	for i := range 300 {
		opts := []clientv3.OpOption{}
		if i%7 == 0 {
			opts = append(opts, clientv3.WithLease(lease.ID))
		}
		r, err := cli.Put(ctx, fmt.Sprintf("mig/k%03d", i%60), fmt.Sprintf("v%d", i), opts...)
		mustOK(t, "put", err)
		rev = r.Header.Revision
	}
	_, err = cli.Delete(ctx, "mig/k01", clientv3.WithPrefix())
	mustOK(t, "delete", err)
	_, err = cli.Compact(ctx, rev-50, clientv3.WithCompactPhysical())
	mustOK(t, "compact", err)
	r, err := cli.Put(ctx, "mig/leased", "x", clientv3.WithLease(lease2.ID))
	mustOK(t, "put", err)
	rev = r.Header.Revision
	want := viewAt(t, p, rev)

	// Refused while the member runs: the data-dir lock.
	res := harness.RunKVD(t, 30*time.Second, "migrate", "--data-dir", p.DataDir(), "--to", "badger")
	if res.Exit != 1 || !strings.Contains(res.Stderr, "data dir is in use") {
		t.Fatalf("migrate of a running member's data dir: %v", res)
	}

	p.Stop()
	res = migrateKVD(t, p.DataDir(), "badger")
	t.Logf("kvd migrate --to badger:\n%s%s", res.Stdout, res.Stderr)
	if !strings.Contains(res.Stdout, "bolt -> badger") || !strings.Contains(res.Stdout, fmt.Sprintf("before %d, after %d", want.hash, want.hash)) {
		t.Errorf("migrate output lacks the engines or the HashKV %d: %s", want.hash, res.Stdout)
	}
	if got := snapEngines(t, p.DataDir()); !slices.Equal(got, []string{"badger"}) {
		t.Fatalf("snap dir after migrate: %v", got)
	}

	// The old engine is refused: its backend is gone.
	p.Start()
	if !p.WaitExit(30 * time.Second) {
		t.Fatalf("kvd started on bolt beside a badger backend")
	}
	if !p.LogContains("run `kvd migrate --data-dir") || !p.LogContains("holds a badger backend, not bolt") {
		t.Fatalf("start on the old engine: no checkEngineDir message:\n%s", p.LogTail(20))
	}

	p.AddArgs("--backend", "badger")
	p.Restart()
	sameView(t, "on badger", viewAt(t, p, rev), want)
	cli = p.Client(t)
	ctx = testCtx(t)
	w, err := cli.Put(ctx, "mig/after-badger", "y")
	mustOK(t, "put on badger", err)
	g, err := cli.Get(ctx, "mig/after-badger")
	mustOK(t, "get on badger", err)
	if len(g.Kvs) != 1 || string(g.Kvs[0].Value) != "y" || g.Kvs[0].ModRevision != w.Header.Revision {
		t.Fatalf("read back on badger: %v", g.Kvs)
	}
	want = viewAt(t, p, w.Header.Revision)

	// Back to bolt; a leftover of an interrupted migrate is removed at
	// start.
	p.Stop()
	migrateKVD(t, p.DataDir(), "bolt")
	junk := filepath.Join(p.DataDir(), "member", "snap", "badger.migrate")
	if err := os.MkdirAll(junk, 0o700); err != nil {
		t.Fatal(err)
	}
	p.AddArgs("--backend", "bolt")
	p.Restart()
	if got := snapEngines(t, p.DataDir()); !slices.Equal(got, []string{"bolt"}) {
		t.Errorf("snap dir after the start on bolt: %v", got)
	}
	sameView(t, "back on bolt", viewAt(t, p, w.Header.Revision), want)
	_, err = p.Client(t).Put(testCtx(t), "mig/after-bolt", "z")
	mustOK(t, "put on bolt", err)
}

// TestMigrateRolling rolls a 3-member cluster under a write load from bolt
// to badger, one member at a time (stop, kvd migrate, start on badger,
// caught up): every acknowledged write ends on every member and the
// members agree on HashKV, mixed engines included on the way.
func TestMigrateRolling(t *testing.T) {
	if harness.Kind() == harness.KindEtcd {
		t.Skip("kvd migrate is kvd's")
	}
	c := harness.StartCluster(t, 3, faultOptions("bolt"))
	load := startWriteLoad(c.Client(t), "roll/", 4)
	defer load.stop()
	load.waitAcked(t, "writes before the roll", 200, 30*time.Second)
	for _, m := range c.Members() {
		m.Stop()
		start := time.Now()
		res := migrateKVD(t, m.DataDir(), "badger")
		t.Logf("%s migrated in %v: %s", m.Name(), time.Since(start).Round(time.Millisecond), strings.SplitN(res.Stdout, "\n", 3)[1])
		m.AddArgs("--backend", "badger")
		m.Restart()
		load.waitAcked(t, "writes after "+m.Name()+" moved", 100, 30*time.Second)
		// Caught up: its serializable reads reach a revision the cluster
		// had after it came back.
		head, err := c.Client(t).Get(testCtx(t), "roll-probe")
		mustOK(t, "linearizable get", err)
		mc := c.ClientFor(t, m.Endpoint())
		eventually(t, m.Name()+" caught up", convergeTimeout, func() error {
			g, err := mc.Get(shortCtx(t, 2*time.Second), "roll-probe", clientv3.WithSerializable())
			if err != nil {
				return err
			}
			if g.Header.Revision < head.Header.Revision {
				return fmt.Errorf("at revision %d, cluster at %d", g.Header.Revision, head.Header.Revision)
			}
			return nil
		})
	}
	acked := load.stop()
	t.Logf("%d writes acknowledged, %d failed (last error %v)", len(acked), load.failed, load.last)
	verifyAckedEverywhere(t, c, "roll/", acked)
	for _, m := range c.Members() {
		if got := snapEngines(t, m.DataDir()); !slices.Equal(got, []string{"badger"}) {
			t.Errorf("%s: snap dir %v", m.Name(), got)
		}
	}
}
