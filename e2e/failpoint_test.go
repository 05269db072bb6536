package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// Failpoints of pkg/failpoint and where the crash tests reach them. A
// member alone reaches all but the snapshot install ones, which need a
// follower that catches up from a leader's snapshot.
var (
	memberFailpoints = []string{
		"wal-before-write", "wal-after-write", "wal-after-sync",
		"backend-before-commit", "backend-after-commit",
		"snapshot-before-save", "snapshot-after-save",
		"wal-before-truncate", "wal-after-truncate",
		"compact-before-commit", "compact-after-commit",
	}
	installFailpoints = []string{"install-after-aside", "install-after-load", "install-after-switch"}
)

// failpointArgs make a member reach every failpoint within seconds: a
// snapshot every 100 entries, one WAL segment kept, 256 KiB segments.
var (
	failpointArgs = []string{"--snapshot-count", "100", "--snapshot-catchup-entries", "20", "--max-wals", "1"}
	segmentEnv    = "KVD_FAILPOINT_WAL_SEGMENT_BYTES=262144"
)

// The tests cover every failpoint the binary knows: it lists them when
// given an unknown one.
func TestFailpointsAllCovered(t *testing.T) {
	if harness.Kind() == harness.KindEtcd {
		t.Skip("kvd's own failpoints")
	}
	cmd := exec.Command(harness.KVDFailpointBinary(t), "--version")
	cmd.Env = append(cmd.Environ(), "KVD_FAILPOINTS=no-such-point=kill")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("an unknown failpoint was accepted: %s", out)
	}
	m := regexp.MustCompile(`NAME one of (.*)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no list of failpoints in: %s", out)
	}
	known := strings.Split(strings.TrimSpace(string(m[1])), ", ")
	covered := append(slices.Clone(memberFailpoints), installFailpoints...)
	slices.Sort(known)
	slices.Sort(covered)
	if !slices.Equal(known, covered) {
		t.Fatalf("failpoints in kvd: %v\ncovered by the crash tests: %v", known, covered)
	}
}

// TestFailpointCrash stops a member at each durability boundary, as kill -9
// would at that instant, under a write load with compactions; restarted
// without the failpoint, it must hold every acknowledged write at its
// revision, with no gap and nothing applied twice.
func TestFailpointCrash(t *testing.T) {
	t.Parallel()
	if harness.Kind() == harness.KindEtcd {
		t.Skip("kvd's own failpoints")
	}
	bin := harness.KVDFailpointBinary(t)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	for _, engine := range harness.Engines() {
		for _, fp := range memberFailpoints {
			t.Run(engine+"/"+fp, func(t *testing.T) {
				p := harness.StartKVD(t, harness.Options{Engine: engine, Binary: bin, Args: failpointArgs, Env: []string{segmentEnv}})
				c := p.Client(t)
				// Arm it past the start's own writes, at a random hit.
				// (A WAL write comes every few ms, a backend commit every
				// 100 ms, the others every second or so.)
				at := 1 + rng.IntN(3)
				switch {
				case strings.HasPrefix(fp, "wal-") && !strings.Contains(fp, "truncate"):
					at = 20 + rng.IntN(200)
				case strings.HasPrefix(fp, "backend-"):
					at = 5 + rng.IntN(30)
				}
				p.Stop()
				p.SetEnv(segmentEnv, fmt.Sprintf("KVD_FAILPOINTS=%s=kill@%d", fp, at))
				p.Start()
				p.WaitReady(harness.StartTimeout)
				acked := map[string]ackedPut{}
				n := loadUntil(t, c, 0, acked, func(ctx context.Context) { compactUntilExit(t, ctx, p, c) })
				if !p.LogContains("kvd failpoint " + fp + " hit") {
					t.Fatalf("the member stopped, but not at %s (hit %d): %s", fp, at, p.LogTail(5))
				}
				t.Logf("%s at hit %d: %d writes acknowledged", fp, at, n)
				p.SetEnv(segmentEnv)
				p.Restart()
				verifyAfterCrash(t, c, acked)
				_, err := c.Put(testCtx(t), "after", "crash")
				mustOK(t, "put after the restart", err)
			})
		}
	}
}

// compactUntilExit compacts a little behind the newest acknowledged write
// every 50 ms until the member exits, which must happen within 30 s.
func compactUntilExit(t *testing.T, ctx context.Context, p *harness.Process, c *clientv3.Client) {
	deadline := time.Now().Add(30 * time.Second)
	for !p.WaitExit(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			p.Kill()
			t.Errorf("the failpoint was not hit within 30 s")
			return
		}
		// clientv3 retries a read while the member is down: bound each call.
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		if r, err := c.Get(cctx, "compact-probe"); err == nil && r.Header.Revision > 11 {
			_, _ = c.Compact(cctx, r.Header.Revision-10)
		}
		cancel()
	}
}

// TestFailpointInstallCrash stops a follower at each step of installing the
// leader's snapshot: after its old backend is set aside, after the new one
// is loaded and synced, after the switch. Restarted without the failpoint,
// it must catch up and agree with the others: every acknowledged write on
// every member, one HashKV. The engines take turns.
func TestFailpointInstallCrash(t *testing.T) {
	t.Parallel()
	if harness.Kind() == harness.KindEtcd {
		t.Skip("kvd's own failpoints")
	}
	bin := harness.KVDFailpointBinary(t)
	for i, fp := range installFailpoints {
		engine := harness.Engines()[i%len(harness.Engines())]
		t.Run(engine+"/"+fp, func(t *testing.T) {
			c := harness.StartCluster(t, 3, harness.ClusterOptions{Engine: engine, Binary: bin, SnapshotCount: 100,
				Args: []string{"--snapshot-catchup-entries", "10"}})
			ms := c.Members()
			follower := ms[(c.Leader(t)+1)%len(ms)]
			var others []string
			for _, m := range ms {
				if m != follower {
					others = append(others, m.Endpoint())
				}
			}
			follower.Stop()
			load := startWriteLoad(c.ClientFor(t, others...), "fp/", 8)
			load.waitAcked(t, "writes while the follower is down", 400, 30*time.Second)
			follower.SetEnv("KVD_FAILPOINTS=" + fp + "=kill")
			follower.Start()
			if !follower.WaitExit(30 * time.Second) {
				t.Fatalf("the follower did not stop at %s within 30 s", fp)
			}
			if !follower.LogContains("kvd failpoint " + fp + " hit") {
				t.Fatalf("the follower stopped, but not at %s: %s", fp, follower.LogTail(5))
			}
			// The load pauses while the follower restarts: with 10
			// catch-up entries, unthrottled writers outrun each snapshot
			// it installs, and it took 20-35 s of snapshots to catch up.
			acked := load.stop()
			follower.SetEnv()
			follower.Start()
			follower.WaitReady(harness.StartTimeout)
			after := startWriteLoad(c.ClientFor(t, others...), "fp2/", 8)
			after.waitAcked(t, "writes after the follower's restart", 100, 30*time.Second)
			verifyAckedEverywhere(t, c, "fp/", acked)
			verifyAckedEverywhere(t, c, "fp2/", after.stop())
		})
	}
}
