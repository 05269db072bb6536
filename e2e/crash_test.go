package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvd-dev/kvd/e2e/harness"
)

const (
	crashWriters = 16
	crashCycles  = 3
	crashPrefix  = "crash/"
)

// ackedPut is a write the server acknowledged.
type ackedPut struct {
	value string
	rev   int64
}

// TestCrashRecovery loads the server with concurrent puts of unique keys,
// kills it with SIGKILL at a random moment, restarts it on the same data
// directory and requires every acknowledged write back with its value and
// revision, and the revisions of all keys to be consecutive: nothing
// acknowledged lost, nothing applied twice, no gap.
func TestCrashRecovery(t *testing.T) {
	t.Parallel()
	for _, engine := range harness.Engines() {
		t.Run(engine, func(t *testing.T) {
			p := harness.StartKVD(t, harness.Options{Engine: engine})
			c := p.Client(t)
			acked := map[string]ackedPut{}
			rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
			for cycle := range crashCycles {
				n := crashLoad(t, p, c, cycle, time.Second+time.Duration(rng.Int64N(int64(time.Second))), acked)
				t.Logf("cycle %d: %d writes acknowledged before SIGKILL (%d in all)", cycle, n, len(acked))
				if n == 0 {
					t.Fatalf("cycle %d: no write was acknowledged; the load did not run", cycle)
				}
				p.Restart()
				verifyAfterCrash(t, c, acked)
				if t.Failed() {
					return
				}
			}
		})
	}
}

// crashLoad runs the writers for about d, kills the process under them,
// and records into acked the writes that were acknowledged.
func crashLoad(t *testing.T, p *harness.Process, c *clientv3.Client, cycle int, d time.Duration, acked map[string]ackedPut) int {
	t.Helper()
	return loadUntil(t, c, cycle, acked, func(ctx context.Context) {
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-ctx.Done():
		}
		p.Kill()
	})
}

// loadUntil runs the writers until crash returns (it ends the server), and
// records into acked the writes that were acknowledged.
func loadUntil(t *testing.T, c *clientv3.Client, cycle int, acked map[string]ackedPut, crash func(context.Context)) int {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		mu  sync.Mutex
		n   int
		wg  sync.WaitGroup
		bad []string
	)
	for w := range crashWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				key := fmt.Sprintf("%sc%d/w%02d/%07d", crashPrefix, cycle, w, i)
				val := fmt.Sprintf("value-%d-%d-%d", cycle, w, i)
				r, err := c.Put(ctx, key, val)
				if err != nil {
					// The server is gone (or going): the outcome of this
					// put is unknown, so it is not recorded either way.
					return
				}
				mu.Lock()
				if _, dup := acked[key]; dup {
					bad = append(bad, key)
				}
				acked[key] = ackedPut{value: val, rev: r.Header.Revision}
				n++
				mu.Unlock()
			}
		}()
	}
	crash(ctx)
	cancel()
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("keys written twice by the load itself: %q", bad)
	}
	return n
}

func verifyAfterCrash(t *testing.T, c *clientv3.Client, acked map[string]ackedPut) {
	t.Helper()
	r, err := c.Get(testCtx(t), crashPrefix, clientv3.WithPrefix())
	mustOK(t, "read back", err)
	checkHeader(t, "read back", r.Header)
	seen := map[string]bool{}
	revs := make([]int64, 0, len(r.Kvs))
	missing := 0
	for _, kv := range r.Kvs {
		k := string(kv.Key)
		seen[k] = true
		revs = append(revs, kv.ModRevision)
		if kv.CreateRevision != kv.ModRevision || kv.Version != 1 {
			t.Errorf("key %s written once has create %d mod %d version %d", k, kv.CreateRevision, kv.ModRevision, kv.Version)
		}
		if a, ok := acked[k]; ok && (a.value != string(kv.Value) || a.rev != kv.ModRevision) {
			t.Errorf("key %s: acknowledged value %q at revision %d, read back %q at %d", k, a.value, a.rev, kv.Value, kv.ModRevision)
		}
	}
	for k, a := range acked {
		if !seen[k] {
			missing++
			if missing <= 10 {
				t.Errorf("acknowledged write lost: %s = %q at revision %d", k, a.value, a.rev)
			}
		}
	}
	if missing > 10 {
		t.Errorf("... %d acknowledged writes lost in all", missing)
	}
	// Every put is of a new key, so the store's revisions 2..head are
	// exactly the keys' mod revisions, one each.
	slices.Sort(revs)
	head := r.Header.Revision
	if int64(len(revs)) != head-1 {
		t.Errorf("%d keys but head revision %d: want %d keys for revisions 2..%d", len(revs), head, head-1, head)
	}
	for i, rev := range revs {
		if want := int64(i) + 2; rev != want {
			t.Errorf("revisions not consecutive: position %d holds revision %d, want %d (neighbours %v)", i, rev, want, revs[max(0, i-2):min(len(revs), i+3)])
			break
		}
	}
}
