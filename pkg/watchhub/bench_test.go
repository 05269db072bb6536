package watchhub

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/backend/bolt"
	"github.com/kvd-dev/kvd/pkg/mvcc"
)

func benchHub(b *testing.B, cfg Config) (*Hub, *mvcc.Store) {
	be, err := bolt.Open(backend.Options{Dir: b.TempDir()}, bolt.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Close() })
	st, err := mvcc.Open(be, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	cfg.Store = st
	h := New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.Run(ctx); close(done) }()
	b.Cleanup(func() { cancel(); <-done })
	return h, st
}

func benchPut(b *testing.B, h *Hub, st *mvcc.Store, key []byte) int64 {
	var evs []*mvccpb.Event
	var rev int64
	if err := st.Apply(func(bt *mvcc.Batch) error {
		tw := bt.Write()
		rev = tw.Put(key, []byte("v"), 0)
		evs = tw.Events()
		tw.End()
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	h.Notify(evs)
	return rev
}

// watchersOn creates n watchers on one stream per 1000, keys from key(i),
// drains the created responses and returns the streams.
func watchersOn(b *testing.B, h *Hub, n int, req func(i int) WatchRequest) []*Stream {
	var streams []*Stream
	for i := 0; i < n; i++ {
		if i%1000 == 0 {
			streams = append(streams, h.NewStream())
		}
		s := streams[len(streams)-1]
		s.Watch(req(i))
		if r := <-s.C(); !r.Created || r.Canceled {
			b.Fatalf("create: %+v", r)
		}
	}
	return streams
}

// BenchmarkEventLatency: one put, one matching watcher among n on distinct
// keys (or n on one shared prefix, all matching); time from the put's
// Notify to the last response received.
func BenchmarkEventLatency(b *testing.B) {
	for _, n := range []int{1, 1000, 100000} {
		for _, shape := range []string{"keys", "prefix"} {
			if shape == "prefix" && n > 1000 && testing.Short() {
				continue
			}
			b.Run(fmt.Sprintf("watchers=%d/%s", n, shape), func(b *testing.B) {
				h, st := benchHub(b, Config{StreamBuffer: 1024})
				streams := watchersOn(b, h, n, func(i int) WatchRequest {
					if shape == "prefix" {
						return WatchRequest{Key: []byte("p/"), End: []byte("p0")}
					}
					return WatchRequest{Key: fmt.Appendf(nil, "p/%d", i)}
				})
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					k := i % n
					benchPut(b, h, st, fmt.Appendf(nil, "p/%d", k))
					if shape == "keys" {
						<-streams[k/1000].C()
						continue
					}
					for _, s := range streams {
						for range min(1000, n) {
							<-s.C()
						}
					}
				}
			})
		}
	}
}

// BenchmarkPutWithIdleWatchers: the write path (apply + notify) with n
// watchers on keys that are never written.
func BenchmarkPutWithIdleWatchers(b *testing.B) {
	for _, n := range []int{0, 10000} {
		b.Run(fmt.Sprintf("watchers=%d", n), func(b *testing.B) {
			h, st := benchHub(b, Config{})
			watchersOn(b, h, n, func(i int) WatchRequest {
				if i%2 == 0 {
					return WatchRequest{Key: fmt.Appendf(nil, "idle/%d", i)}
				}
				return WatchRequest{Key: fmt.Appendf(nil, "idle/%d/", i), End: fmt.Appendf(nil, "idle/%d0", i)}
			})
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				benchPut(b, h, st, fmt.Appendf(nil, "k/%d", i%1000))
			}
		})
	}
}

// BenchmarkIdleWatcherMemory reports the heap each idle watcher takes.
func BenchmarkIdleWatcherMemory(b *testing.B) {
	const n = 20000
	for i := 0; i < b.N; i++ {
		h, _ := benchHub(b, Config{})
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		streams := watchersOn(b, h, n, func(i int) WatchRequest {
			return WatchRequest{Key: fmt.Appendf(nil, "/registry/pods/ns/%d", i)}
		})
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/watcher")
		runtime.KeepAlive(streams)
	}
}

// BenchmarkFanoutOneStream: 1000 watchers of one prefix on one stream with
// the default buffer, so most responses wait as victims for room; the
// reader acknowledges what it takes, as the API does.
func BenchmarkFanoutOneStream(b *testing.B) {
	h, st := benchHub(b, Config{})
	streams := watchersOn(b, h, 1000, func(int) WatchRequest { return WatchRequest{Key: []byte("p/"), End: []byte("p0")} })
	s := streams[0]
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		benchPut(b, h, st, []byte("p/x"))
		for range 1000 {
			<-s.C()
			s.Ack()
		}
	}
}
