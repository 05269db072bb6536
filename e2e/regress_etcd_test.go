package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// Regression scenarios named after etcd's consistency and watch bugs (the
// scenarios etcd's own robustness suite keeps under tests/robustness as
// Issue<N>). Each recreates, with real processes, kill -9 and the peer
// proxies, the situation the issue describes, and checks the guarantee etcd
// broke. They run against kvd, and against etcd v3.7.3 (where every one of
// these bugs is fixed) with KVD_E2E_SERVER=etcd.

// regressEngine is the kvd engine of the multi-member and slower scenarios;
// the cheap single-member ones run on every engine.
const regressEngine = "bolt"

// watchLog records what one clientv3 watch channel delivers.
type watchLog struct {
	mu       sync.Mutex
	events   []*clientv3.Event
	headers  []int64 // header revision of every response, in order
	canceled *clientv3.WatchResponse
	done     chan struct{}
}

func recordWatch(ch clientv3.WatchChan) *watchLog {
	l := &watchLog{done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for r := range ch {
			l.mu.Lock()
			l.headers = append(l.headers, r.Header.Revision)
			l.events = append(l.events, r.Events...)
			if r.Canceled || r.CompactRevision != 0 {
				rr := r
				l.canceled = &rr
			}
			l.mu.Unlock()
		}
	}()
	return l
}

// snapshot returns the events so far and the last event's revision.
func (l *watchLog) snapshot() ([]*clientv3.Event, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	evs := slices.Clone(l.events)
	var last int64
	if n := len(evs); n > 0 {
		last = evs[n-1].Kv.ModRevision
	}
	return evs, last
}

// waitRev waits until the watch delivered an event at rev or later.
func (l *watchLog) waitRev(t *testing.T, what string, rev int64) {
	t.Helper()
	eventually(t, what, 20*time.Second, func() error {
		l.mu.Lock()
		c := l.canceled
		l.mu.Unlock()
		if c != nil {
			return fmt.Errorf("watch canceled: %v (compact revision %d)", c.Err(), c.CompactRevision)
		}
		if _, last := l.snapshot(); last < rev {
			return fmt.Errorf("last event at revision %d, want %d", last, rev)
		}
		return nil
	})
}

// checkConsecutive requires the events to be exactly one per revision from
// first to last (every write of these scenarios is one put of one key).
func checkConsecutive(t *testing.T, what string, evs []*clientv3.Event, first, last int64) {
	t.Helper()
	if len(evs) == 0 {
		t.Fatalf("%s: no events, want revisions %d..%d", what, first, last)
	}
	want := first
	for i, ev := range evs {
		if r := ev.Kv.ModRevision; r != want {
			t.Fatalf("%s: event %d at revision %d, want %d (previous %v): events go back or skip", what, i, r, want, revsOf(evs[max(0, i-3):i]))
		}
		want++
	}
	if got := evs[len(evs)-1].Kv.ModRevision; got != last {
		t.Fatalf("%s: last event at revision %d, want %d", what, got, last)
	}
}

func revsOf(evs []*clientv3.Event) []int64 {
	var out []int64
	for _, ev := range evs {
		out = append(out, ev.Kv.ModRevision)
	}
	return out
}

// TestEtcd18089_WatchFromCompactedDeleteRevision: etcd issue #18089 ("Watch
// dropping an event when compacting on delete"). A compaction at revision R
// where R is a delete removed the key's tombstone from the backend (etcd
// kept only revisions above R for a deleted key), yet a watch may start at
// R, the compaction revision itself: it then began with the next put and
// the DELETE at R was silently lost. The robustness suite found it with
// frequent compactions under delete traffic; the fix (#18274) keeps a
// tombstone whose revision equals the compaction revision. The test is
// ahrtr's reproduction from the thread: put k three times, delete it (R),
// put it again, compact R (physical), watch k from R: the DELETE at R and
// the PUT after it must both come, before and after a restart (the index is
// rebuilt from the backend at start).
func TestEtcd18089_WatchFromCompactedDeleteRevision(t *testing.T) {
	forEachEngine(t, func(t *testing.T, m *member) {
		ctx := testCtx(t)
		for _, v := range []string{"v2", "v3", "v4"} {
			_, err := m.cli.Put(ctx, "k", v)
			mustOK(t, "put k", err)
		}
		d, err := m.cli.Delete(ctx, "k")
		mustOK(t, "delete k", err)
		delRev := d.Header.Revision
		p, err := m.cli.Put(ctx, "k", "v6")
		mustOK(t, "put k again", err)
		putRev := p.Header.Revision
		_, err = m.cli.Compact(ctx, delRev, clientv3.WithCompactPhysical())
		mustOK(t, "compact at the delete's revision", err)

		check := func(when string, cli *clientv3.Client) {
			t.Helper()
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			l := recordWatch(cli.Watch(wctx, "k", clientv3.WithRev(delRev)))
			l.waitRev(t, when+": watch k from the compaction revision", putRev)
			evs, _ := l.snapshot()
			if len(evs) != 2 || evs[0].Type != mvccpb.DELETE || evs[0].Kv.ModRevision != delRev ||
				evs[1].Type != mvccpb.PUT || evs[1].Kv.ModRevision != putRev || string(evs[1].Kv.Value) != "v6" {
				t.Fatalf("%s: watch k from %d got %s, want DELETE@%d then PUT@%d v6", when, delRev, describeEvents(evs), delRev, putRev)
			}
		}
		check("after the compaction", m.cli)
		m.proc.Restart()
		check("after a restart", m.proc.Client(t))
	})
}

func describeEvents(evs []*clientv3.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		fmt.Fprintf(&b, "[%s %s@%d %q]", ev.Type, ev.Kv.Key, ev.Kv.ModRevision, ev.Kv.Value)
	}
	return b.String()
}

// TestEtcd19179_CompactionInterruptedByCrashKeepsTombstone: etcd issue
// #19179 ("Missing delete event on watch opened on same revision as
// compaction request"). etcd compacts in batches (compaction-batch-limit);
// a crash after the batch that deleted a key's creation revision but before
// finishedCompactRev was written left only the key's tombstone in the
// backend. At restart the index was rebuilt from the backend and a key whose
// first revision is a tombstone was skipped, so the resumed compaction no
// longer knew to keep the tombstone at the compaction revision and deleted
// it: a watch from that revision lost the DELETE (the fix, #19188, restores
// such a tombstone into the index). The test recreates it with
// --compaction-batch-limit 5: the key to delete is created first (the lowest
// revision, deleted in the first batch), 60000 puts follow (in txns of
// 1000), the key is deleted at R and R compacted, and the server is killed
// with SIGKILL right after the compaction is acknowledged, with ~12000
// batches to go (bolt; the index rebuild is the engines' common code). After the
// restart a physical compaction at R (a barrier: it returns once the resumed
// compaction is done) and a put of the key; a watch from R must see the
// DELETE at R and the put. Up to three rounds, until the log shows the
// compaction was resumed at start.
func TestEtcd19179_CompactionInterruptedByCrashKeepsTombstone(t *testing.T) {
	engine := regressEngine
	args := []string{"--compaction-batch-limit", "5", "--max-txn-ops", "1000"}
	resumedLine := "resuming unfinished compaction"
	if harness.Kind() == harness.KindEtcd {
		// etcd sleeps 10ms between compaction batches by default: 2 minutes
		// for these 12000.
		args = append(args, "--log-level", "info", "--compaction-sleep-interval", "1us")
		resumedLine = "resume scheduled compaction"
	}
	p := harness.StartKVD(t, harness.Options{Engine: engine, Args: args})
	resumed := false
	for round := 0; round < 3 && !resumed; round++ {
		ctx := testCtx(t)
		cli := p.Client(t)
		key := fmt.Sprintf("del%d", round)
		_, err := cli.Put(ctx, key, "first")
		mustOK(t, "put the key to delete", err)
		// 60 txns of 1000 puts: 60000 key revisions, 12000 batches of 5
		// for the compactor, loaded in well under a second.
		for i := range 60 {
			ops := make([]clientv3.Op, 1000)
			for j := range ops {
				ops[j] = clientv3.OpPut(fmt.Sprintf("r%d/%02d/%04d", round, i, j), "v")
			}
			_, err := cli.Txn(ctx).Then(ops...).Commit()
			mustOK(t, "txn of 1000 puts", err)
		}
		d, err := cli.Delete(ctx, key)
		mustOK(t, "delete the key", err)
		delRev := d.Header.Revision
		_, err = cli.Compact(ctx, delRev)
		mustOK(t, "compact at the delete's revision", err)
		p.Kill()
		p.Restart()
		resumed = p.LogContains(resumedLine)

		cli = p.Client(t)
		_, err = cli.Compact(ctx, delRev, clientv3.WithCompactPhysical())
		if err != nil && !isEtcdErr(err, rpctypes.ErrCompacted) {
			t.Fatalf("round %d: compact again at %d after the restart: %v", round, delRev, err)
		}
		pr, err := cli.Put(ctx, key, "again")
		mustOK(t, "put the key again", err)
		wctx, cancel := context.WithCancel(ctx)
		l := recordWatch(cli.Watch(wctx, key, clientv3.WithRev(delRev)))
		l.waitRev(t, "watch from the compaction revision", pr.Header.Revision)
		cancel()
		evs, _ := l.snapshot()
		if len(evs) != 2 || evs[0].Type != mvccpb.DELETE || evs[0].Kv.ModRevision != delRev || evs[1].Kv.ModRevision != pr.Header.Revision {
			t.Fatalf("round %d (compaction resumed at start: %v): watch %s from %d got %s, want DELETE@%d then PUT@%d",
				round, resumed, key, delRev, describeEvents(evs), delRev, pr.Header.Revision)
		}
		t.Logf("round %d: compaction at %d resumed after SIGKILL: %v; DELETE@%d delivered", round, delRev, resumed, delRev)
	}
	if !resumed {
		t.Logf("the compaction always finished before SIGKILL; the tombstone was checked after a plain restart only")
	}
}

// TestEtcd14370_SingleMemberAckedWritesSurviveKill: etcd issue #14370
// ("Durability API guarantee broken in single node cluster"). A lone
// member commits its own entries at once, and etcd's raft loop handed them
// to the applier before the WAL write of the same Ready was fsynced, so a
// put could be applied and acknowledged, then lost by a crash before the
// fsync (the robustness suite recreates it with a panic just before the WAL
// save). The fix makes a single member persist entries before applying
// them. The test runs 16 writers against one member, kills it with SIGKILL
// under load twice, and after each restart requires every acknowledged put
// back with its value and revision, revisions consecutive (crash_test.go's
// load and check).
func TestEtcd14370_SingleMemberAckedWritesSurviveKill(t *testing.T) {
	for _, engine := range harness.Engines() {
		t.Run(engine, func(t *testing.T) {
			p := harness.StartKVD(t, harness.Options{Engine: engine})
			c := p.Client(t)
			acked := map[string]ackedPut{}
			for cycle, d := range []time.Duration{700 * time.Millisecond, 1300 * time.Millisecond} {
				n := crashLoad(t, p, c, cycle, d, acked)
				if n == 0 {
					t.Fatalf("cycle %d: no write acknowledged before SIGKILL", cycle)
				}
				p.Restart()
				verifyAfterCrash(t, c, acked)
				t.Logf("cycle %d: %d puts acknowledged before SIGKILL, all %d back", cycle, n, len(acked))
				if t.Failed() {
					return
				}
			}
		})
	}
}

// TestEtcd13766_KillDuringWritesKeepsMembersConsistent: etcd issue #13766
// ("Inconsistent revision and data occurs"). In etcd 3.5.0-3.5.2 the
// consistent index (the raft index the backend has applied up to) was set
// outside the backend's transaction lock, so a periodic backend commit could
// persist an index ahead of the data applied with it; a member killed
// (OOM, kill -9) at that moment skipped entries when it replayed its WAL at
// restart and diverged for good from the others: other revisions, other
// data, a different HashKV (fixed by #13854, moving SetConsistentIndex into
// the transaction). The robustness suite recreates it with 3 members,
// --snapshot-count 100, high put traffic with compactions and SIGKILL. So
// does the test: 8 writers and a compaction every 200 ms, a follower then
// the leader killed with SIGKILL under load and restarted; afterwards every
// member must be at one revision with the same HashKV, and hold every
// acknowledged put with its revision.
func TestEtcd13766_KillDuringWritesKeepsMembersConsistent(t *testing.T) {
	opts := faultOptions(regressEngine)
	opts.SnapshotCount = 100
	c := harness.StartCluster(t, 3, opts)
	cli := c.Client(t)
	load := startWriteLoad(cli, "w/", 8)
	stopCompact := make(chan struct{})
	compactDone := make(chan struct{})
	go func() {
		defer close(compactDone)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopCompact:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if r, err := cli.Get(ctx, "compact-probe"); err == nil && r.Header.Revision > 50 {
				_, _ = cli.Compact(ctx, r.Header.Revision-50)
			}
			cancel()
		}
	}()
	load.waitAcked(t, "writes before the first kill", 300, 20*time.Second)
	for i, pick := range []string{"follower", "leader"} {
		l := c.Leader(t)
		victim := c.Members()[(l+1)%3]
		if pick == "leader" {
			victim = c.Members()[l]
		}
		victim.Kill()
		load.waitAcked(t, fmt.Sprintf("writes while the %s is down", pick), 200, 20*time.Second)
		victim.Restart()
		load.waitAcked(t, fmt.Sprintf("writes after the %s restarted", pick), 200, 20*time.Second)
		t.Logf("kill %d: %s %s killed and restarted, %d puts acknowledged", i, pick, victim.Name(), load.count())
	}
	close(stopCompact)
	<-compactDone
	acked := load.stop()
	rev := verifyAckedEverywhere(t, c, "w/", acked)
	t.Logf("%d acknowledged puts on every member, one revision %d and one HashKV", len(acked), rev)
}

// isolateUntilSnapshot isolates follower x with the peer proxies, writes n
// puts of new keys through the other members (far past the leader's
// snapshot and the entries it keeps after one, so that x can only catch up
// from a raft snapshot), heals, and waits until every member converged. It
// fails if x's log shows no snapshot received.
func isolateUntilSnapshot(t *testing.T, c *harness.Cluster, x *harness.Process, prefix string, n int) {
	t.Helper()
	var others []string
	for _, m := range c.Members() {
		if m != x {
			others = append(others, m.Endpoint())
		}
	}
	c.Isolate(t, x)
	loadParallel(t, c.ClientFor(t, others...), prefix, n, 8)
	c.Heal(t)
	waitConverged(t, c)
	installedSnapshotIndex(t, x)
}

// snapshotCluster starts 3 members with the given --snapshot-count and
// --snapshot-catchup-entries behind peer proxies, and returns it with a
// follower.
func snapshotCluster(t *testing.T, snapCount, catchup int) (*harness.Cluster, *harness.Process) {
	t.Helper()
	args := []string{"--snapshot-catchup-entries", strconv.Itoa(catchup)}
	if harness.Kind() == harness.KindEtcd {
		args = append(args, "--log-level", "info") // its snapshot receipt is logged at info
	}
	opts := faultOptions(regressEngine)
	opts.PeerProxy = true
	opts.SnapshotCount = snapCount
	opts.Args = args
	c := harness.StartCluster(t, 3, opts)
	return c, c.Members()[(c.Leader(t)+1)%3]
}

// TestEtcd15271_WatchOnMemberRestoredFromSnapshotNeverGoesBack: etcd issue
// #15271 ("Watch response traveling back in time when reconnecting member
// downloads snapshot from the leader"). A member cut off long enough
// (past --snapshot-catchup-entries) catches up by installing the leader's
// snapshot; etcd's watchable store then moved its synced watchers to the
// unsynced group with the minRev they had when they became synced (never
// advanced while synced), so the resync sent again events the watchers had
// already had: `etcdctl watch` on that member printed 23826 then 23143.
// The fix (#15492) advances minRev for synced watchers. The test is the
// robustness scenario: 3 members, --snapshot-count 100
// --snapshot-catchup-entries 100, watches on the follower (from now, and
// from an old revision); the follower is isolated by the peer proxies while
// 400 puts go through the others, healed, restored from a snapshot (its log
// must say so), then 50 more puts; every watch must have seen each revision
// exactly once, in order, up to the last put.
func TestEtcd15271_WatchOnMemberRestoredFromSnapshotNeverGoesBack(t *testing.T) {
	c, x := snapshotCluster(t, 100, 100)
	ctx := testCtx(t)
	cli := c.Client(t)
	loadParallel(t, cli, "pre/", 150, 8)
	xcli := c.ClientFor(t, x.Endpoint())
	head, err := xcli.Get(ctx, "probe")
	mustOK(t, "linearizable get on the follower", err)
	now := recordWatch(xcli.Watch(ctx, "", clientv3.WithPrefix(), clientv3.WithRev(head.Header.Revision+1)))
	old := recordWatch(xcli.Watch(ctx, "", clientv3.WithPrefix(), clientv3.WithRev(2)))
	old.waitRev(t, "old-revision watch caught up before the isolation", head.Header.Revision)

	isolateUntilSnapshot(t, c, x, "iso/", 400)
	loadParallel(t, cli, "post/", 50, 4)
	last, err := cli.Get(ctx, "probe")
	mustOK(t, "head revision", err)
	end := last.Header.Revision
	now.waitRev(t, "watch from now on the restored member", end)
	old.waitRev(t, "watch from revision 2 on the restored member", end)
	evs, _ := now.snapshot()
	checkConsecutive(t, "watch from now on the restored member", evs, head.Header.Revision+1, end)
	evs, _ = old.snapshot()
	checkConsecutive(t, "watch from revision 2 on the restored member", evs, 2, end)
	t.Logf("%s restored from a snapshot at index %d; watches saw revisions %d..%d and 2..%d in order", x.Name(), installedSnapshotIndex(t, x), head.Header.Revision+1, end, end)
}

// TestEtcd20221_FutureWatchOnRestoredMemberKeepsStartRevision: etcd issue
// #20221, found by the robustness scenario Issue20221 (blackhole a member
// until it needs a snapshot, watches starting 50-100 revisions in the
// future, --snapshot-count 10 --snapshot-catchup-entries 10). Restoring a
// snapshot moves every watcher to the unsynced group, those waiting for a
// future revision too; etcd's resync assumed an unsynced watcher can only
// be behind and set its next revision to current+1, below the revision
// the client asked for, so the watch delivered events older than its start
// revision (also reported as #19487). The fix (#20281) keeps a watcher's
// revision when it is in the future. The test: 3 members as in the
// scenario, a watch on a follower from head+150; the follower is isolated
// while 100 puts go through the others (the snapshot it restores is below
// the watch's start), healed, then 100 more puts: the watch's first event
// must be at exactly head+150, then one per revision up to the last put.
func TestEtcd20221_FutureWatchOnRestoredMemberKeepsStartRevision(t *testing.T) {
	c, x := snapshotCluster(t, 10, 10)
	ctx := testCtx(t)
	cli := c.Client(t)
	xcli := c.ClientFor(t, x.Endpoint())
	head, err := xcli.Get(ctx, "probe")
	mustOK(t, "linearizable get on the follower", err)
	start := head.Header.Revision + 150
	fut := recordWatch(xcli.Watch(ctx, "", clientv3.WithPrefix(), clientv3.WithRev(start), clientv3.WithProgressNotify()))

	isolateUntilSnapshot(t, c, x, "iso/", 100)
	if r, err := xcli.Get(ctx, "probe", clientv3.WithSerializable()); err == nil && r.Header.Revision >= start {
		t.Fatalf("the restored member is at revision %d, not below the watch's start %d", r.Header.Revision, start)
	}
	loadParallel(t, cli, "post/", 100, 4)
	last, err := cli.Get(ctx, "probe")
	mustOK(t, "head revision", err)
	end := last.Header.Revision
	fut.waitRev(t, "future watch on the restored member", end)
	evs, _ := fut.snapshot()
	checkConsecutive(t, "future watch on the restored member", evs, start, end)
	fut.mu.Lock()
	for _, h := range fut.headers {
		if h < head.Header.Revision {
			t.Errorf("a response of the future watch has header revision %d, below the revision %d it was created at", h, head.Header.Revision)
			break
		}
	}
	fut.mu.Unlock()
	t.Logf("%s restored from a snapshot at index %d below the watch's start %d; first event at %d", x.Name(), installedSnapshotIndex(t, x), start, evs[0].Kv.ModRevision)
}

// TestEtcd17529_SlowSharedWatchStreamNeverSkipsEvents: etcd issue #17529
// ("etcd watch events starvation / lost multiplexed on a single watch
// stream"). With hundreds of prev_kv watches multiplexed on one gRPC stream
// that the client read too slowly, watchers fell behind (unsynced) while
// compactions went on; when such a watcher's next revision was compacted,
// etcd tried to send it the compacted response, found the stream's buffer
// full and still advanced the watcher to current+1, so it went on with
// later events and never told the client that [next, current] was lost
// (Kubernetes' watch cache missed events for good). The fix (#17555)
// retries the compacted response instead of advancing. The test: one
// member, one raw gRPC watch stream with 60 prev_kv watches on one prefix
// (half from an old revision, half from now); the stream is not read while
// 1000 puts of 512-byte values go on (its buffers fill, watchers fall
// behind), the store is compacted at the head, 100 more puts follow, then
// the stream is read to the end. Each watch must deliver one event per
// revision from its start with no gap, and either reach the last put or be
// canceled with a compact revision above the last revision it delivered.
func TestEtcd17529_SlowSharedWatchStreamNeverSkipsEvents(t *testing.T) {
	p := harness.StartKVD(t, harness.Options{Engine: regressEngine})
	ctx := testCtx(t)
	cli := p.Client(t)
	val := strings.Repeat("x", 512)
	put := func(n, writers int) {
		errs := make(chan error, writers)
		for w := range writers {
			go func() {
				for i := w; i < n; i += writers {
					if _, err := cli.Put(ctx, fmt.Sprintf("w/%03d", i%100), val); err != nil {
						errs <- err
						return
					}
				}
				errs <- nil
			}()
		}
		for range writers {
			mustOK(t, "puts", <-errs)
		}
	}
	put(100, 4)
	const watches = 60
	ws, err := pb.NewWatchClient(cli.ActiveConnection()).Watch(ctx)
	mustOK(t, "open the watch stream", err)
	first := map[int64]int64{} // watch ID -> revision of its first event
	for i := range watches {
		req := &pb.WatchCreateRequest{Key: []byte("w/"), RangeEnd: []byte("w0"), PrevKv: true, WatchId: int64(i + 1)}
		if i%2 == 0 {
			req.StartRevision = 2
		}
		mustOK(t, "create watch", ws.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: req}}))
	}
	// Nobody reads the stream now: its buffers fill up and the watchers fall
	// behind while the puts and the compaction go on.
	put(1000, 8)
	r, err := cli.Get(ctx, "probe")
	mustOK(t, "head before the compaction", err)
	_, err = cli.Compact(ctx, r.Header.Revision, clientv3.WithCompactPhysical())
	mustOK(t, "compact at the head", err)
	put(100, 4)
	r, err = cli.Get(ctx, "probe")
	mustOK(t, "head", err)
	end := r.Header.Revision

	type state struct {
		canceled, done bool
		next           int64 // revision of the next event due
	}
	st := map[int64]*state{}
	pending := watches
	deadline := time.Now().Add(30 * time.Second)
	for pending > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d watches neither reached revision %d nor were canceled within 30s", pending, end)
		}
		resp, err := ws.Recv()
		mustOK(t, "read the watch stream", err)
		id := resp.WatchId
		s := st[id]
		if resp.Created {
			if s != nil {
				t.Fatalf("watch %d created twice", id)
			}
			s = &state{next: resp.Header.Revision + 1}
			if id%2 == 1 { // odd IDs are the even indexes: from revision 2
				s.next = 2
			}
			st[id] = s
			first[id] = s.next
			continue
		}
		if s == nil || s.canceled || s.done {
			t.Fatalf("response for watch %d that is not live: %v", id, resp)
		}
		for _, ev := range resp.Events {
			if ev.Kv.ModRevision != s.next {
				t.Fatalf("watch %d (from %d): event at revision %d, want %d: events skipped without a compacted response", id, first[id], ev.Kv.ModRevision, s.next)
			}
			s.next++
		}
		if resp.CompactRevision != 0 || resp.Canceled {
			if resp.CompactRevision <= s.next-1 {
				t.Fatalf("watch %d canceled with compact revision %d, but it had delivered up to %d", id, resp.CompactRevision, s.next-1)
			}
			s.canceled = true
			pending--
			continue
		}
		if !s.done && s.next-1 == end {
			s.done = true
			pending--
		}
	}
	var canceled, full, delivered int
	for id, s := range st {
		delivered += int(s.next - first[id])
		if s.canceled {
			canceled++
		} else {
			full++
		}
	}
	t.Logf("%d watches delivered every revision to %d, %d were canceled as compacted (no gap in any; %d events in all)", full, end, canceled, delivered)
}
