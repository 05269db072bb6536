package server

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/api"
	"github.com/kvd-dev/kvd/pkg/config"
	"github.com/kvd-dev/kvd/pkg/leasemgr"
)

// newClient returns a clientv3 client of c's member; the first call waits
// until the member leads and its lease manager is promoted (a TimeToLive
// waits for that).
func newClient(t testing.TB, c *config.Config) *clientv3.Client {
	t.Helper()
	u, _ := c.ClientURLs()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{u[0].Host}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		_, err := cli.TimeToLive(ctx, 1)
		if err == nil {
			return cli
		}
		if ctx.Err() != nil {
			t.Fatalf("member not serving leases: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func keysOf(resp *clientv3.LeaseTimeToLiveResponse) []string {
	var ks []string
	for _, k := range resp.Keys {
		ks = append(ks, string(k))
	}
	return ks
}

func TestLeaseAPI(t *testing.T) {
	c := testConfig(t, "bolt", t.TempDir())
	startMember(t, c)
	cli := newClient(t, c)
	ctx := context.Background()

	g, err := cli.Grant(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if g.ID <= 0 || g.TTL != 2 {
		t.Fatalf("grant: ID %d, TTL %d; want a positive ID and the minimum TTL 2 (1.5 election timeouts)", g.ID, g.TTL)
	}
	const id = clientv3.LeaseID(0x1234)
	if g, err := cli.Grant(ctx, 60); err != nil || g.TTL != 60 {
		t.Fatalf("grant 60: %v, %v", g, err)
	}
	lc := clientv3.RetryLeaseClient(cli)
	if resp, err := lc.LeaseGrant(ctx, grantReq(int64(id), 30)); err != nil || resp.ID != int64(id) || resp.TTL != 30 {
		t.Fatalf("grant with ID: %v, %v", resp, err)
	}
	for _, tc := range []struct {
		id, ttl int64
		want    error
	}{
		{int64(id), 30, rpctypes.ErrLeaseExist},
		{7, 9000000001, rpctypes.ErrLeaseTTLTooLarge},
	} {
		if _, err := lc.LeaseGrant(ctx, grantReq(tc.id, tc.ttl)); !errors.Is(rpctypes.Error(err), tc.want) {
			t.Errorf("grant %d TTL %d: %v, want %v", tc.id, tc.ttl, err, tc.want)
		}
	}

	for _, k := range []string{"b", "a"} {
		if _, err := cli.Put(ctx, k, "v", clientv3.WithLease(id)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cli.Put(ctx, "x", "v", clientv3.WithLease(99)); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Fatalf("put with a missing lease: %v", err)
	}
	ttl, err := cli.TimeToLive(ctx, id, clientv3.WithAttachedKeys())
	if err != nil {
		t.Fatal(err)
	}
	if ttl.GrantedTTL != 30 || ttl.TTL < 28 || ttl.TTL > 30 || !slices.Equal(keysOf(ttl), []string{"a", "b"}) {
		t.Fatalf("time to live: TTL %d of %d, keys %q", ttl.TTL, ttl.GrantedTTL, keysOf(ttl))
	}
	ka, err := cli.KeepAliveOnce(ctx, id)
	if err != nil || ka.TTL != 30 || ka.ID != id {
		t.Fatalf("keep-alive: %v, %v", ka, err)
	}
	ls, err := cli.Leases(ctx)
	if err != nil || len(ls.Leases) != 3 {
		t.Fatalf("leases: %v, %v", ls, err)
	}

	rev, err := cli.Revoke(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	get, err := cli.Get(ctx, "", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(get.Kvs) != 0 || get.Header.Revision != rev.Header.Revision {
		t.Fatalf("after revoke at %d: %d keys at revision %d", rev.Header.Revision, len(get.Kvs), get.Header.Revision)
	}
	if prev, err := cli.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithRev(rev.Header.Revision-1)); err != nil || len(prev.Kvs) != 2 {
		t.Fatalf("both keys deleted in one revision: before it %v, %v", prev, err)
	}
	if _, err := cli.Revoke(ctx, id); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Fatalf("second revoke: %v", err)
	}
	if ttl, err := cli.TimeToLive(ctx, id); err != nil || ttl.TTL != -1 {
		t.Fatalf("time to live of a revoked lease: %v, %v; want TTL -1", ttl, err)
	}
	if _, err := cli.KeepAliveOnce(ctx, id); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Fatalf("keep-alive of a revoked lease: %v", err)
	}
}

// An expired lease's keys are deleted, together, within its TTL plus a
// second; a kept-alive lease is not.
func TestLeaseExpiry(t *testing.T) {
	c := testConfig(t, "bolt", t.TempDir())
	startMember(t, c)
	cli := newClient(t, c)
	ctx := context.Background()
	kept, err := cli.Grant(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	kac, err := cli.KeepAlive(ctx, kept.ID)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for range kac {
		}
	}()
	start := time.Now()
	g, err := cli.Grant(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"e1", "e2"} {
		if _, err := cli.Put(ctx, k, "v", clientv3.WithLease(g.ID)); err != nil {
			t.Fatal(err)
		}
	}
	put, err := cli.Put(ctx, "kept", "v", clientv3.WithLease(kept.ID))
	if err != nil {
		t.Fatal(err)
	}
	deadline := start.Add(time.Duration(g.TTL+1) * time.Second)
	for {
		resp, err := cli.Get(ctx, "e", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("keys deleted %v after the grant, want within %ds", time.Since(start), g.TTL+1)
			}
			if resp.Header.Revision != put.Header.Revision+1 {
				t.Fatalf("expiry at revision %d, want one revision after %d", resp.Header.Revision, put.Header.Revision)
			}
			break
		}
		if time.Now().After(deadline.Add(5 * time.Second)) {
			t.Fatalf("keys of an expired lease still there %v after the grant", time.Since(start))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if resp, err := cli.Get(ctx, "kept"); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("key of a kept-alive lease: %v, %v", resp, err)
	}
}

// Leases and their keys survive a restart; their TTLs start again (plus
// the election timeout) when the restarted member leads.
func TestLeasesSurviveMemberRestart(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			c := testConfig(t, engine, t.TempDir())
			m := startMember(t, c)
			cli := newClient(t, c)
			ctx := context.Background()
			long, err := cli.Grant(ctx, 60)
			if err != nil {
				t.Fatal(err)
			}
			short, err := cli.Grant(ctx, 2)
			if err != nil {
				t.Fatal(err)
			}
			for k, id := range map[string]clientv3.LeaseID{"l1": long.ID, "l2": long.ID, "s": short.ID} {
				if _, err := cli.Put(ctx, k, "v", clientv3.WithLease(id)); err != nil {
					t.Fatal(err)
				}
			}
			cli.Close()
			m.stop()

			startMember(t, c)
			cli = newClient(t, c)
			ttl, err := cli.TimeToLive(ctx, long.ID, clientv3.WithAttachedKeys())
			if err != nil {
				t.Fatal(err)
			}
			if ttl.GrantedTTL != 60 || ttl.TTL < 55 || ttl.TTL > 61 || !slices.Equal(keysOf(ttl), []string{"l1", "l2"}) {
				t.Fatalf("long lease after restart: TTL %d of %d, keys %q", ttl.TTL, ttl.GrantedTTL, keysOf(ttl))
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				resp, err := cli.Get(ctx, "s")
				if err != nil {
					t.Fatal(err)
				}
				if len(resp.Kvs) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("short lease's key not deleted after restart")
				}
				time.Sleep(50 * time.Millisecond)
			}
			if resp, err := cli.Get(ctx, "l", clientv3.WithPrefix()); err != nil || len(resp.Kvs) != 2 {
				t.Fatalf("long lease's keys after restart: %v, %v", resp, err)
			}
		})
	}
}

func grantReq(id, ttl int64) *pb.LeaseGrantRequest { return &pb.LeaseGrantRequest{ID: id, TTL: ttl} }

// A keep-alive clears a lease's checkpoint through raft: after a restart
// the lease starts from its full TTL, not from the old checkpoint.
func TestKeepAliveClearsCheckpoint(t *testing.T) {
	c := testConfig(t, "bolt", t.TempDir())
	var s *api.Server
	m := startMember(t, c, fx.Populate(&s))
	cli := newClient(t, c)
	ctx := context.Background()
	long, err := cli.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	other, err := cli.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ProposeLeaseCheckpoints(ctx, []leasemgr.Checkpoint{{ID: int64(long.ID), RemainingTTL: 100}, {ID: int64(other.ID), RemainingTTL: 100}}); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.KeepAliveOnce(ctx, long.ID); err != nil {
		t.Fatal(err)
	}
	cli.Close()
	m.stop()

	startMember(t, c)
	cli = newClient(t, c)
	for _, tc := range []struct {
		id       clientv3.LeaseID
		min, max int64
	}{{long.ID, 590, 601}, {other.ID, 90, 101}} {
		ttl, err := cli.TimeToLive(ctx, tc.id)
		if err != nil {
			t.Fatal(err)
		}
		if ttl.TTL < tc.min || ttl.TTL > tc.max {
			t.Errorf("lease %x after restart: TTL %d, want %d..%d", tc.id, ttl.TTL, tc.min, tc.max)
		}
	}
}
