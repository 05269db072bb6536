package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvd-dev/kvd/e2e/harness"
	lz "github.com/kvd-dev/kvd/e2e/linearizability"
)

const (
	lzClients  = 8
	lzKeys     = 5
	lzDuration = 12 * time.Second
	// lzOpTimeout bounds one request; a write that runs out of it has an
	// unknown outcome.
	lzOpTimeout = 2 * time.Second
	// lzCheckTimeout bounds porcupine's search.
	lzCheckTimeout = 2 * time.Minute
)

// TestLinearizability records a history of gets, puts, deletes and
// compare-and-puts on a handful of keys from 8 clients spread over a
// 3-member cluster, while a member is killed and restarted and the leader
// is partitioned away and healed, and checks it with porcupine against a
// model of a key-value map with revisions.
func TestLinearizability(t *testing.T) {
	forEachClusterEngine(t, func(t *testing.T, engine string) {
		opts := faultOptions(engine)
		opts.PeerProxy = true
		c := harness.StartCluster(t, 3, opts)
		rec := &recorder{start: time.Now()}

		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var wg sync.WaitGroup
		members := c.Members()
		for i := range lzClients {
			// Each client prefers one member but can fail over to the
			// others, as real clients do.
			eps := []string{members[i%3].Endpoint(), members[(i+1)%3].Endpoint(), members[(i+2)%3].Endpoint()}
			cli := c.ClientFor(t, eps...)
			wg.Add(1)
			go func() {
				defer wg.Done()
				runClient(ctx, rec, cli, i)
			}()
		}

		end := time.Now().Add(lzDuration)
		faults := injectFaults(t, c, ctx)
		<-time.After(time.Until(end))
		cancel()
		wg.Wait()
		if t.Failed() {
			return
		}
		history := rec.history()
		unknown := 0
		for _, op := range history {
			if op.Output.(lz.Output).Unknown {
				unknown++
			}
		}
		t.Logf("faults: %v; %d operations, %d writes of unknown outcome", faults, len(history), unknown)
		if len(history) < 200 {
			t.Fatalf("only %d operations recorded; the workload did not run", len(history))
		}

		switch res := porcupine.CheckOperationsTimeout(lz.Model, history, lzCheckTimeout); res {
		case porcupine.Ok:
		case porcupine.Illegal:
			// Checked again with the bookkeeping the visualization needs,
			// which the passing case need not pay for.
			_, info := porcupine.CheckOperationsVerbose(lz.Model, history, lzCheckTimeout)
			// Not t.TempDir: that is removed when the test ends, and the
			// file is for reading afterwards.
			dir, err := os.MkdirTemp("", "kvd-linearizability-")
			if err != nil {
				t.Fatalf("create visualization dir: %v", err)
			}
			path := filepath.Join(dir, t.Name()[strings.LastIndexByte(t.Name(), '/')+1:]+".html")
			if err := porcupine.VisualizePath(lz.Model, info, path); err != nil {
				t.Errorf("write visualization %s: %v", path, err)
			}
			t.Errorf("history is not linearizable; visualization at %s", path)
		default:
			t.Errorf("linearizability check gave %s within %v", res, lzCheckTimeout)
		}
	})
}

// recorder collects operations from every client.
type recorder struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
}

func (r *recorder) now() int64 { return time.Since(r.start).Nanoseconds() }

func (r *recorder) add(client int, call int64, in lz.Input, out lz.Output) {
	ret := r.now()
	if out.Unknown {
		ret = lz.Infinity
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, porcupine.Operation{ClientId: client, Call: call, Return: ret, Input: in, Output: out})
}

func (r *recorder) history() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]porcupine.Operation(nil), r.ops...)
}

// runClient issues random operations until ctx ends. Every put writes a
// value no other put writes, so a read names the write it saw.
func runClient(ctx context.Context, rec *recorder, cli *clientv3.Client, id int) {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(id)))
	lastSeen := map[string]string{}
	for seq := 0; ctx.Err() == nil; seq++ {
		key := fmt.Sprintf("lz/%d", rng.IntN(lzKeys))
		val := fmt.Sprintf("c%d-%d", id, seq)
		var in lz.Input
		switch p := rng.IntN(100); {
		case p < 45:
			in = lz.Input{Kind: lz.Get, Key: key}
		case p < 75:
			in = lz.Input{Kind: lz.Put, Key: key, Value: val}
		case p < 85:
			in = lz.Input{Kind: lz.Delete, Key: key}
		default:
			in = lz.Input{Kind: lz.CompareAndPut, Key: key, Value: val, Expect: lastSeen[key]}
		}
		call := rec.now()
		octx, cancel := context.WithTimeout(ctx, lzOpTimeout)
		out, err := do(octx, cli, in)
		cancel()
		if err != nil {
			if in.Kind == lz.Get {
				// A failed read changed nothing and showed nothing.
				continue
			}
			out = lz.Output{Unknown: true}
		} else if in.Kind == lz.Get && out.Exists {
			lastSeen[key] = out.Value
		}
		rec.add(id, call, in, out)
	}
}

func do(ctx context.Context, cli *clientv3.Client, in lz.Input) (lz.Output, error) {
	switch in.Kind {
	case lz.Get:
		r, err := cli.Get(ctx, in.Key)
		if err != nil {
			return lz.Output{}, err
		}
		out := lz.Output{Rev: r.Header.Revision}
		if len(r.Kvs) > 0 {
			out.Exists, out.Value, out.ModRev = true, string(r.Kvs[0].Value), r.Kvs[0].ModRevision
		}
		return out, nil
	case lz.Put:
		r, err := cli.Put(ctx, in.Key, in.Value)
		if err != nil {
			return lz.Output{}, err
		}
		return lz.Output{Rev: r.Header.Revision}, nil
	case lz.Delete:
		r, err := cli.Delete(ctx, in.Key)
		if err != nil {
			return lz.Output{}, err
		}
		return lz.Output{Rev: r.Header.Revision, Deleted: r.Deleted}, nil
	case lz.CompareAndPut:
		r, err := cli.Txn(ctx).
			If(clientv3.Compare(clientv3.Value(in.Key), "=", in.Expect)).
			Then(clientv3.OpPut(in.Key, in.Value)).
			Commit()
		if err != nil {
			return lz.Output{}, err
		}
		return lz.Output{Rev: r.Header.Revision, Succeeded: r.Succeeded}, nil
	}
	return lz.Output{}, fmt.Errorf("unknown operation %v", in.Kind)
}

// injectFaults runs, from the test goroutine, a kill -9 and restart of the
// leader, then a partition of the leader healed a few seconds later,
// spread over the workload, and returns what it did.
func injectFaults(t *testing.T, c *harness.Cluster, ctx context.Context) []string {
	t.Helper()
	var did []string
	pause := func(d time.Duration) bool {
		select {
		case <-time.After(d):
			return true
		case <-ctx.Done():
			return false
		}
	}
	if !pause(2 * time.Second) {
		return did
	}
	victim := c.Members()[c.WaitLeader(t, leaderBound)]
	victim.Kill()
	did = append(did, "kill "+victim.Name())
	if !pause(1500 * time.Millisecond) {
		return did
	}
	victim.Restart()
	did = append(did, "restart "+victim.Name())
	if !pause(1 * time.Second) {
		return did
	}
	leader := c.Members()[c.WaitLeader(t, leaderBound)]
	c.Isolate(t, leader)
	did = append(did, "isolate "+leader.Name())
	pause(3 * time.Second)
	c.Heal(t)
	did = append(did, "heal")
	return did
}
