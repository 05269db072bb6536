package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// Snapshot save and restore across etcd and kvd: an etcd v3.7.3 snapshot
// restored into kvd (`kvd snapshot restore`), and kvd's snapshot restored
// into etcd (`etcdutl snapshot restore`), must serve the same keys, history,
// compaction point, leases, auth data and HashKV as the original etcd.

const (
	srRootUser = "root"
	srRootPass = "rootpw"
	// srLeaseTolerance bounds how far a restored lease's remaining TTL may
	// be below its granted TTL (the restore restarts the lease clocks).
	srLeaseTolerance = 30
)

// srNoFsync makes the source etcd write its history quickly.
var srNoFsync = []string{"--unsafe-no-fsync"}

// srNode is one planned member: its name and URLs.
type srNode struct{ name, client, peer string }

// srNodes picks free loopback ports for n members named prefix0...
func srNodes(t *testing.T, prefix string, n int) []srNode {
	t.Helper()
	var ports []string
	var ls []net.Listener
	for range 2 * n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, ln)
		ports = append(ports, "http://"+ln.Addr().String())
	}
	for _, ln := range ls {
		ln.Close()
	}
	nodes := make([]srNode, n)
	for i := range nodes {
		nodes[i] = srNode{name: fmt.Sprintf("%s%d", prefix, i), client: ports[2*i], peer: ports[2*i+1]}
	}
	return nodes
}

func srInitialCluster(nodes []srNode) string {
	var parts []string
	for _, n := range nodes {
		parts = append(parts, n.name+"="+n.peer)
	}
	return strings.Join(parts, ",")
}

// srRun runs bin with args and returns its stdout, stderr and error.
func srRun(bin string, args ...string) (string, string, error) {
	cmd := exec.Command(bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = etcdctlEnv()
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// srMustRun is srRun failing the test on error.
func srMustRun(t *testing.T, bin string, args ...string) string {
	t.Helper()
	out, errOut, err := srRun(bin, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\nstdout: %s\nstderr: %s", filepath.Base(bin), strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// srRestoreArgs are the restore flags shared by kvd and etcdutl.
func srRestoreArgs(snap, dataDir string, n srNode, nodes []srNode, token string) []string {
	return []string{"snapshot", "restore", snap, "--data-dir", dataDir, "--name", n.name,
		"--initial-cluster", srInitialCluster(nodes), "--initial-cluster-token", token,
		"--initial-advertise-peer-urls", n.peer}
}

// srRestoreServer restores snap into dataDir for the server under test:
// `kvd snapshot restore --backend engine`, or etcdutl's restore when the
// server under test is etcd (KVD_E2E_SERVER=etcd).
func srRestoreServer(t *testing.T, snap, dataDir, engine string, n srNode, nodes []srNode, token string, extra ...string) {
	t.Helper()
	args := append(srRestoreArgs(snap, dataDir, n, nodes, token), extra...)
	if harness.Kind() == harness.KindEtcd {
		srMustRun(t, harness.EtcdutlBinary(t), args...)
		return
	}
	srMustRun(t, harness.KVDBinary(t), append(args, "--backend", engine)...)
}

// srRestoreEtcd restores snap into dataDir with etcdutl.
func srRestoreEtcd(t *testing.T, snap, dataDir string, n srNode, nodes []srNode, token string, extra ...string) {
	t.Helper()
	srMustRun(t, harness.EtcdutlBinary(t), append(srRestoreArgs(snap, dataDir, n, nodes, token), extra...)...)
}

// srStart starts a member (the server under test, or etcd with isEtcd) on
// a restored data dir, without waiting for it.
func srStart(t *testing.T, isEtcd bool, engine, dataDir string, n srNode, nodes []srNode, token string) *harness.Process {
	t.Helper()
	opts := harness.Options{Engine: engine, Name: n.name, DataDir: dataDir, Member: &harness.MemberConfig{
		ClientURL: n.client, PeerListenURL: n.peer, InitialCluster: srInitialCluster(nodes), State: "new", Token: token,
	}}
	if isEtcd {
		return harness.StartEtcd(t, opts)
	}
	return harness.StartKVD(t, opts)
}

// srRootClient is a client with root's credentials.
func srRootClient(t *testing.T, endpoint string) *clientv3.Client {
	t.Helper()
	cfg := harness.ClientConfig(endpoint)
	cfg.Username, cfg.Password = srRootUser, srRootPass
	c, err := clientv3.New(cfg)
	if err != nil {
		t.Fatalf("root client for %s: %v", endpoint, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// srSave saves a snapshot of endpoint with etcdctl (as root when auth)
// into dir (a new t.TempDir() when empty).
func srSave(t *testing.T, dir, endpoint string, auth bool) string {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	path := filepath.Join(dir, "snap.db")
	args := []string{"--endpoints", endpoint, "--dial-timeout", "5s", "--command-timeout", "30s"}
	if auth {
		args = append(args, "--user", srRootUser+":"+srRootPass)
	}
	out := srMustRun(t, harness.EtcdctlBinary(t), append(args, "snapshot", "save", path)...)
	if !strings.Contains(out, "Snapshot saved at") {
		t.Fatalf("etcdctl snapshot save said: %s", out)
	}
	return path
}

// srCheckStatus checks that `kvd snapshot status` prints what `etcdutl
// snapshot status` prints, in every output format, and returns the json.
func srCheckStatus(t *testing.T, snap string) string {
	t.Helper()
	var js string
	for _, w := range []string{"json", "simple", "table", "fields"} {
		want := srMustRun(t, harness.EtcdutlBinary(t), "snapshot", "status", snap, "-w", w)
		got := srMustRun(t, harness.KVDBinary(t), "snapshot", "status", snap, "-w", w)
		if got != want {
			t.Errorf("snapshot status -w %s of %s:\nkvd:     %q\netcdutl: %q", w, filepath.Base(snap), got, want)
		}
		if w == "json" {
			js = strings.TrimSpace(want)
		}
	}
	return js
}

// srHistory is what srWriteHistory wrote.
type srHistory struct {
	compactRev int64   // the compaction in the middle
	revs       []int64 // older revisions above it, to read at
	rev        int64   // the last revision
	expired    int64   // the lease that expired before the snapshot
}

// srWriteHistory writes a varied history on a fresh etcd: puts (several
// versions of some keys), deletes, txns, three leases (one with two keys,
// one without keys, one expired), a compaction in the middle and auth
// (enabled last). Afterwards only root's credentials work.
func srWriteHistory(t *testing.T, cli *clientv3.Client) srHistory {
	t.Helper()
	ctx := testCtx(t)
	var h srHistory
	put := func(k, v string, opts ...clientv3.OpOption) int64 {
		t.Helper()
		r, err := cli.Put(ctx, k, v, opts...)
		mustOK(t, "put "+k, err)
		return r.Header.Revision
	}
	// The lease that expires first, so that its expiry overlaps the rest.
	short, err := cli.Grant(ctx, 2)
	mustOK(t, "grant short lease", err)
	h.expired = int64(short.ID)
	put("lease/short", "gone soon", clientv3.WithLease(short.ID))
	withKeys, err := cli.Grant(ctx, 600)
	mustOK(t, "grant lease with keys", err)
	_, err = cli.Grant(ctx, 900)
	mustOK(t, "grant lease without keys", err)
	put("lease/a", "A", clientv3.WithLease(withKeys.ID))
	put("lease/b", "B", clientv3.WithLease(withKeys.ID))

	for i := range 300 {
		put(fmt.Sprintf("k/%03d", i), fmt.Sprintf("v0-%d", i))
	}
	for v := 1; v <= 3; v++ {
		for i := range 40 {
			put(fmt.Sprintf("k/%03d", i*7%300), fmt.Sprintf("v%d-%d", v, i))
		}
	}
	_, err = cli.Delete(ctx, "k/100")
	mustOK(t, "delete k/100", err)
	_, err = cli.Delete(ctx, "k/200", clientv3.WithRange("k/220"))
	mustOK(t, "delete [k/200, k/220)", err)
	tr, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Version("k/001"), ">", 0)).
		Then(clientv3.OpPut("txn/a", "1"), clientv3.OpPut("txn/b", "2"), clientv3.OpDelete("k/002")).
		Else(clientv3.OpPut("txn/else", "x")).Commit()
	mustOK(t, "txn", err)
	if !tr.Succeeded {
		t.Fatal("txn: the compare failed")
	}

	h.compactRev = tr.Header.Revision
	_, err = cli.Compact(ctx, h.compactRev, clientv3.WithCompactPhysical())
	mustOK(t, "compact", err)

	for i := range 60 {
		rev := put(fmt.Sprintf("k/%03d", i*3), fmt.Sprintf("after-compact-%d", i))
		if i%20 == 19 {
			h.revs = append(h.revs, rev)
		}
	}
	_, err = cli.Delete(ctx, "k/29", clientv3.WithPrefix())
	mustOK(t, "delete prefix k/29", err)
	tr, err = cli.Txn(ctx).If(clientv3.Compare(clientv3.Value("txn/a"), "=", "nope")).
		Then(clientv3.OpPut("txn/then", "x")).
		Else(clientv3.OpPut("txn/a", "else"), clientv3.OpPut("lease/c", "C", clientv3.WithLease(withKeys.ID))).Commit()
	mustOK(t, "txn else", err)
	if tr.Succeeded {
		t.Fatal("txn: the compare succeeded")
	}
	h.revs = append(h.revs, tr.Header.Revision)

	eventually(t, "the short lease expired", 15*time.Second, func() error {
		r, err := cli.TimeToLive(ctx, short.ID)
		if err != nil {
			return err
		}
		if r.TTL != -1 {
			return fmt.Errorf("TTL %d", r.TTL)
		}
		g, err := cli.Get(ctx, "lease/short")
		if err != nil {
			return err
		}
		if len(g.Kvs) != 0 {
			return fmt.Errorf("lease/short still there")
		}
		return nil
	})

	for _, op := range []struct {
		what string
		do   func() error
	}{
		{"user add alice", func() error { _, err := cli.UserAdd(ctx, "alice", "alicepw"); return err }},
		{"role add reader", func() error { _, err := cli.RoleAdd(ctx, "reader"); return err }},
		{"grant reader [k/, k0)", func() error {
			_, err := cli.RoleGrantPermission(ctx, "reader", "k/", "k0", clientv3.PermissionType(clientv3.PermRead))
			return err
		}},
		{"grant reader txn/a", func() error {
			_, err := cli.RoleGrantPermission(ctx, "reader", "txn/a", "", clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		}},
		{"grant alice reader", func() error { _, err := cli.UserGrantRole(ctx, "alice", "reader"); return err }},
		{"user add root", func() error { _, err := cli.UserAdd(ctx, srRootUser, srRootPass); return err }},
		{"grant root root", func() error { _, err := cli.UserGrantRole(ctx, srRootUser, "root"); return err }},
		{"auth enable", func() error { _, err := cli.AuthEnable(ctx); return err }},
	} {
		mustOK(t, op.what, op.do())
	}
	g, err := cli.Get(ctx, "k/001")
	if err == nil {
		t.Fatalf("anonymous get after auth enable: %v, want a refusal", g)
	}
	return h
}

// srState is what a member serves, in comparable form.
type srState struct {
	rev        int64
	compactRev int64
	hash       uint32
	hashRev    int64
	ranges     map[int64][]string // by revision (0: current); an error as its text
	leases     []string           // id, granted TTL, attached keys
	ttls       map[string]int64   // remaining TTL by lease id
	auth       []string
}

// srCollect reads srState from the member at endpoint with a root client.
func srCollect(t *testing.T, who, endpoint string, h srHistory) srState {
	t.Helper()
	cli := srRootClient(t, endpoint)
	ctx := testCtx(t)
	st := srState{ranges: map[int64][]string{}, ttls: map[string]int64{}}
	for _, rev := range append([]int64{0, h.compactRev}, h.revs...) {
		r, err := cli.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithRev(rev))
		if err != nil {
			st.ranges[rev] = []string{"error: " + err.Error()}
			continue
		}
		if rev == 0 {
			st.rev = r.Header.Revision
		}
		lines := srKVLines(r.Kvs)
		if int64(len(r.Kvs)) != r.Count || r.More {
			lines = append(lines, fmt.Sprintf("count=%d more=%v", r.Count, r.More))
		}
		st.ranges[rev] = lines
	}
	// A read below the compaction point is refused as compacted.
	_, err := cli.Get(ctx, "k/001", clientv3.WithRev(h.compactRev-1))
	wantErr(t, fmt.Sprintf("%s: get at %d, below the compaction at %d", who, h.compactRev-1, h.compactRev), err, rpctypes.ErrCompacted)

	hk, err := cli.HashKV(ctx, endpoint, 0)
	mustOK(t, who+": hashkv", err)
	st.hash, st.compactRev, st.hashRev = hk.Hash, hk.CompactRevision, hk.Header.Revision

	ls, err := cli.Leases(ctx)
	mustOK(t, who+": lease list", err)
	for _, l := range ls.Leases {
		ttl, err := cli.TimeToLive(ctx, l.ID, clientv3.WithAttachedKeys())
		mustOK(t, fmt.Sprintf("%s: lease %x time to live", who, l.ID), err)
		var keys []string
		for _, k := range ttl.Keys {
			keys = append(keys, string(k))
		}
		sort.Strings(keys)
		id := fmt.Sprintf("%x", l.ID)
		st.leases = append(st.leases, fmt.Sprintf("lease %s granted=%d keys=%v", id, ttl.GrantedTTL, keys))
		st.ttls[id] = ttl.TTL
	}
	sort.Strings(st.leases)
	// The expired lease is gone.
	if r, err := cli.TimeToLive(ctx, clientv3.LeaseID(h.expired)); err != nil || r.TTL != -1 {
		t.Errorf("%s: the expired lease %x: TTL %v, %v; want -1 (not found)", who, h.expired, r, err)
	}

	as, err := cli.AuthStatus(ctx)
	mustOK(t, who+": auth status", err)
	st.auth = append(st.auth, fmt.Sprintf("auth enabled=%v revision=%d", as.Enabled, as.AuthRevision))
	ul, err := cli.UserList(ctx)
	mustOK(t, who+": user list", err)
	for _, u := range ul.Users {
		ug, err := cli.UserGet(ctx, u)
		mustOK(t, who+": user get "+u, err)
		st.auth = append(st.auth, fmt.Sprintf("user %s roles=%v", u, ug.Roles))
	}
	rl, err := cli.RoleList(ctx)
	mustOK(t, who+": role list", err)
	for _, r := range rl.Roles {
		rg, err := cli.RoleGet(ctx, r)
		mustOK(t, who+": role get "+r, err)
		var perms []string
		for _, p := range rg.Perm {
			perms = append(perms, fmt.Sprintf("%s[%q,%q)", p.PermType, p.Key, p.RangeEnd))
		}
		st.auth = append(st.auth, fmt.Sprintf("role %s perms=%v", r, perms))
	}
	// The restored users authenticate: alice reads her range and only it.
	cfg := harness.ClientConfig(endpoint)
	cfg.Username, cfg.Password = "alice", "alicepw"
	alice, err := clientv3.New(cfg)
	mustOK(t, who+": alice's client", err)
	defer alice.Close()
	if _, err := alice.Get(ctx, "k/001"); err != nil {
		t.Errorf("%s: alice reads k/001: %v", who, err)
	}
	_, err = alice.Get(ctx, "lease/a")
	wantErr(t, who+": alice reads lease/a", err, rpctypes.ErrPermissionDenied)
	return st
}

// srCompare compares a restored member's state with the original's.
func srCompare(t *testing.T, who string, want, got srState) {
	t.Helper()
	if got.rev != want.rev {
		t.Errorf("%s: header revision %d, want %d", who, got.rev, want.rev)
	}
	if got.compactRev != want.compactRev {
		t.Errorf("%s: compact revision %d, want %d", who, got.compactRev, want.compactRev)
	}
	revs := make([]int64, 0, len(want.ranges))
	for r := range want.ranges {
		revs = append(revs, r)
	}
	sort.Slice(revs, func(i, j int) bool { return revs[i] < revs[j] })
	for _, r := range revs {
		srDiff(t, fmt.Sprintf("%s: range at revision %d", who, r), want.ranges[r], got.ranges[r])
	}
	srDiff(t, who+": leases", want.leases, got.leases)
	for id, ttl := range got.ttls {
		var granted int64
		for _, l := range got.leases {
			if strings.HasPrefix(l, "lease "+id+" ") {
				fmt.Sscanf(strings.TrimPrefix(l, "lease "+id+" "), "granted=%d", &granted)
			}
		}
		if ttl > granted || ttl < granted-srLeaseTolerance {
			t.Errorf("%s: lease %s: remaining TTL %d, want within %ds of its granted %d", who, id, ttl, srLeaseTolerance, granted)
		}
	}
	srDiff(t, who+": auth", want.auth, got.auth)
}

// srCompareHash compares HashKV at the current revision; a subtest of its
// own, so that a difference there is told apart from the data's.
func srCompareHash(t *testing.T, who string, want, got srState) {
	t.Helper()
	t.Run("hashkv", func(t *testing.T) {
		if got.hashRev != want.hashRev || got.hash != want.hash || got.compactRev != want.compactRev {
			t.Errorf("%s: HashKV at revision %d = %d (compact %d), etcd's at %d = %d (compact %d)",
				who, got.hashRev, got.hash, got.compactRev, want.hashRev, want.hash, want.compactRev)
		}
	})
}

// srDiff reports the first lines where got and want differ.
func srDiff(t *testing.T, what string, want, got []string) {
	t.Helper()
	if strings.Join(want, "\n") == strings.Join(got, "\n") {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d lines, want %d", what, len(got), len(want))
	shown := 0
	for i := 0; i < max(len(want), len(got)) && shown < 8; i++ {
		var w, g string
		if i < len(want) {
			w = want[i]
		}
		if i < len(got) {
			g = got[i]
		}
		if w != g {
			fmt.Fprintf(&b, "\n  line %d:\n    got:  %s\n    want: %s", i, g, w)
			shown++
		}
	}
	t.Error(b.String())
}

// srCheckWrites checks that the member takes a write and serves it.
func srCheckWrites(t *testing.T, who, endpoint string, lastRev int64) {
	t.Helper()
	cli := srRootClient(t, endpoint)
	ctx := testCtx(t)
	r, err := cli.Put(ctx, "after-restore", who)
	mustOK(t, who+": put after the restore", err)
	if r.Header.Revision != lastRev+1 {
		t.Errorf("%s: put after the restore at revision %d, want %d", who, r.Header.Revision, lastRev+1)
	}
	g, err := cli.Get(ctx, "after-restore")
	mustOK(t, who+": get after the restore", err)
	if len(g.Kvs) != 1 || string(g.Kvs[0].Value) != who || g.Kvs[0].ModRevision != r.Header.Revision {
		t.Errorf("%s: get after the restore: %v", who, g.Kvs)
	}
}

// TestSnapshotRoundTripEtcdKVDEtcd: etcd's snapshot, restored into kvd on
// each engine, serves what etcd serves; kvd's snapshot of it, restored into
// etcd with etcdutl, does too.
func TestSnapshotRoundTripEtcdKVDEtcd(t *testing.T) {
	start := time.Now()
	src := harness.StartEtcd(t, harness.Options{Name: "src", Args: srNoFsync})
	h := srWriteHistory(t, src.Client(t))
	want := srCollect(t, "etcd", src.Endpoint(), h)
	if len(want.ranges[0]) < 250 || len(want.leases) != 2 {
		t.Fatalf("etcd serves %d keys and %d leases, want about 280 and 2", len(want.ranges[0]), len(want.leases))
	}
	snap := srSave(t, "", src.Endpoint(), true)
	srCheckStatus(t, snap)
	t.Logf("etcd history written and saved in %v", time.Since(start).Round(time.Millisecond))

	for _, engine := range harness.Engines() {
		t.Run(engine, func(t *testing.T) {
			const token = "round-trip"
			nodes := srNodes(t, "kvd", 1)
			dir := filepath.Join(t.TempDir(), "kvd")
			srRestoreServer(t, snap, dir, engine, nodes[0], nodes, token)
			p := srStart(t, false, engine, dir, nodes[0], nodes, token)
			p.WaitReady(harness.StartTimeout)
			got := srCollect(t, p.Label(), p.Endpoint(), h)
			srCompare(t, p.Label()+" from etcd's snapshot", want, got)
			srCompareHash(t, p.Label()+" from etcd's snapshot", want, got)

			// Back to etcd: kvd's snapshot through etcdutl.
			back := srSave(t, "", p.Endpoint(), true)
			js := srCheckStatus(t, back)
			t.Logf("etcdutl snapshot status of %s's snapshot: %s", p.Label(), js)
			srCheckWrites(t, p.Label(), p.Endpoint(), want.rev)

			enodes := srNodes(t, "etcd", 1)
			edir := filepath.Join(t.TempDir(), "etcd")
			srRestoreEtcd(t, back, edir, enodes[0], enodes, token)
			e := srStart(t, true, "", edir, enodes[0], enodes, token)
			e.WaitReady(harness.StartTimeout)
			egot := srCollect(t, "etcd from "+p.Label()+"'s snapshot", e.Endpoint(), h)
			srCompare(t, "etcd from "+p.Label()+"'s snapshot", want, egot)
			srCompareHash(t, "etcd from "+p.Label()+"'s snapshot", want, egot)
			srCheckWrites(t, "etcd from "+p.Label()+"'s snapshot", e.Endpoint(), want.rev)
		})
	}
	t.Logf("took %v", time.Since(start).Round(time.Millisecond))
}

// TestSnapshotRestoreCluster: one etcd snapshot restored into the data dirs
// of three kvd members (both engines among them) gives a three-member
// cluster whose every member serves the restored data with etcd's revision
// and HashKV, and replicates new writes.
func TestSnapshotRestoreCluster(t *testing.T) {
	src := harness.StartEtcd(t, harness.Options{Name: "src", Args: srNoFsync})
	scli := src.Client(t)
	ctx := testCtx(t)
	lease, err := scli.Grant(ctx, 600)
	mustOK(t, "grant", err)
	for i := range 100 {
		var opts []clientv3.OpOption
		if i%10 == 0 {
			opts = append(opts, clientv3.WithLease(lease.ID))
		}
		_, err := scli.Put(ctx, fmt.Sprintf("c/%03d", i), fmt.Sprintf("v%d", i), opts...)
		mustOK(t, "put", err)
	}
	r, err := scli.Put(ctx, "c/000", "again")
	mustOK(t, "put", err)
	_, err = scli.Compact(ctx, r.Header.Revision-50, clientv3.WithCompactPhysical())
	mustOK(t, "compact", err)
	r, err = scli.Put(ctx, "c/001", "last")
	mustOK(t, "put", err)
	srcRev := r.Header.Revision
	srcHash, err := scli.HashKV(ctx, src.Endpoint(), srcRev)
	mustOK(t, "etcd hashkv", err)
	srcAll, err := scli.Get(ctx, "", clientv3.WithPrefix())
	mustOK(t, "etcd get all", err)
	snap := srSave(t, "", src.Endpoint(), false)
	src.Stop()

	const token = "restored-cluster"
	nodes := srNodes(t, "m", 3)
	engines := []string{"bolt", "badger", "bolt"}
	var procs []*harness.Process
	for i, n := range nodes {
		dir := filepath.Join(t.TempDir(), n.name)
		srRestoreServer(t, snap, dir, engines[i], n, nodes, token)
		procs = append(procs, srStart(t, false, engines[i], dir, n, nodes, token))
	}
	for _, p := range procs {
		p.WaitReady(harness.StartTimeout)
	}

	cli := procs[0].Client(t)
	ml, err := cli.MemberList(ctx)
	mustOK(t, "member list", err)
	if len(ml.Members) != 3 {
		t.Fatalf("member list: %d members, want 3: %v", len(ml.Members), ml.Members)
	}
	byName := map[string]string{}
	for _, m := range ml.Members {
		byName[m.Name] = strings.Join(m.PeerURLs, ",")
	}
	for _, n := range nodes {
		if byName[n.name] != n.peer {
			t.Errorf("member list: member %s has peer URLs %q, want %q (list %v)", n.name, byName[n.name], n.peer, ml.Members)
		}
	}

	check := func(rev int64, wantHash uint32, what string) {
		t.Helper()
		for i, p := range procs {
			mc := p.Client(t)
			eventually(t, fmt.Sprintf("%s applied revision %d", p.Name(), rev), convergeTimeout, func() error {
				g, err := mc.Get(ctx, "c/000", clientv3.WithSerializable())
				if err != nil {
					return err
				}
				if g.Header.Revision != rev {
					return fmt.Errorf("revision %d", g.Header.Revision)
				}
				return nil
			})
			g, err := mc.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithSerializable())
			mustOK(t, p.Name()+": get all", err)
			if rev == srcRev {
				srDiff(t, fmt.Sprintf("%s (%s): keys", p.Name(), engines[i]), srKVLines(srcAll.Kvs), srKVLines(g.Kvs))
			}
			hk, err := mc.HashKV(ctx, p.Endpoint(), rev)
			mustOK(t, p.Name()+": hashkv", err)
			if hk.Hash != wantHash || hk.CompactRevision != srcHash.CompactRevision {
				t.Errorf("%s (%s): %s: HashKV at %d = %d (compact %d), want %d (compact %d)", p.Name(), engines[i], what,
					rev, hk.Hash, hk.CompactRevision, wantHash, srcHash.CompactRevision)
			}
			ttl, err := mc.TimeToLive(ctx, lease.ID, clientv3.WithAttachedKeys())
			mustOK(t, p.Name()+": lease time to live", err)
			if len(ttl.Keys) != 9 || ttl.GrantedTTL != 600 {
				t.Errorf("%s: lease %x: %d keys, granted %d; want 9 keys (c/000 was put again without it), 600", p.Name(), lease.ID, len(ttl.Keys), ttl.GrantedTTL)
			}
		}
	}
	check(srcRev, srcHash.Hash, "restored")

	// Writes through a follower replicate everywhere.
	w, err := procs[2].Client(t).Put(ctx, "c/new", "replicated")
	mustOK(t, "put after the restore", err)
	if w.Header.Revision != srcRev+1 {
		t.Errorf("put after the restore at revision %d, want %d", w.Header.Revision, srcRev+1)
	}
	hk, err := procs[2].Client(t).HashKV(ctx, procs[2].Endpoint(), w.Header.Revision)
	mustOK(t, "hashkv after the put", err)
	check(w.Header.Revision, hk.Hash, "after a write")
}

func srKVLines(kvs []*mvccpb.KeyValue) []string {
	var lines []string
	for _, kv := range kvs {
		lines = append(lines, fmt.Sprintf("%s create=%d mod=%d version=%d lease=%x value=%q",
			kv.Key, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease, kv.Value))
	}
	return lines
}

// TestSnapshotRestoreRefusesBadInput: `kvd snapshot restore` refuses a
// damaged snapshot and bad flags with a clear message and leaves no data
// dir behind; --bump-revision with --mark-compacted does what etcdutl's
// does.
func TestSnapshotRestoreRefusesBadInput(t *testing.T) {
	src := harness.StartEtcd(t, harness.Options{Name: "src", Args: srNoFsync})
	scli := src.Client(t)
	ctx := testCtx(t)
	for i := range 50 {
		_, err := scli.Put(ctx, fmt.Sprintf("b/%02d", i), fmt.Sprintf("v%d", i))
		mustOK(t, "put", err)
	}
	r, err := scli.Put(ctx, "b/00", "last")
	mustOK(t, "put", err)
	oldRev := r.Header.Revision
	snap := srSave(t, "", src.Endpoint(), false)
	src.Stop()

	t.Run("bad-input", func(t *testing.T) {
		if harness.Kind() == harness.KindEtcd {
			t.Skip("kvd's own messages and data dir handling")
		}
		data, err := os.ReadFile(snap)
		mustOK(t, "read snapshot", err)
		if len(data)%512 != sha256.Size {
			t.Fatalf("snapshot of %d bytes has no sha256 trailer", len(data))
		}
		db := data[:len(data)-sha256.Size]
		files := t.TempDir()
		write := func(name string, b []byte) string {
			p := filepath.Join(files, name)
			mustOK(t, "write "+name, os.WriteFile(p, b, 0o600))
			return p
		}
		flipped := bytes.Clone(data)
		flipped[len(db)/2] ^= 0x40
		garbage := bytes.Repeat([]byte("not a bolt file, not a snapshot. "), 400)
		var (
			truncated      = write("truncated.db", data[:len(db)/2+sha256.Size]) // a trailer's length short of pages: it looks hashed
			truncatedPages = write("truncated-pages.db", db[:len(db)/2])         // whole pages, no trailer
			flippedPath    = write("flipped.db", flipped)
			noTrailer      = write("no-trailer.db", db)
			garbagePath    = write("garbage.db", garbage)
			missing        = filepath.Join(files, "missing.db")
		)
		const token = "bad-input"
		nodes := srNodes(t, "b", 2)
		cluster := srInitialCluster(nodes)
		base := func(file, dir string) []string {
			return []string{"snapshot", "restore", file, "--data-dir", dir, "--name", nodes[0].name,
				"--initial-cluster", cluster, "--initial-cluster-token", token,
				"--initial-advertise-peer-urls", nodes[0].peer, "--backend", "bolt"}
		}
		cases := []struct {
			name  string
			file  string
			extra []string
			want  string // in stderr
		}{
			{"truncated", truncated, nil, "sha256"},
			{"truncated-skip-hash-check", truncated, []string{"--skip-hash-check"}, "not a sound bolt file"},
			{"truncated-pages", truncatedPages, nil, "snapshot missing hash but --skip-hash-check=false"},
			{"truncated-pages-skip-hash-check", truncatedPages, []string{"--skip-hash-check"}, "not a sound bolt file"},
			{"flipped-byte", flippedPath, nil, "sha256"},
			{"no-trailer", noTrailer, nil, "snapshot missing hash but --skip-hash-check=false"},
			{"garbage", garbagePath, nil, "snapshot missing hash but --skip-hash-check=false"},
			{"garbage-skip-hash-check", garbagePath, []string{"--skip-hash-check"}, "not a sound bolt file"},
			{"missing-file", missing, nil, "no such file or directory"},
			{"bump-without-mark", snap, []string{"--bump-revision", "1000"}, "--mark-compacted"},
			{"mark-without-bump", snap, []string{"--mark-compacted"}, "--mark-compacted"},
			{"name-not-in-cluster", snap, []string{"--name", "stranger"}, `member "stranger" is not in --initial-cluster`},
			{"bad-backend", snap, []string{"--backend", "rocks"}, "--backend"},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				dir := filepath.Join(t.TempDir(), "data")
				out, errOut, err := srRun(harness.KVDBinary(t), append(base(c.file, dir), c.extra...)...)
				if err == nil {
					t.Fatalf("restore succeeded, want a refusal\nstdout: %s\nstderr: %s", out, errOut)
				}
				if !strings.Contains(errOut, c.want) {
					t.Errorf("restore said %q (%v), want it to mention %q", errOut, err, c.want)
				}
				for _, d := range []string{dir, dir + ".restore-tmp"} {
					if _, err := os.Stat(d); !os.IsNotExist(err) {
						t.Errorf("%s left behind (%v)", d, err)
					}
				}
			})
		}

		t.Run("data-dir-not-empty", func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			mustOK(t, "mkdir", os.MkdirAll(filepath.Join(dir, "member"), 0o700))
			keep := filepath.Join(dir, "member", "precious")
			mustOK(t, "write", os.WriteFile(keep, []byte("do not touch"), 0o600))
			_, errOut, err := srRun(harness.KVDBinary(t), base(snap, dir)...)
			if err == nil || !strings.Contains(errOut, "not empty") {
				t.Errorf("restore into a non-empty data dir: %v, %q; want a refusal that says not empty", err, errOut)
			}
			if b, err := os.ReadFile(keep); err != nil || string(b) != "do not touch" {
				t.Errorf("the data dir's file after the refusal: %q, %v", b, err)
			}
			ents, _ := os.ReadDir(dir)
			if len(ents) != 1 {
				t.Errorf("the data dir holds %d entries after the refusal, want 1", len(ents))
			}
			if _, err := os.Stat(dir + ".restore-tmp"); !os.IsNotExist(err) {
				t.Errorf("%s.restore-tmp left behind (%v)", dir, err)
			}
		})

		t.Run("no-trailer-skip-hash-check", func(t *testing.T) {
			// A db file copied out of a data dir restores with --skip-hash-check.
			dir := filepath.Join(t.TempDir(), "data")
			srMustRun(t, harness.KVDBinary(t), append(base(noTrailer, dir), "--skip-hash-check")...)
			if _, err := os.Stat(filepath.Join(dir, "member")); err != nil {
				t.Errorf("no member dir after the restore: %v", err)
			}
		})
	})

	t.Run("bump-revision", func(t *testing.T) {
		const bump = 1000
		const token = "bumped"
		newRev := oldRev + bump
		snapDir := t.TempDir()
		type result struct {
			rev, compact int64
			hash         uint32 // HashKV at the new revision
			hashAfter    uint32 // HashKV after a put
			snap         string // etcd's snapshot after the put
		}
		run := func(t *testing.T, isEtcd bool) result {
			nodes := srNodes(t, "bump", 1)
			dir := filepath.Join(t.TempDir(), "data")
			extra := []string{"--bump-revision", fmt.Sprint(bump), "--mark-compacted"}
			if isEtcd {
				srRestoreEtcd(t, snap, dir, nodes[0], nodes, token, extra...)
			} else {
				srRestoreServer(t, snap, dir, "bolt", nodes[0], nodes, token, extra...)
			}
			p := srStart(t, isEtcd, "bolt", dir, nodes[0], nodes, token)
			p.WaitReady(harness.StartTimeout)
			cli := p.Client(t)
			g, err := cli.Get(ctx, "b/01")
			mustOK(t, p.Label()+": get", err)
			if g.Header.Revision != newRev {
				t.Errorf("%s: revision %d after --bump-revision %d, want %d + %d", p.Label(), g.Header.Revision, bump, oldRev, bump)
			}
			if len(g.Kvs) != 1 || string(g.Kvs[0].Value) != "v1" {
				t.Errorf("%s: b/01 = %v", p.Label(), g.Kvs)
			}
			_, err = cli.Get(ctx, "b/01", clientv3.WithRev(oldRev))
			wantErr(t, p.Label()+": get at the old revision", err, rpctypes.ErrCompacted)
			_, err = cli.Get(ctx, "b/01", clientv3.WithRev(newRev-1))
			wantErr(t, p.Label()+": get just below the new revision", err, rpctypes.ErrCompacted)
			hk, err := cli.HashKV(ctx, p.Endpoint(), 0)
			mustOK(t, p.Label()+": hashkv", err)

			// Watchers from the new revision work; from the old one they
			// are told it is compacted.
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			wch := cli.Watch(wctx, "b/", clientv3.WithPrefix(), clientv3.WithRev(newRev+1))
			old := cli.Watch(wctx, "b/", clientv3.WithPrefix(), clientv3.WithRev(oldRev))
			pr, err := cli.Put(ctx, "b/new", "after-bump")
			mustOK(t, p.Label()+": put after the bump", err)
			if pr.Header.Revision != newRev+1 {
				t.Errorf("%s: put after the bump at revision %d, want %d", p.Label(), pr.Header.Revision, newRev+1)
			}
			select {
			case wr := <-wch:
				if err := wr.Err(); err != nil || len(wr.Events) != 1 || string(wr.Events[0].Kv.Key) != "b/new" || wr.Events[0].Kv.ModRevision != newRev+1 {
					t.Errorf("%s: watch from %d: %v %+v", p.Label(), newRev+1, err, wr.Events)
				}
			case <-wctx.Done():
				t.Errorf("%s: watch from %d: no event", p.Label(), newRev+1)
			}
			select {
			case wr := <-old:
				if wr.CompactRevision != newRev {
					t.Errorf("%s: watch from the old revision %d: compact revision %d (err %v), want %d", p.Label(), oldRev, wr.CompactRevision, wr.Err(), newRev)
				}
			case <-wctx.Done():
				t.Errorf("%s: watch from the old revision %d: no answer", p.Label(), oldRev)
			}
			res := result{rev: g.Header.Revision, compact: hk.CompactRevision, hash: hk.Hash}
			hk, err = cli.HashKV(ctx, p.Endpoint(), 0)
			mustOK(t, p.Label()+": hashkv after the put", err)
			res.hashAfter = hk.Hash
			if isEtcd {
				res.snap = srSave(t, snapDir, p.Endpoint(), false)
			}
			return res
		}
		var kvd, etcd result
		t.Run("server", func(t *testing.T) { kvd = run(t, false) })
		t.Run("etcd", func(t *testing.T) { etcd = run(t, true) })
		if kvd.rev != etcd.rev || kvd.compact != etcd.compact {
			t.Errorf("after --bump-revision %d --mark-compacted: kvd at revision %d, compacted at %d; etcd at %d, compacted at %d",
				bump, kvd.rev, kvd.compact, etcd.rev, etcd.compact)
		}
		t.Run("hashkv", func(t *testing.T) {
			if kvd.hash != etcd.hash || kvd.hashAfter != etcd.hashAfter {
				t.Errorf("after --bump-revision: HashKV at %d: %d, etcd's %d; after a put: %d, etcd's %d",
					newRev, kvd.hash, etcd.hash, kvd.hashAfter, etcd.hashAfter)
			}
		})

		// The bumped etcd's snapshot holds etcdutl's empty record; the
		// server under test restores it and agrees with etcd.
		t.Run("server-from-bumped-etcd", func(t *testing.T) {
			nodes := srNodes(t, "rebump", 1)
			// etcdutl takes it.
			srRestoreEtcd(t, etcd.snap, filepath.Join(t.TempDir(), "etcd"), nodes[0], nodes, token)
			dir := filepath.Join(t.TempDir(), "data")
			if harness.Kind() == harness.KindKVD {
				args := append(srRestoreArgs(etcd.snap, dir, nodes[0], nodes, token), "--backend", "badger")
				out, errOut, err := srRun(harness.KVDBinary(t), args...)
				if err != nil {
					t.Fatalf("kvd %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out, errOut)
				}
			} else {
				srRestoreServer(t, etcd.snap, dir, "badger", nodes[0], nodes, token)
			}
			p := srStart(t, false, "badger", dir, nodes[0], nodes, token)
			p.WaitReady(harness.StartTimeout)
			cli := p.Client(t)
			g, err := cli.Get(ctx, "b/", clientv3.WithPrefix())
			mustOK(t, p.Label()+": get", err)
			if g.Header.Revision != newRev+1 || g.Count != 51 {
				t.Errorf("%s: revision %d, %d keys; want %d, 51", p.Label(), g.Header.Revision, g.Count, newRev+1)
			}
			_, err = cli.Get(ctx, "b/01", clientv3.WithRev(newRev-1))
			wantErr(t, p.Label()+": get below the bumped compaction", err, rpctypes.ErrCompacted)
			hk, err := cli.HashKV(ctx, p.Endpoint(), 0)
			mustOK(t, p.Label()+": hashkv", err)
			if hk.CompactRevision != newRev || hk.Hash != etcd.hashAfter {
				t.Errorf("%s: HashKV %d (compact %d), etcd's %d (compact %d)", p.Label(), hk.Hash, hk.CompactRevision, etcd.hashAfter, newRev)
			}
			pr, err := cli.Put(ctx, "b/more", "1")
			mustOK(t, p.Label()+": put", err)
			if pr.Header.Revision != newRev+2 {
				t.Errorf("%s: put at %d, want %d", p.Label(), pr.Header.Revision, newRev+2)
			}
		})
	})
}
