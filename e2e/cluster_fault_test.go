package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// Raft timings of the fault tests: short, so that elections after a fault
// take well under a second, yet ten heartbeats per election so that a busy
// 2-core machine does not start spurious ones.
const (
	faultHeartbeat = 50 * time.Millisecond
	faultElection  = 500 * time.Millisecond
	// leaderBound bounds how long a cluster may be without a leader after
	// its leader fails.
	leaderBound = 10 * faultElection
)

func faultOptions(engine string) harness.ClusterOptions {
	return harness.ClusterOptions{Engine: engine, HeartbeatInterval: faultHeartbeat, ElectionTimeout: faultElection}
}

// writeLoad is a set of writers putting unique keys through one client,
// recording the writes that were acknowledged. A failed write's outcome is
// unknown, so it is recorded neither way and the writer moves on.
type writeLoad struct {
	prefix string
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	acked  map[string]ackedPut
	failed int
	last   error
}

func startWriteLoad(cli *clientv3.Client, prefix string, writers int) *writeLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &writeLoad{prefix: prefix, cancel: cancel, acked: map[string]ackedPut{}}
	for w := range writers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				key := fmt.Sprintf("%sw%02d/%07d", prefix, w, i)
				val := fmt.Sprintf("v-%d-%d", w, i)
				pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
				r, err := cli.Put(pctx, key, val)
				pcancel()
				l.mu.Lock()
				if err != nil {
					l.failed++
					l.last = err
				} else {
					l.acked[key] = ackedPut{value: val, rev: r.Header.Revision}
				}
				l.mu.Unlock()
			}
		}()
	}
	return l
}

func (l *writeLoad) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// waitAcked waits until at least n more writes than now are acknowledged.
func (l *writeLoad) waitAcked(t *testing.T, what string, n int, timeout time.Duration) {
	t.Helper()
	base := l.count()
	eventually(t, what, timeout, func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		if got := len(l.acked) - base; got < n {
			return fmt.Errorf("%d of %d writes acknowledged (%d failed, last error %v)", got, n, l.failed, l.last)
		}
		return nil
	})
}

// stop stops the writers and returns the acknowledged writes.
func (l *writeLoad) stop() map[string]ackedPut {
	l.cancel()
	l.wg.Wait()
	return l.acked
}

// waitConverged waits until every member has applied the same revision,
// at least the head a linearizable read sees now, and reports the same
// HashKV at it, and returns that revision. Writes whose callers gave up may
// still land after the head is read, so the members are polled until they
// agree rather than until they reach that head.
func waitConverged(t *testing.T, c *harness.Cluster) int64 {
	t.Helper()
	cli := c.Client(t)
	r, err := cli.Get(testCtx(t), "converge-probe")
	mustOK(t, "linearizable get for the head revision", err)
	head := r.Header.Revision
	var clis []*clientv3.Client
	for _, m := range c.Members() {
		clis = append(clis, c.ClientFor(t, m.Endpoint()))
	}
	var rev int64
	eventually(t, fmt.Sprintf("all members at one revision >= %d", head), convergeTimeout, func() error {
		var revs []int64
		for _, mc := range clis {
			g, err := mc.Get(shortCtx(t, 2*time.Second), "converge-probe", clientv3.WithSerializable())
			if err != nil {
				return err
			}
			revs = append(revs, g.Header.Revision)
		}
		if slices.Min(revs) != slices.Max(revs) || revs[0] < head {
			return fmt.Errorf("member revisions %v", revs)
		}
		rev = revs[0]
		return nil
	})
	waitHashKVEqual(t, c, rev)
	return rev
}

// verifyAckedEverywhere waits until the members agree (one revision, one
// HashKV) and checks the acknowledged writes under prefix on each; it
// returns that revision.
func verifyAckedEverywhere(t *testing.T, c *harness.Cluster, prefix string, acked map[string]ackedPut) int64 {
	t.Helper()
	rev := waitConverged(t, c)
	for _, m := range c.Members() {
		verifyAckedOn(t, c, m, prefix, acked)
	}
	return rev
}

// verifyAckedOn reads prefix serializably from member m (its own state) and
// requires every acknowledged write with its value and revision, every key
// written once, and their revisions consecutive from first.
func verifyAckedOn(t *testing.T, c *harness.Cluster, m *harness.Process, prefix string, acked map[string]ackedPut) {
	t.Helper()
	cli := c.ClientFor(t, m.Endpoint())
	r, err := cli.Get(testCtx(t), prefix, clientv3.WithPrefix(), clientv3.WithSerializable())
	mustOK(t, "read back on "+m.Name(), err)
	seen := map[string]bool{}
	var revs []int64
	for _, kv := range r.Kvs {
		k := string(kv.Key)
		seen[k] = true
		revs = append(revs, kv.ModRevision)
		if kv.CreateRevision != kv.ModRevision || kv.Version != 1 {
			t.Errorf("%s: key %s written once has create %d mod %d version %d", m.Name(), k, kv.CreateRevision, kv.ModRevision, kv.Version)
		}
		if a, ok := acked[k]; ok && (a.value != string(kv.Value) || a.rev != kv.ModRevision) {
			t.Errorf("%s: key %s acknowledged %q at revision %d, read back %q at %d", m.Name(), k, a.value, a.rev, kv.Value, kv.ModRevision)
		}
	}
	missing := 0
	for k, a := range acked {
		if !seen[k] {
			missing++
			if missing <= 10 {
				t.Errorf("%s: acknowledged write lost: %s = %q at revision %d", m.Name(), k, a.value, a.rev)
			}
		}
	}
	if missing > 10 {
		t.Errorf("%s: %d acknowledged writes lost in all", m.Name(), missing)
	}
	slices.Sort(revs)
	for i := 1; i < len(revs); i++ {
		if revs[i] != revs[i-1]+1 {
			t.Errorf("%s: revisions of %s not consecutive: %d then %d", m.Name(), prefix, revs[i-1], revs[i])
			break
		}
	}
}

// waitNewLeader waits until a leader other than old is agreed on, and
// returns its index in Members.
func waitNewLeader(t *testing.T, c *harness.Cluster, old *harness.Process, timeout time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		l := c.WaitLeader(t, time.Until(deadline))
		if c.Members()[l] != old {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("no leader other than %s within %v", old.Name(), timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestClusterLeaderCrash kills the leader with SIGKILL under 8 concurrent
// writers: another member must lead within a bound and the writes go on;
// the old leader, restarted, catches up, and every acknowledged write is on
// every member with its revision.
func TestClusterLeaderCrash(t *testing.T) {
	t.Parallel()
	forEachClusterEngine(t, func(t *testing.T, engine string) {
		c := harness.StartCluster(t, 3, faultOptions(engine))
		load := startWriteLoad(c.Client(t), "lc/", 8)
		defer load.stop()
		load.waitAcked(t, "writes before the crash", 200, 30*time.Second)

		old := c.Members()[c.WaitLeader(t, leaderBound)]
		old.Kill()
		killed := time.Now()
		l := waitNewLeader(t, c, old, leaderBound)
		t.Logf("%s killed, %s leads after %v", old.Name(), c.Members()[l].Name(), time.Since(killed).Round(time.Millisecond))
		load.waitAcked(t, "writes after the new leader", 200, 30*time.Second)

		old.Restart()
		load.waitAcked(t, "writes after the restart", 200, 30*time.Second)
		acked := load.stop()
		t.Logf("%d writes acknowledged, %d failed (last error %v)", len(acked), load.failed, load.last)

		verifyAckedEverywhere(t, c, "lc/", acked)
	})
}

// TestClusterFollowerRestart kills a follower, writes without it, restarts
// it, and requires it to catch up.
func TestClusterFollowerRestart(t *testing.T) {
	forEachClusterEngine(t, func(t *testing.T, engine string) {
		c := harness.StartCluster(t, 3, faultOptions(engine))
		l := c.WaitLeader(t, leaderBound)
		f := c.Members()[(l+1)%3]
		cli := c.ClientFor(t, c.Members()[l].Endpoint())
		acked := map[string]ackedPut{}
		put := func(key string) {
			r, err := cli.Put(testCtx(t), key, "v-"+key)
			mustOK(t, "put "+key, err)
			acked[key] = ackedPut{value: "v-" + key, rev: r.Header.Revision}
		}
		for i := range 50 {
			put(fmt.Sprintf("fr/a%03d", i))
		}
		f.Kill()
		for i := range 300 {
			put(fmt.Sprintf("fr/b%03d", i))
		}
		f.Restart()
		waitConverged(t, c)
		verifyAckedOn(t, c, f, "fr/", acked)
	})
}

// TestClusterPartition isolates the leader through the peer proxies: the
// other two elect a leader and take writes, the isolated member refuses
// linearizable reads rather than serve stale data, and after healing it
// converges.
func TestClusterPartition(t *testing.T) {
	t.Parallel()
	forEachClusterEngine(t, func(t *testing.T, engine string) {
		opts := faultOptions(engine)
		opts.PeerProxy = true
		c := harness.StartCluster(t, 3, opts)
		clis := memberClients(t, c)
		_, err := clis[0].Put(testCtx(t), "part/k", "before")
		mustOK(t, "put before the partition", err)

		old := c.Members()[c.WaitLeader(t, leaderBound)]
		c.Isolate(t, old)
		l := waitNewLeader(t, c, old, leaderBound)
		majority := c.ClientFor(t, c.Members()[l].Endpoint())
		pr, err := majority.Put(testCtx(t), "part/k", "during")
		mustOK(t, "put on the majority side", err)

		isolated := clis[c.Index(old)]
		g, err := isolated.Get(shortCtx(t, 3*time.Second), "part/k")
		if err == nil {
			t.Errorf("linearizable get on isolated %s returned %v at revision %d; want an error (the majority wrote %q at %d)",
				old.Name(), g.Kvs, g.Header.Revision, "during", pr.Header.Revision)
		} else {
			t.Logf("linearizable get on isolated %s: %v", old.Name(), err)
		}
		_, err = isolated.Put(shortCtx(t, 3*time.Second), "part/isolated", "x")
		if err == nil {
			t.Errorf("put on isolated %s succeeded", old.Name())
		}

		c.Heal(t)
		eventually(t, "linearizable get on healed "+old.Name(), convergeTimeout, func() error {
			g, err := isolated.Get(shortCtx(t, 2*time.Second), "part/k")
			if err != nil {
				return err
			}
			if len(g.Kvs) != 1 || string(g.Kvs[0].Value) != "during" || g.Kvs[0].ModRevision != pr.Header.Revision {
				return fmt.Errorf("got %v, want during at revision %d", g.Kvs, pr.Header.Revision)
			}
			return nil
		})
		c.WaitHealthy(t, convergeTimeout)
		waitConverged(t, c)
	})
}

// TestClusterMajorityLoss stops two of three members: a put on the last
// one fails within its context instead of hanging, and succeeds once they
// are back.
func TestClusterMajorityLoss(t *testing.T) {
	t.Parallel()
	forEachClusterEngine(t, func(t *testing.T, engine string) {
		c := harness.StartCluster(t, 3, faultOptions(engine))
		members := c.Members()
		survivor := c.ClientFor(t, members[0].Endpoint())
		_, err := survivor.Put(testCtx(t), "ml/before", "v")
		mustOK(t, "put before", err)

		members[1].Kill()
		members[2].Kill()
		const reqTimeout = 3 * time.Second
		start := time.Now()
		_, err = survivor.Put(shortCtx(t, reqTimeout), "ml/during", "v")
		took := time.Since(start)
		if err == nil {
			t.Fatalf("put without a majority succeeded")
		}
		t.Logf("put without a majority: %v after %v", err, took.Round(time.Millisecond))
		// The context bounds the call; well past it means the client hung.
		if took > reqTimeout+3*time.Second {
			t.Errorf("put without a majority returned after %v, its context ended at %v", took, reqTimeout)
		}
		if _, err := survivor.Get(shortCtx(t, reqTimeout), "ml/before"); err == nil {
			t.Errorf("linearizable get without a majority succeeded")
		}

		members[1].Start()
		members[2].Start()
		c.WaitHealthy(t, harness.StartTimeout)
		eventually(t, "put after the majority is back", convergeTimeout, func() error {
			_, err := survivor.Put(shortCtx(t, 2*time.Second), "ml/after", "v")
			return err
		})
		g, err := survivor.Get(testCtx(t), "ml/", clientv3.WithPrefix())
		mustOK(t, "get after", err)
		if got := kvKeys(g.Kvs); !slices.Contains(got, "ml/before") || !slices.Contains(got, "ml/after") {
			t.Errorf("keys after recovery: %v, want ml/before and ml/after", got)
		}
		waitConverged(t, c)
	})
}

// addCaughtUpLearner adds a learner m3 to c after preload keys under
// mem/pre/, waits until it serves the writes serializably, and checks that
// it refuses a Put and a linearizable Get with etcd's error.
func addCaughtUpLearner(t *testing.T, c *harness.Cluster, cli *clientv3.Client, preload int) (*harness.Process, *clientv3.Client) {
	t.Helper()
	loadParallel(t, cli, "mem/pre/", preload, 16)
	learner := c.AddMember(t, "m3", true)
	lc := c.ClientFor(t, learner.Endpoint())
	_, err := cli.Put(testCtx(t), "mem/last", "v")
	mustOK(t, "put after adding the learner", err)
	eventually(t, "learner serves the last write serializably", convergeTimeout, func() error {
		g, err := lc.Get(shortCtx(t, 2*time.Second), "mem/last", clientv3.WithSerializable())
		if err != nil {
			return err
		}
		if len(g.Kvs) != 1 {
			return fmt.Errorf("mem/last not there yet (revision %d)", g.Header.Revision)
		}
		return nil
	})
	g, err := lc.Get(testCtx(t), "mem/pre/", clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithSerializable())
	mustOK(t, "count on the learner", err)
	if g.Count != int64(preload) {
		t.Errorf("learner holds %d preloaded keys, want %d", g.Count, preload)
	}
	_, err = lc.Put(shortCtx(t, 5*time.Second), "mem/learner", "v")
	wantErr(t, "put on a learner", err, rpctypes.Error(rpctypes.ErrGRPCNotSupportedForLearner))
	_, err = lc.Get(shortCtx(t, 5*time.Second), "mem/last")
	wantErr(t, "linearizable get on a learner", err, rpctypes.Error(rpctypes.ErrGRPCNotSupportedForLearner))
	return learner, lc
}

// TestClusterLearnerSnapshot adds a learner after enough writes that the
// leader has compacted its raft log past the start (snapshot-count 1000
// plus the 5000 entries etcd keeps for slow followers), so the learner
// can only catch up through a raft snapshot.
func TestClusterLearnerSnapshot(t *testing.T) {
	t.Parallel()
	forEachClusterEngine(t, func(t *testing.T, engine string) {
		opts := faultOptions(engine)
		opts.SnapshotCount = 1000
		c := harness.StartCluster(t, 3, opts)
		addCaughtUpLearner(t, c, c.Client(t), 7000)
	})
}

// TestClusterMembership adds a learner, promotes it, removes an original
// member, and adds and removes an unreachable member, checking quorum and
// writes at each step.
func TestClusterMembership(t *testing.T) {
	t.Parallel()
	forEachClusterEngine(t, func(t *testing.T, engine string) {
		c := harness.StartCluster(t, 3, faultOptions(engine))
		cli := c.Client(t)
		learner, lc := addCaughtUpLearner(t, c, cli, 100)

		id := c.MemberID(t, learner)
		eventually(t, "promote the learner", 30*time.Second, func() error {
			_, err := cli.MemberPromote(shortCtx(t, 5*time.Second), id)
			if err != nil && !isEtcdErr(err, rpctypes.ErrMemberLearnerNotReady) {
				t.Fatalf("promote learner: %v", err)
			}
			return err
		})
		ml, err := cli.MemberList(testCtx(t))
		mustOK(t, "member list after promote", err)
		checkMemberList(t, "after promote", ml.Members, c.Members())
		// The promotion is applied on the member itself a moment later.
		eventually(t, "put on the promoted member", convergeTimeout, func() error {
			_, err := lc.Put(shortCtx(t, 5*time.Second), "mem/promoted", "v")
			if err != nil && !isEtcdErr(err, rpctypes.Error(rpctypes.ErrGRPCNotSupportedForLearner)) {
				t.Fatalf("put on the promoted member: %v", err)
			}
			return err
		})

		l := c.WaitLeader(t, leaderBound)
		var victim *harness.Process
		for i, m := range c.Members()[:3] {
			if i != l {
				victim = m
				break
			}
		}
		c.RemoveMember(t, victim)
		cli = c.Client(t)
		for _, m := range c.Members() {
			_, err := c.ClientFor(t, m.Endpoint()).Put(testCtx(t), "mem/after-remove/"+m.Name(), "v")
			mustOK(t, "put on "+m.Name()+" after removing "+victim.Name(), err)
		}
		ml, err = cli.MemberList(testCtx(t))
		mustOK(t, "member list after remove", err)
		checkMemberList(t, "after remove", ml.Members, c.Members())

		// A fourth voter that never starts: 3 of 4 is still a quorum.
		ghostURL := "http://127.0.0.1:1" // nothing listens on port 1
		// etcd refuses a voter until every voter has been connected to the
		// leader for a while (its strict reconfiguration check).
		var add *clientv3.MemberAddResponse
		eventually(t, "add an unreachable member", convergeTimeout, func() error {
			var err error
			add, err = cli.MemberAdd(shortCtx(t, 5*time.Second), []string{ghostURL})
			if err != nil && !isEtcdErr(err, rpctypes.ErrUnhealthy) {
				t.Fatalf("add an unreachable member: %v", err)
			}
			return err
		})
		_, err = cli.Put(testCtx(t), "mem/with-ghost", "v")
		mustOK(t, "put with an unreachable member", err)
		_, err = cli.MemberRemove(testCtx(t), add.Member.ID)
		mustOK(t, "remove the unreachable member", err)
		_, err = cli.Put(testCtx(t), "mem/after-ghost", "v")
		mustOK(t, "put after removing the unreachable member", err)
		waitConverged(t, c)
	})
}

// isEtcdErr reports whether err carries want's gRPC code and message.
func isEtcdErr(err error, want error) bool {
	var we rpctypes.EtcdError
	if !errors.As(want, &we) {
		return false
	}
	code, msg := errCodeMsg(err)
	return code == we.Code() && msg == we.Error()
}

// loadParallel puts n keys under prefix with the given number of writers.
func loadParallel(t *testing.T, cli *clientv3.Client, prefix string, n, writers int) {
	t.Helper()
	ctx := testCtx(t)
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			for i := w; i < n; i += writers {
				if _, err := cli.Put(ctx, fmt.Sprintf("%s%06d", prefix, i), "v"); err != nil {
					errs <- fmt.Errorf("put %s%06d: %w", prefix, i, err)
					return
				}
			}
			errs <- nil
		}()
	}
	for range writers {
		mustOK(t, "preload", <-errs)
	}
}
