package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/fx"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-dev/kvd/pkg/watchhub"
)

// watchMember starts a member with fast progress notifications and a
// clientv3 client on it.
func watchMember(t *testing.T, engine string) (*member, *clientv3.Client) {
	t.Helper()
	c := testConfig(t, engine, t.TempDir())
	m := startMember(t, c, fx.Decorate(func(wc watchhub.Config) watchhub.Config {
		wc.ProgressInterval = 100 * time.Millisecond
		return wc
	}))
	put(t, m, "init", "x") // waits for the election
	u, _ := c.ClientURLs()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{u[0].Host}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return m, cli
}

func evString(e *clientv3.Event) string {
	s := fmt.Sprintf("%s %s@%d", e.Type, e.Kv.Key, e.Kv.ModRevision)
	if e.Type == mvccpb.PUT {
		s += "=" + string(e.Kv.Value)
	}
	if e.PrevKv != nil {
		s += " prev=" + string(e.PrevKv.Value)
	}
	return s
}

// collect reads wch until it holds n events, checking that each response
// holds whole revisions in order.
func collect(t *testing.T, wch clientv3.WatchChan, n int, perRev int) []*clientv3.Event {
	t.Helper()
	var out []*clientv3.Event
	timeout := time.After(20 * time.Second)
	for len(out) < n {
		select {
		case wr, ok := <-wch:
			if !ok {
				t.Fatalf("watch closed after %d events", len(out))
			}
			if err := wr.Err(); err != nil {
				t.Fatalf("watch failed after %d events: %v", len(out), err)
			}
			count := map[int64]int{}
			for _, e := range wr.Events {
				if len(out) > 0 && e.Kv.ModRevision <= out[len(out)-1].Kv.ModRevision && count[e.Kv.ModRevision] == 0 {
					t.Fatalf("event %s not after %s", evString(e), evString(out[len(out)-1]))
				}
				count[e.Kv.ModRevision]++
				out = append(out, e)
			}
			for rev, c := range count {
				if perRev > 0 && c != perRev {
					t.Fatalf("revision %d: %d events in the response, want %d (a txn split?)", rev, c, perRev)
				}
			}
		case <-timeout:
			t.Fatalf("only %d of %d events within 20s", len(out), n)
		}
	}
	return out
}

func TestWatch(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			m, cli := watchMember(t, engine)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()

			start, err := cli.Get(ctx, "init")
			if err != nil {
				t.Fatal(err)
			}
			from := start.Header.Revision + 1
			wch := cli.Watch(ctx, "w/", clientv3.WithPrefix(), clientv3.WithRev(from))

			// Concurrent writers, each txn three keys in one revision.
			const writers, txns = 4, 30
			var wg sync.WaitGroup
			for g := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range txns {
						var ops []clientv3.Op
						for _, k := range []string{"a", "b", "c"} {
							ops = append(ops, clientv3.OpPut(fmt.Sprintf("w/%d/%s", g, k), fmt.Sprint(i)))
						}
						if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
							t.Errorf("txn: %v", err)
							return
						}
					}
				}()
			}
			evs := collect(t, wch, writers*txns*3, 3)
			wg.Wait()
			seen := map[string]bool{}
			for _, e := range evs {
				k := evString(e)
				if seen[k] {
					t.Fatalf("duplicate event %s", k)
				}
				seen[k] = true
			}

			t.Run("resume", func(t *testing.T) {
				mid := evs[len(evs)/2].Kv.ModRevision
				var want []string
				for _, e := range evs {
					if e.Kv.ModRevision >= mid {
						want = append(want, evString(e))
					}
				}
				rctx, rcancel := context.WithCancel(ctx)
				defer rcancel()
				got := collect(t, cli.Watch(rctx, "w/", clientv3.WithPrefix(), clientv3.WithRev(mid)), len(want), 3)
				var gs []string
				for _, e := range got {
					gs = append(gs, evString(e))
				}
				if !slices.Equal(gs, want) {
					t.Fatalf("resumed watch:\ngot  %v\nwant %v", gs, want)
				}
			})

			t.Run("prev-kv-and-filters", func(t *testing.T) {
				rctx, rcancel := context.WithCancel(ctx)
				defer rcancel()
				cur, err := cli.Get(ctx, "init")
				if err != nil {
					t.Fatal(err)
				}
				next := clientv3.WithRev(cur.Header.Revision + 1)
				nodel := cli.Watch(rctx, "p", clientv3.WithPrevKV(), clientv3.WithFilterDelete(), next)
				noput := cli.Watch(rctx, "p", clientv3.WithPrevKV(), clientv3.WithFilterPut(), next)
				r1, _ := cli.Put(ctx, "p", "1")
				r2, _ := cli.Put(ctx, "p", "2")
				r3, _ := cli.Delete(ctx, "p")
				puts := collect(t, nodel, 2, 0)
				dels := collect(t, noput, 1, 0)
				want := []string{fmt.Sprintf("PUT p@%d=1", r1.Header.Revision), fmt.Sprintf("PUT p@%d=2 prev=1", r2.Header.Revision)}
				if got := []string{evString(puts[0]), evString(puts[1])}; !slices.Equal(got, want) {
					t.Fatalf("NODELETE watch: %v, want %v", got, want)
				}
				if got, want := evString(dels[0]), fmt.Sprintf("DELETE p@%d prev=2", r3.Header.Revision); got != want {
					t.Fatalf("NOPUT watch: %s, want %s", got, want)
				}
			})

			t.Run("progress", func(t *testing.T) {
				rctx, rcancel := context.WithCancel(ctx)
				defer rcancel()
				wch := cli.Watch(rctx, "nothing", clientv3.WithProgressNotify())
				cur, err := cli.Get(ctx, "init")
				if err != nil {
					t.Fatal(err)
				}
				// Periodic notifications for a quiet watcher.
				wr := <-wch
				if !wr.IsProgressNotify() || wr.Header.Revision < cur.Header.Revision {
					t.Fatalf("periodic progress: %+v at %d, want a notification at >= %d", wr, wr.Header.Revision, cur.Header.Revision)
				}
				// Requested progress covers the revision current at the request.
				if err := cli.RequestProgress(rctx); err != nil {
					t.Fatal(err)
				}
				for {
					wr := <-wch
					if !wr.IsProgressNotify() {
						t.Fatalf("want progress notifications only, got %+v", wr)
					}
					if wr.Header.Revision >= cur.Header.Revision {
						break
					}
				}
			})

			t.Run("fragment", func(t *testing.T) {
				rctx, rcancel := context.WithCancel(ctx)
				defer rcancel()
				big := strings.Repeat("v", 100<<10)
				var first int64
				for i := range 20 {
					r, err := cli.Put(ctx, fmt.Sprintf("f/%02d", i), big)
					if err != nil {
						t.Fatal(err)
					}
					if i == 0 {
						first = r.Header.Revision
					}
				}
				// 2 MB of history replayed in one response, over 1.5 MB: fragmented.
				evs := collect(t, cli.Watch(rctx, "f/", clientv3.WithPrefix(), clientv3.WithRev(first), clientv3.WithFragment()), 20, 0)
				for i, e := range evs {
					if string(e.Kv.Key) != fmt.Sprintf("f/%02d", i) || len(e.Kv.Value) != len(big) {
						t.Fatalf("event %d: %s (%d bytes)", i, e.Kv.Key, len(e.Kv.Value))
					}
				}
				// On the wire: fragments under the request size limit.
				ws, err := pb.NewWatchClient(m.conn).Watch(rctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := ws.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
					Key: []byte("f/"), RangeEnd: []byte("f0"), StartRevision: first, Fragment: true}}}); err != nil {
					t.Fatal(err)
				}
				frags, n := 0, 0
				for n < 20 {
					r, err := ws.Recv()
					if err != nil {
						t.Fatal(err)
					}
					if r.Fragment {
						frags++
					}
					if proto.Size(r) > 3<<19 {
						t.Fatalf("a response of %d bytes", proto.Size(r))
					}
					n += len(r.Events)
				}
				if frags == 0 {
					t.Fatal("2 MB of events came unfragmented")
				}
			})

			t.Run("lease-revoke", func(t *testing.T) {
				rctx, rcancel := context.WithCancel(ctx)
				defer rcancel()
				l, err := cli.Grant(ctx, 60)
				if err != nil {
					t.Fatal(err)
				}
				var first int64
				for _, k := range []string{"l/a", "l/b"} {
					r, err := cli.Put(ctx, k, "x", clientv3.WithLease(l.ID))
					if err != nil {
						t.Fatal(err)
					}
					if first == 0 {
						first = r.Header.Revision
					}
				}
				rv, err := cli.Revoke(ctx, l.ID)
				if err != nil {
					t.Fatal(err)
				}
				evs := collect(t, cli.Watch(rctx, "l/", clientv3.WithPrefix(), clientv3.WithRev(first)), 4, 0)
				var got []string
				for _, e := range evs {
					got = append(got, fmt.Sprintf("%s %s@%d", e.Type, e.Kv.Key, e.Kv.ModRevision))
				}
				want := []string{fmt.Sprintf("PUT l/a@%d", first), fmt.Sprintf("PUT l/b@%d", first+1),
					fmt.Sprintf("DELETE l/a@%d", rv.Header.Revision), fmt.Sprintf("DELETE l/b@%d", rv.Header.Revision)}
				if !slices.Equal(got, want) {
					t.Fatalf("lease revoke: %v, want %v", got, want)
				}
			})

			t.Run("compaction-and-cancel", func(t *testing.T) {
				cur, err := cli.Put(ctx, "c", "x")
				if err != nil {
					t.Fatal(err)
				}
				if _, err := cli.Compact(ctx, cur.Header.Revision); err != nil {
					t.Fatal(err)
				}
				rctx, rcancel := context.WithCancel(ctx)
				wch := cli.Watch(rctx, "c", clientv3.WithRev(from))
				wr := <-wch
				if !errors.Is(wr.Err(), rpctypes.ErrCompacted) || wr.CompactRevision != cur.Header.Revision {
					t.Fatalf("watch below the compaction: err %v compact %d, want ErrCompacted at %d", wr.Err(), wr.CompactRevision, cur.Header.Revision)
				}
				// Canceling the context closes the channel.
				wch = cli.Watch(rctx, "c")
				rcancel()
				for range wch {
				}
			})
		})
	}
}

// TestWatchSlowReader: a stream whose client reads nothing while writers
// go on does not hold the writers up, and later gets every event in order.
func TestWatchSlowReader(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			m, cli := watchMember(t, engine)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cur, err := cli.Get(ctx, "init")
			if err != nil {
				t.Fatal(err)
			}
			ws, err := pb.NewWatchClient(m.conn).Watch(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := ws.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
				Key: []byte("s/"), RangeEnd: []byte("s0"), StartRevision: cur.Header.Revision + 1}}}); err != nil {
				t.Fatal(err)
			}
			// Nobody reads ws while 1.6 MB of events are written.
			const writers, puts = 4, 100
			val := strings.Repeat("v", 4<<10)
			var wg sync.WaitGroup
			for g := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range puts {
						if _, err := cli.Put(ctx, fmt.Sprintf("s/%d/%d", g, i), val); err != nil {
							t.Errorf("put: %v", err)
							return
						}
					}
				}()
			}
			wg.Wait()
			var last int64
			n := 0
			for n < writers*puts {
				r, err := ws.Recv()
				if err != nil {
					t.Fatalf("recv after %d events: %v", n, err)
				}
				if r.Canceled {
					t.Fatalf("canceled after %d events: %+v", n, r)
				}
				for _, e := range r.Events {
					if e.Kv.ModRevision <= last {
						t.Fatalf("event at %d after %d", e.Kv.ModRevision, last)
					}
					last = e.Kv.ModRevision
					n++
				}
			}
		})
	}
}
