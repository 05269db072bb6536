package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvd-dev/kvd/e2e/harness"
	"github.com/kvd-dev/kvd/e2e/powercut"
)

// powerCutDefaultCycles is the number of power cuts per engine;
// KVD_E2E_POWERCUT_CYCLES changes it.
const powerCutDefaultCycles = 3

func powerCutCyclesFromEnv(t *testing.T) int {
	if s := os.Getenv("KVD_E2E_POWERCUT_CYCLES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("KVD_E2E_POWERCUT_CYCLES=%q: want a positive number", s)
		}
		return n
	}
	return powerCutDefaultCycles
}

// TestPowerCut is TestCrashRecovery with the page cache lost too: the
// member's data directory is on a powercut file system, and after the
// SIGKILL everything kvd wrote but did not fsync is thrown away (the last
// unsynced write torn on every other cycle), as a power cut would. Every
// acknowledged write must be back at its revision, with no gap.
//
// Two models of directory entries: "journaled" (an fsync of any file also
// makes earlier creates/renames/unlinks durable, as ext4 and xfs do) and
// "posix" (only an fsync of the directory does). Badger's names of new
// files are durable under POSIX only with the patched ristretto kvd builds
// it with (third_party/README.md, docs/reliability.md "Power cuts").
func TestPowerCut(t *testing.T) {
	t.Parallel()
	cycles := powerCutCyclesFromEnv(t)
	for _, engine := range harness.Engines() {
		for _, mode := range []string{"journaled", "posix"} {
			t.Run(engine+"/"+mode, func(t *testing.T) {
				runPowerCuts(t, engine, mode == "journaled", cycles)
			})
		}
	}
}

func runPowerCuts(t *testing.T, engine string, journaled bool, cycles int) {
	pc := powercut.Mount(t, t.TempDir())
	pc.SetJournaled(journaled)
	p := harness.StartKVD(t, harness.Options{Engine: engine, DataDir: filepath.Join(pc.Dir, "data")})
	// Before the cleanups: each mount's cleanup unmounts it, and the later
	// mounts' cleanups run before the member's.
	defer p.Kill()
	// No sync(1) after the first start: the directories kvd creates must
	// be durable by themselves.
	c := p.Client(t)
	acked := map[string]ackedPut{}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	for cycle := range cycles {
		d := 500*time.Millisecond + time.Duration(rng.Int64N(int64(1500*time.Millisecond)))
		n := crashLoad(t, p, c, cycle, d, acked)
		r := pc.PowerCut(cycle%2 == 1)
		t.Logf("cycle %d: %d writes acknowledged before SIGKILL (%d in all); power cut: %v", cycle, n, len(acked), r)
		if n == 0 {
			t.Fatalf("cycle %d: no write was acknowledged; the load did not run", cycle)
		}
		pc = pc.Remount(t)
		p.Start()
		if err := waitServing(p, c); err != nil {
			t.Fatalf("cycle %d: restart after the power cut: %v; undone directory operations: %q", cycle, err, r.UndoneDirDescs)
		}
		verifyAfterCrash(t, c, acked)
		if t.Failed() {
			t.Logf("cycle %d: undone directory operations: %q", cycle, r.UndoneDirDescs)
			return
		}
	}
}

// TestPowerCutCatchesNoFsync shows the power cut is no no-op: with
// --unsafe-no-fsync, kvd must lose acknowledged writes (or fail to start).
func TestPowerCutCatchesNoFsync(t *testing.T) {
	if harness.Kind() == harness.KindEtcd {
		t.Skip("kvd's --unsafe-no-fsync")
	}
	for _, engine := range harness.Engines() {
		t.Run(engine, func(t *testing.T) {
			pc := powercut.Mount(t, t.TempDir())
			p := harness.StartKVD(t, harness.Options{Engine: engine, DataDir: filepath.Join(pc.Dir, "data"), Args: []string{"--unsafe-no-fsync"}})
			defer p.Kill()
			// The directories are durable: what is lost is the data.
			mustOK(t, "sync after the first start", pc.Sync())
			c := p.Client(t)
			acked := map[string]ackedPut{}
			n := crashLoad(t, p, c, 0, time.Second, acked)
			if n == 0 {
				t.Fatalf("no write was acknowledged; the load did not run")
			}
			r := pc.PowerCut(false)
			t.Logf("%d writes acknowledged; power cut: %v", n, r)
			pc = pc.Remount(t)
			p.Start()
			lost, err := lostAcked(p, c, acked)
			switch {
			case err != nil:
				t.Logf("kvd did not come back after the power cut: %v\n%s", err, p.LogTail(20))
			case lost == 0:
				t.Fatalf("all %d acknowledged writes survived a power cut without fsync: the power cut lost nothing", n)
			default:
				t.Logf("lost %d of %d acknowledged writes, as expected without fsync", lost, n)
			}
		})
	}
}

// waitServing waits until the restarted member serves a read; an error
// if it exits or never does.
func waitServing(p *harness.Process, c *clientv3.Client) error {
	deadline := time.Now().Add(harness.StartTimeout)
	for {
		if exited, err := p.Exited(); exited {
			return fmt.Errorf("exited: %v\n%s", err, p.LogTail(10))
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.Get(ctx, "powercut-readiness-probe")
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lostAcked waits for the restarted member and counts the acknowledged
// writes it does not have.
func lostAcked(p *harness.Process, c *clientv3.Client, acked map[string]ackedPut) (int, error) {
	if err := waitServing(p, c); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := c.Get(ctx, crashPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return 0, err
	}
	have := map[string]bool{}
	for _, kv := range r.Kvs {
		have[string(kv.Key)] = true
	}
	lost := 0
	for k := range acked {
		if !have[k] {
			lost++
		}
	}
	return lost, nil
}

// TestPowerCutCluster cuts the power of one member of three, twice, under
// writes through the other two. That member's fsyncs count towards the
// quorums that acknowledged the writes, so losing any of them could lose
// an acknowledged write. Restarted on what its disk kept, it must catch up:
// every member holds every acknowledged write at its revision, with one
// HashKV. The strict (POSIX) directory model.
func TestPowerCutCluster(t *testing.T) {
	t.Parallel()
	if harness.Kind() == harness.KindEtcd {
		t.Skip("a kvd data dir on the power-cut file system")
	}
	for _, engine := range harness.Engines() {
		t.Run(engine, func(t *testing.T) {
			pc := powercut.Mount(t, t.TempDir())
			c := harness.StartCluster(t, 3, harness.ClusterOptions{Engine: engine, SnapshotCount: 500,
				DataDir: func(name string) string {
					if name == "m2" {
						return filepath.Join(pc.Dir, "data")
					}
					return ""
				}})
			ms := c.Members()
			victim := ms[2]
			// Before the cleanups: a remount's cleanup unmounts before the
			// cluster's stops the member.
			defer victim.Kill()
			load := startWriteLoad(c.ClientFor(t, ms[0].Endpoint(), ms[1].Endpoint()), "pc/", 8)
			for cycle := range 2 {
				load.waitAcked(t, "writes before the power cut", 300, 30*time.Second)
				victim.Kill()
				r := pc.PowerCut(cycle == 1)
				t.Logf("cycle %d: power cut of %s: %v", cycle, victim.Name(), r)
				load.waitAcked(t, "writes while the member is down", 200, 30*time.Second)
				pc = pc.Remount(t)
				victim.Start()
				victim.WaitReady(harness.StartTimeout)
			}
			load.waitAcked(t, "writes after the last restart", 200, 30*time.Second)
			acked := load.stop()
			verifyAckedEverywhere(t, c, "pc/", acked)
			t.Logf("%d writes acknowledged in all", len(acked))
		})
	}
}
