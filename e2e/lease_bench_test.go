package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// Lease benchmarks, kvd (both engines) and etcd v3.7.3 side by side in one
// run, over raw gRPC stubs on loopback:
//
//	cd e2e && go test -run '^$' -bench BenchmarkLease -benchtime 5s .
//
// BenchmarkLeaseExpiry measures puts while many leases expire at once; its
// lease count is KVD_E2E_BENCH_LEASES (default 10000; the figure is
// 100000, which takes minutes to grant on a small machine).

const benchLeasesEnv = "KVD_E2E_BENCH_LEASES"

// benchServers runs fn against a fresh kvd-bolt, kvd-badger and etcd.
func benchServers(b *testing.B, fn func(b *testing.B, conns []*grpc.ClientConn)) {
	for _, server := range []string{"kvd-bolt", "kvd-badger", "etcd"} {
		b.Run(server, func(b *testing.B) {
			var p *harness.Process
			if server == "etcd" {
				p = harness.StartEtcd(b, harness.Options{})
			} else {
				p = harness.StartKVD(b, harness.Options{Engine: server[len("kvd-"):]})
			}
			host := p.Endpoint()[len("http://"):]
			conns := make([]*grpc.ClientConn, 8)
			for i := range conns {
				c, err := grpc.NewClient(host, grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { c.Close() })
				conns[i] = c
			}
			fn(b, conns)
		})
	}
}

// BenchmarkLeaseKeepAlive: 64 keep-alive streams, one lease each, one
// request in flight per stream.
func BenchmarkLeaseKeepAlive(b *testing.B) {
	benchServers(b, func(b *testing.B, conns []*grpc.ClientConn) {
		const streams = 64
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		type stream struct {
			s  pb.Lease_LeaseKeepAliveClient
			id int64
		}
		ss := make([]stream, streams)
		for i := range ss {
			lc := pb.NewLeaseClient(conns[i%len(conns)])
			g, err := lc.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 60})
			if err != nil {
				b.Fatal(err)
			}
			s, err := lc.LeaseKeepAlive(ctx)
			if err != nil {
				b.Fatal(err)
			}
			ss[i] = stream{s, g.ID}
		}
		var next atomic.Int64
		var wg sync.WaitGroup
		b.ResetTimer()
		for i := range ss {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= int64(b.N) {
					if err := ss[i].s.Send(&pb.LeaseKeepAliveRequest{ID: ss[i].id}); err != nil {
						b.Error(err)
						return
					}
					if r, err := ss[i].s.Recv(); err != nil || r.TTL != 60 {
						b.Errorf("keep-alive: %v, %v", r, err)
						return
					}
				}
			}()
		}
		wg.Wait()
	})
}

// BenchmarkLeaseGrantPutRevoke: 64 clients each grant a lease, put a key on
// it and revoke it; one op is the three requests.
func BenchmarkLeaseGrantPutRevoke(b *testing.B) {
	benchServers(b, func(b *testing.B, conns []*grpc.ClientConn) {
		ctx := context.Background()
		var next atomic.Int64
		var wg sync.WaitGroup
		val := make([]byte, 256)
		b.ResetTimer()
		for c := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				lc := pb.NewLeaseClient(conns[c%len(conns)])
				kv := pb.NewKVClient(conns[c%len(conns)])
				for {
					n := next.Add(1)
					if n > int64(b.N) {
						return
					}
					g, err := lc.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 60})
					if err == nil {
						_, err = kv.Put(ctx, &pb.PutRequest{Key: []byte(fmt.Sprintf("gpr/%d", n)), Value: val, Lease: g.ID})
					}
					if err == nil {
						_, err = lc.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: g.ID})
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
	})
}

// BenchmarkLeaseExpiry grants many leases with a key each and the minimum
// TTL, then measures puts from 64 clients (b.N puts) once the leases start
// to expire; it reports the put latency p99 and how many leases were still
// there at the end (the rest expired during the measurement).
func BenchmarkLeaseExpiry(b *testing.B) {
	n := 10000
	if s := os.Getenv(benchLeasesEnv); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil {
			b.Fatalf("%s=%q: %v", benchLeasesEnv, s, err)
		}
		n = v
	}
	benchServers(b, func(b *testing.B, conns []*grpc.ClientConn) {
		ctx := context.Background()
		// TTL long enough to grant and attach every lease before the first
		// expires (about 4000 writes/s here), short enough to expire soon.
		ttl := int64(5 + 2*n/4000)
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for c := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				lc := pb.NewLeaseClient(conns[c%len(conns)])
				kv := pb.NewKVClient(conns[c%len(conns)])
				for {
					i := next.Add(1)
					if i > int64(n) {
						return
					}
					g, err := lc.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: ttl})
					if err == nil {
						_, err = kv.Put(ctx, &pb.PutRequest{Key: []byte(fmt.Sprintf("exp/%d", i)), Value: []byte("v"), Lease: g.ID})
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if b.Failed() {
			return
		}
		if wait := time.Until(start.Add(time.Duration(ttl) * time.Second)); wait > 0 {
			time.Sleep(wait)
		}
		var mu sync.Mutex
		var lats []time.Duration
		next.Store(0)
		val := make([]byte, 256)
		b.ResetTimer()
		for c := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				kv := pb.NewKVClient(conns[c%len(conns)])
				var mine []time.Duration
				for {
					i := next.Add(1)
					if i > int64(b.N) {
						break
					}
					t0 := time.Now()
					if _, err := kv.Put(ctx, &pb.PutRequest{Key: []byte(fmt.Sprintf("load/%d", i%10000)), Value: val}); err != nil {
						b.Error(err)
						break
					}
					mine = append(mine, time.Since(t0))
				}
				mu.Lock()
				lats = append(lats, mine...)
				mu.Unlock()
			}()
		}
		wg.Wait()
		b.StopTimer()
		if len(lats) > 0 {
			slices.Sort(lats)
			b.ReportMetric(float64(lats[len(lats)*99/100].Microseconds())/1000, "p99-ms")
		}
		ls, err := pb.NewLeaseClient(conns[0]).LeaseLeases(ctx, &pb.LeaseLeasesRequest{})
		if err == nil {
			b.ReportMetric(float64(len(ls.Leases)), "leases-left")
		}
	})
}
