package server

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// A session's keep-alives hold its lease past the TTL; an orphaned session's
// lease expires and takes its keys with it.
func TestSessionKeepsLeaseAlive(t *testing.T) {
	c := testConfig(t, "bolt", t.TempDir())
	startMember(t, c)
	cli := newClient(t, c)
	ctx := context.Background()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(2))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	start := time.Now()
	if _, err := cli.Put(ctx, "owned", "v", clientv3.WithLease(s.Lease())); err != nil {
		t.Fatal(err)
	}
	for time.Since(start) < 4*time.Second {
		resp, err := cli.Get(ctx, "owned")
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 1 {
			t.Fatalf("session key gone %v after the grant, while kept alive", time.Since(start))
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.Orphan()
	orphaned := time.Now()
	for {
		resp, err := cli.Get(ctx, "owned")
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			break
		}
		if time.Since(orphaned) > 10*time.Second {
			t.Fatal("orphaned session's key never expired")
		}
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("session not done after its lease expired")
	}
}

// Twenty contending goroutines, each with its own session: never two in the
// critical section at once, and everyone gets in.
func TestMutexUnderContention(t *testing.T) {
	c := testConfig(t, "bolt", t.TempDir())
	startMember(t, c)
	cli := newClient(t, c)
	const workers = 20
	var inside, maxInside, done atomic.Int32
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
			if err != nil {
				errc <- err
				return
			}
			defer s.Close()
			m := concurrency.NewMutex(s, "/lock/")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := m.Lock(ctx); err != nil {
				errc <- fmt.Errorf("worker %d lock: %w", i, err)
				return
			}
			n := inside.Add(1)
			for {
				old := maxInside.Load()
				if n <= old || maxInside.CompareAndSwap(old, n) {
					break
				}
			}
			_, err = cli.Put(ctx, "/counter", fmt.Sprint(i))
			inside.Add(-1)
			if uerr := m.Unlock(ctx); err == nil {
				err = uerr
			}
			if err != nil {
				errc <- fmt.Errorf("worker %d: %w", i, err)
				return
			}
			done.Add(1)
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if maxInside.Load() != 1 || done.Load() != workers {
		t.Fatalf("%d workers done, at most %d inside at once; want %d and 1", done.Load(), maxInside.Load(), workers)
	}
}

// A revocation's DELETE events arrive in one watch response.
func TestRevokeEventsInOneWatchResponse(t *testing.T) {
	c := testConfig(t, "bolt", t.TempDir())
	startMember(t, c)
	cli := newClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	var last int64
	for i := range 5 {
		resp, err := cli.Put(ctx, fmt.Sprintf("/svc/%d", i), "v", clientv3.WithLease(g.ID))
		if err != nil {
			t.Fatal(err)
		}
		last = resp.Header.Revision
	}
	// From the revision after the puts: a watch registered after the
	// revocation was applied still gets its events.
	wc := cli.Watch(ctx, "/svc/", clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithRev(last+1))
	rv, err := cli.Revoke(ctx, g.ID)
	if err != nil {
		t.Fatal(err)
	}
	for wr := range wc {
		if err := wr.Err(); err != nil {
			t.Fatal(err)
		}
		if len(wr.Events) == 0 {
			continue
		}
		if len(wr.Events) != 5 {
			t.Fatalf("first watch response holds %d events, want all 5 deletes", len(wr.Events))
		}
		for _, ev := range wr.Events {
			if ev.Type != mvccpb.DELETE || ev.Kv.ModRevision != rv.Header.Revision {
				t.Fatalf("event %v, want a DELETE at %d", ev, rv.Header.Revision)
			}
		}
		return
	}
	t.Fatal("watch ended without the revocation's events")
}

// An election hands over when the leader resigns and when its session
// expires.
func TestElectionHandsOver(t *testing.T) {
	c := testConfig(t, "bolt", t.TempDir())
	startMember(t, c)
	cli := newClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var sessions []*concurrency.Session
	var elections []*concurrency.Election
	for range 3 {
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(2))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		sessions = append(sessions, s)
		elections = append(elections, concurrency.NewElection(s, "/election/"))
	}
	if err := elections[0].Campaign(ctx, "e0"); err != nil {
		t.Fatal(err)
	}
	obs := elections[2].Observe(ctx)
	won := make(chan string, 2)
	for i := 1; i < 3; i++ {
		go func() {
			if err := elections[i].Campaign(ctx, fmt.Sprintf("e%d", i)); err == nil {
				won <- fmt.Sprintf("e%d", i)
			}
		}()
	}
	waitLeader := func(want string) {
		t.Helper()
		for {
			select {
			case r := <-obs:
				if string(r.Kvs[0].Value) == want {
					return
				}
			case <-ctx.Done():
				t.Fatalf("leader %s never observed", want)
			}
		}
	}
	waitLeader("e0")
	if err := elections[0].Proclaim(ctx, "e0-proclaimed"); err != nil {
		t.Fatal(err)
	}
	waitLeader("e0-proclaimed")
	if err := elections[0].Resign(ctx); err != nil {
		t.Fatal(err)
	}
	winner := func() string {
		t.Helper()
		select {
		case w := <-won:
			return w
		case <-ctx.Done():
			t.Fatal("no candidate won the election")
			return ""
		}
	}
	first := winner()
	waitLeader(first)
	// The new leader's session expires: the last candidate takes over.
	var i int
	fmt.Sscanf(first, "e%d", &i)
	sessions[i].Orphan()
	second := winner()
	if second == first {
		t.Fatalf("%s won twice", first)
	}
	waitLeader(second)
}

// STM transactions that move units between accounts from concurrent
// goroutines conserve the total (each retries on conflict).
func TestSTMTransfers(t *testing.T) {
	c := testConfig(t, "bolt", t.TempDir())
	startMember(t, c)
	cli := newClient(t, c)
	ctx := context.Background()
	const accounts, workers, transfers = 5, 8, 10
	for i := range accounts {
		if _, err := cli.Put(ctx, fmt.Sprintf("acct/%d", i), "100"); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range transfers {
				from, to := fmt.Sprintf("acct/%d", (w+n)%accounts), fmt.Sprintf("acct/%d", (w+n+1)%accounts)
				_, err := concurrency.NewSTM(cli, func(s concurrency.STM) error {
					var a, b int
					fmt.Sscan(s.Get(from), &a)
					fmt.Sscan(s.Get(to), &b)
					s.Put(from, fmt.Sprint(a-1))
					s.Put(to, fmt.Sprint(b+1))
					return nil
				})
				if err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, "acct/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, kv := range resp.Kvs {
		var v int
		fmt.Sscan(string(kv.Value), &v)
		total += v
	}
	if total != 100*accounts {
		t.Fatalf("total after STM transfers %d, want %d", total, 100*accounts)
	}
}
