package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// compactRev is the server's last compaction revision (0: none), from HashKV.
func compactRev(ctx context.Context, cli *clientv3.Client, endpoint string) (int64, error) {
	r, err := cli.HashKV(ctx, endpoint, 0)
	if err != nil {
		return 0, err
	}
	return max(r.CompactRevision, 0), nil
}

// waitCompactRev waits until the compaction revision is want.
func waitCompactRev(t *testing.T, cli *clientv3.Client, endpoint string, want int64, within time.Duration) {
	t.Helper()
	ctx := testCtx(t)
	deadline := time.Now().Add(within)
	var got int64
	var err error
	for time.Now().Before(deadline) {
		if got, err = compactRev(ctx, cli, endpoint); err == nil && got == want {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("compaction revision %d (err %v) after %s, want %d", got, err, within, want)
}

// checkCompactedAt asserts that reads below rev fail as compacted and reads at
// rev and at the latest revision succeed.
func checkCompactedAt(ctx context.Context, cli *clientv3.Client, key string, rev int64) error {
	if rev > 1 {
		_, err := cli.Get(ctx, key, clientv3.WithRev(rev-1))
		if err == nil || !strings.Contains(err.Error(), rpctypes.ErrCompacted.Error()) {
			return fmt.Errorf("get at %d, below the compaction at %d: %v, want %q", rev-1, rev, err, rpctypes.ErrCompacted.Error())
		}
	}
	if _, err := cli.Get(ctx, key, clientv3.WithRev(rev)); err != nil {
		return fmt.Errorf("get at the compaction revision %d: %v", rev, err)
	}
	if _, err := cli.Get(ctx, key); err != nil {
		return fmt.Errorf("get at the latest revision: %v", err)
	}
	return nil
}

// TestAutoCompactionRevision: with --auto-compaction-mode revision and a
// retention of 10, the leader compacts at the current revision minus 10.
// etcd looks every five minutes, too long for this test: kvd is run with
// that interval shortened to 300ms by its test knob; under
// KVD_E2E_SERVER=etcd the test is skipped.
func TestAutoCompactionRevision(t *testing.T) {
	if harness.Kind() == harness.KindEtcd {
		t.Skip("etcd's revision compactor looks every 5 minutes")
	}
	t.Setenv("KVD_TEST_AUTO_COMPACTION_REVISION_INTERVAL", "300ms")
	p := harness.StartKVD(t, harness.Options{Engine: "bolt",
		Args: []string{"--auto-compaction-mode", "revision", "--auto-compaction-retention", "10"}})
	cli := p.Client(t)
	ctx := testCtx(t)

	// Nine revisions in all: nothing to compact.
	for i := range 8 {
		_, err := cli.Put(ctx, "k", fmt.Sprint(i)) // revs 2..9
		mustOK(t, "put", err)
	}
	time.Sleep(time.Second)
	if c, err := compactRev(ctx, cli, p.Endpoint()); err != nil || c != 0 {
		t.Fatalf("compaction at %d (err %v) with 9 revisions, want none", c, err)
	}
	for i := 8; i < 30; i++ {
		_, err := cli.Put(ctx, "k", fmt.Sprint(i)) // revs 10..31
		mustOK(t, "put", err)
	}
	waitCompactRev(t, cli, p.Endpoint(), 21, 5*time.Second)
	if err := checkCompactedAt(ctx, cli, "k", 21); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		_, err := cli.Put(ctx, "k", fmt.Sprint(i)) // revs 32..36
		mustOK(t, "put", err)
	}
	waitCompactRev(t, cli, p.Endpoint(), 26, 5*time.Second)
	if err := checkCompactedAt(ctx, cli, "k", 26); err != nil {
		t.Fatal(err)
	}
}

// periodicObservation is the compaction revision seen at one time.
type periodicObservation struct {
	at      time.Duration // since the run started
	compact int64
	age     time.Duration // since the put of revision compact returned (0: unknown)
	rev     int64         // the latest revision written then
}

// runPeriodic writes a key every 20ms for d while watching the compaction
// revision every 150ms, then checks reads around the last compaction. It
// checks that no revision younger than period was compacted and returns
// what it saw.
func runPeriodic(p *harness.Process, cli *clientv3.Client, started time.Time, period, d time.Duration) ([]periodicObservation, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d+20*time.Second)
	defer cancel()
	t0 := time.Now()
	var mu sync.Mutex
	written := map[int64]time.Time{}
	last := int64(1)
	done := make(chan error, 1)
	go func() {
		for i := 0; time.Since(t0) < d; i++ {
			r, err := cli.Put(ctx, "p", fmt.Sprint(i))
			if err != nil {
				done <- err
				return
			}
			mu.Lock()
			written[r.Header.Revision] = time.Now()
			last = r.Header.Revision
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
		done <- nil
	}()
	var obs []periodicObservation
	var werr error
	for writing := true; writing; {
		select {
		case werr = <-done:
			writing = false
		case <-time.After(150 * time.Millisecond):
		}
		at := time.Now()
		c, err := compactRev(ctx, cli, p.Endpoint())
		if err != nil {
			return obs, err
		}
		mu.Lock()
		o := periodicObservation{at: at.Sub(t0), compact: c, rev: last}
		if w, ok := written[c]; ok {
			o.age = at.Sub(w)
		}
		mu.Unlock()
		obs = append(obs, o)
		// Revision c was the store's revision when sampled, at least one
		// period before the compaction: its put returned (a few ms after
		// it was applied) at least that long ago.
		if o.age != 0 && o.age < period-100*time.Millisecond {
			return obs, fmt.Errorf("at +%s: compacted at %d, written only %s before", o.at, c, o.age)
		}
		if c > 0 && at.Sub(started) < period {
			return obs, fmt.Errorf("at +%s: compacted at %d less than %s after the start", o.at, c, period)
		}
	}
	if werr != nil {
		return obs, werr
	}
	end := obs[len(obs)-1]
	distinct := map[int64]bool{}
	for _, o := range obs {
		if o.compact > 0 {
			distinct[o.compact] = true
		}
	}
	// Compactions every period: at least d/period-1 of them, and the last
	// at a revision at most about two periods old.
	if len(distinct) < int(d/period)-1 {
		return obs, fmt.Errorf("%d distinct compactions in %s, want at least %d", len(distinct), d, int(d/period)-1)
	}
	if end.age == 0 || end.age > 2*period+time.Second {
		return obs, fmt.Errorf("at the end the compaction is at %d, written %s ago, want at most %s", end.compact, end.age, 2*period+time.Second)
	}
	return obs, checkCompactedAt(ctx, cli, "p", end.compact)
}

// TestAutoCompactionPeriodic: with --auto-compaction-mode periodic and a 1s
// retention, the leader compacts every second at the revision of about one
// second before, never at a younger one. The same run against etcd v3.7.3
// side by side, under the same checks.
func TestAutoCompactionPeriodic(t *testing.T) {
	const period = time.Second
	args := []string{"--auto-compaction-mode", "periodic", "--auto-compaction-retention", "1s"}
	type server struct {
		p       *harness.Process
		cli     *clientv3.Client
		started time.Time
	}
	var servers []server
	started := time.Now()
	p := harness.StartKVD(t, harness.Options{Engine: "bolt", Args: args})
	servers = append(servers, server{p, p.Client(t), started})
	if harness.Kind() != harness.KindEtcd {
		started := time.Now()
		e := harness.StartEtcd(t, harness.Options{Args: args})
		servers = append(servers, server{e, e.Client(t), started})
	}
	results := make([][]periodicObservation, len(servers))
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Go(func() { results[i], errs[i] = runPeriodic(s.p, s.cli, s.started, period, 4*time.Second) })
	}
	wg.Wait()
	for i, s := range servers {
		var b strings.Builder
		for _, o := range results[i] {
			switch {
			case o.age > 0:
				fmt.Fprintf(&b, " +%.2fs:%d(%d behind, %dms old)", o.at.Seconds(), o.compact, o.rev-o.compact, o.age.Milliseconds())
			case o.compact > 0:
				fmt.Fprintf(&b, " +%.2fs:%d(%d behind)", o.at.Seconds(), o.compact, o.rev-o.compact)
			}
		}
		t.Logf("%s compactions seen:%s", s.p.Label(), b.String())
		if errs[i] != nil {
			t.Errorf("%s: %v", s.p.Label(), errs[i])
		}
	}
}
