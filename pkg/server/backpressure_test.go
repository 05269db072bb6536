package server

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/fx"

	"github.com/kvd-dev/kvd/pkg/api"
	"github.com/kvd-dev/kvd/pkg/apply"
)

// TestStalledApplierRefusesWritesAndRecovers stalls the member's applier
// under a write load: clients get "etcdserver: too many requests" once
// 5000 entries wait to be applied, the committed-but-unapplied backlog stays
// at that bound (plus the proposals in flight), a refused put has no
// effect, and once the applier resumes everything acknowledged is there and
// writes are accepted again.
func TestStalledApplierRefusesWritesAndRecovers(t *testing.T) {
	c := testConfig(t, "bolt", t.TempDir())
	var (
		acts    *Actors
		applied *apply.Applied
	)
	m := startMember(t, c, fx.Populate(&acts, &applied))
	var acked []string
	for i := 0; i < 20; i++ {
		k := fmt.Sprintf("before/%02d", i)
		put(t, m, k, "v")
		acked = append(acked, k)
	}

	// Stall: the applier runs a snapshot point that waits for the gate.
	gate, stalled := make(chan struct{}), make(chan struct{})
	go func() {
		_ = acts.Applier.SnapshotPoint(context.Background(), func(*raftpb.ConfState) error {
			close(stalled)
			<-gate
			return nil
		})
	}()
	<-stalled
	base := applied.Index()

	// Load: clients that give up quickly, as a timed-out client retries.
	const clients = 64
	var (
		refused   atomic.Int64
		stop      atomic.Bool
		maxGap    atomic.Uint64
		mu        sync.Mutex
		refusedKs []string
		wg        sync.WaitGroup
	)
	for g := 0; g < clients; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				k := fmt.Sprintf("load/%02d/%06d", g, i)
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				_, err := m.kv.Put(ctx, &pb.PutRequest{Key: []byte(k), Value: []byte("v")})
				cancel()
				if err == nil {
					t.Errorf("put %s acknowledged while the applier is stalled", k)
					return
				}
				if errors.Is(rpctypes.Error(err), rpctypes.ErrTooManyRequests) {
					if refused.Add(1) >= 500 {
						stop.Store(true)
					}
					mu.Lock()
					refusedKs = append(refusedKs, k)
					mu.Unlock()
					time.Sleep(5 * time.Millisecond)
				}
			}
		}(g)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for !stop.Load() {
		if gap := acts.Node.CommitIndex() - applied.Index(); gap > maxGap.Load() {
			maxGap.Store(gap)
		}
		if time.Now().After(deadline) {
			stop.Store(true)
			wg.Wait()
			t.Fatalf("no write refused: gap %d after 2 minutes", acts.Node.CommitIndex()-applied.Index())
		}
		time.Sleep(5 * time.Millisecond)
	}
	wg.Wait()
	commit := acts.Node.CommitIndex()
	if applied.Index() != base {
		t.Fatalf("applied index moved from %d to %d while stalled", base, applied.Index())
	}
	gap := commit - base
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("refused %d puts; committed %d entries past the applied index (max sampled gap %d); heap %d MiB",
		refused.Load(), gap, maxGap.Load(), ms.HeapAlloc>>20)
	// Past the gap only proposals already past the check get in: at most
	// one per client, plus the odd internal proposal.
	if limit := uint64(api.MaxGapBetweenApplyAndCommitIndex + clients + 16); gap > limit {
		t.Fatalf("%d entries committed but not applied, over %d", gap, limit)
	}
	if gap <= api.MaxGapBetweenApplyAndCommitIndex {
		t.Fatalf("writes refused with a gap of only %d", gap)
	}

	// Resume.
	close(gate)
	waitApplied := time.Now().Add(time.Minute)
	for applied.Index() < commit {
		if time.Now().After(waitApplied) {
			t.Fatalf("applied %d, committed %d: applier did not catch up", applied.Index(), commit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i := 0; i < 20; i++ {
		k := fmt.Sprintf("after/%02d", i)
		put(t, m, k, "v")
		acked = append(acked, k)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, k := range acked {
		resp, err := m.kv.Range(ctx, &pb.RangeRequest{Key: []byte(k)})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 1 {
			t.Fatalf("acknowledged put %s lost", k)
		}
	}
	for _, k := range refusedKs {
		resp, err := m.kv.Range(ctx, &pb.RangeRequest{Key: []byte(k), Serializable: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 0 {
			t.Fatalf("put %s was refused but applied", k)
		}
	}
	// Every committed load put was applied.
	resp, err := m.kv.Range(ctx, &pb.RangeRequest{Key: []byte("load/"), RangeEnd: []byte("load0"), CountOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d load puts committed while stalled and applied after", resp.Count)
	if resp.Count < api.MaxGapBetweenApplyAndCommitIndex-100 {
		t.Fatalf("only %d load puts applied after the stall", resp.Count)
	}
}
