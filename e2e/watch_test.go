package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// TestWatchDifferential runs a seeded mix of writes, compactions and watch
// creations (keys, ranges, prefixes, from-key, past start revisions,
// prev_kv, filters) against kvd and etcd v3.7.3, and requires the same
// watch responses on both: created and canceled responses with their IDs,
// reasons and compact revisions, and per watcher the same events.
// Responses may group revisions differently, so events are compared as one
// sequence per watcher.
func TestWatchDifferential(t *testing.T) {
	t.Parallel()
	for _, engine := range harness.Engines() {
		for _, seed := range []uint64{1, 2} {
			t.Run(fmt.Sprintf("%s/seed=%d", engine, seed), func(t *testing.T) {
				ctx := testCtx(t)
				ref := newWatchSide(ctx, t, harness.StartEtcd(t, harness.Options{}))
				sut := newWatchSide(ctx, t, harness.StartKVD(t, harness.Options{Engine: engine}))
				sides := []*watchSide{ref, sut}
				rng := rand.New(rand.NewPCG(seed, seed*7919))
				keys := []string{"a", "b", "c", "p/0", "p/1", "p/2", "q"}
				key := func() string { return keys[rng.IntN(len(keys))] }
				rev, compacted := int64(1), int64(0)
				const streams = 3
				for i := range 300 {
					var op func(s *watchSide) (int64, error)
					switch n := rng.IntN(100); {
					case n < 45:
						k, v := key(), fmt.Sprint(i)
						op = func(s *watchSide) (int64, error) {
							r, err := s.cli.Put(ctx, k, v, clientv3.WithPrevKV())
							if err != nil {
								return 0, err
							}
							return r.Header.Revision, nil
						}
					case n < 55:
						k := key()
						prefix := rng.IntN(2) == 0
						op = func(s *watchSide) (int64, error) {
							var opts []clientv3.OpOption
							if prefix {
								opts = append(opts, clientv3.WithPrefix())
							}
							r, err := s.cli.Delete(ctx, k, opts...)
							if err != nil {
								return 0, err
							}
							return r.Header.Revision, nil
						}
					case n < 65:
						var ops []clientv3.Op
						used := map[string]bool{}
						for range 1 + rng.IntN(4) {
							k := key()
							if used[k] {
								continue
							}
							used[k] = true
							if rng.IntN(4) == 0 {
								ops = append(ops, clientv3.OpDelete(k))
							} else {
								ops = append(ops, clientv3.OpPut(k, fmt.Sprintf("t%d", i)))
							}
						}
						op = func(s *watchSide) (int64, error) {
							r, err := s.cli.Txn(ctx).Then(ops...).Commit()
							if err != nil {
								return 0, err
							}
							return r.Header.Revision, nil
						}
					case n < 68 && rev > compacted+1:
						at := compacted + 1 + rng.Int64N(rev-compacted)
						compacted = at
						// Watchers catching up when a compaction lands are
						// canceled or not depending on timing; settle first.
						for _, s := range sides {
							s.settle(t, rev)
						}
						op = func(s *watchSide) (int64, error) {
							_, err := s.cli.Compact(ctx, at)
							return rev, err
						}
					default:
						req := &pb.WatchCreateRequest{Key: []byte(key()), PrevKv: rng.IntN(2) == 0}
						switch rng.IntN(4) {
						case 1:
							req.Key = []byte("p/")
							req.RangeEnd = []byte("p0")
						case 2:
							req.RangeEnd = []byte{0}
						case 3:
							req.RangeEnd = []byte("p/1")
							req.Key = []byte("b")
						}
						if rng.IntN(2) == 0 {
							req.StartRevision = 1 + rng.Int64N(rev)
						}
						switch rng.IntN(10) {
						case 0: // client-chosen, maybe taken
							req.WatchId = 1 + rng.Int64N(40)
						case 1: // empty range: refused
							req.Key, req.RangeEnd = []byte("b"), []byte("a")
						}
						switch rng.IntN(5) {
						case 0:
							req.Filters = []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NOPUT}
						case 1:
							req.Filters = []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NODELETE}
						}
						st := rng.IntN(streams)
						for _, s := range sides {
							s.create(t, st, req)
						}
						continue
					}
					var revs []int64
					for _, s := range sides {
						r, err := op(s)
						if err != nil {
							t.Fatalf("op %d on %s: %v", i, s.p.Label(), err)
						}
						revs = append(revs, r)
					}
					if revs[0] != revs[1] {
						t.Fatalf("op %d: revision %d on etcd, %d on kvd", i, revs[0], revs[1])
					}
					rev = revs[0]
				}
				for _, s := range sides {
					s.settle(t, rev)
				}
				compareWatchSides(t, ref, sut)
			})
		}
	}
}

// watchSide is one server with its watch streams and everything they got.
type watchSide struct {
	ctx     context.Context
	p       *harness.Process
	cli     *clientv3.Client
	streams map[int]*watchStream
}

type watchStream struct {
	s  pb.Watch_WatchClient
	mu sync.Mutex
	// got holds every response, in order; more is signaled on each.
	got  []*pb.WatchResponse
	more chan struct{}
	err  error
	// canceled are the compaction cancels (by index in got) answered
	// with a cancel request.
	canceled map[int]bool
}

func newWatchSide(ctx context.Context, t *testing.T, p *harness.Process) *watchSide {
	return &watchSide{ctx: ctx, p: p, cli: p.Client(t), streams: map[int]*watchStream{}}
}

func (s *watchSide) stream(t *testing.T, i int) *watchStream {
	if ws := s.streams[i]; ws != nil {
		return ws
	}
	c, err := pb.NewWatchClient(s.cli.ActiveConnection()).Watch(s.ctx)
	if err != nil {
		t.Fatalf("%s: open watch stream: %v", s.p.Label(), err)
	}
	ws := &watchStream{s: c, more: make(chan struct{}, 1), canceled: map[int]bool{}}
	go func() {
		for {
			r, err := c.Recv()
			ws.mu.Lock()
			if err != nil {
				ws.err = err
			} else {
				ws.got = append(ws.got, r)
			}
			ws.mu.Unlock()
			select {
			case ws.more <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
		}
	}()
	s.streams[i] = ws
	return ws
}

// wait blocks until cond holds for the responses so far.
func (ws *watchStream) wait(t *testing.T, what string, cond func([]*pb.WatchResponse) bool, retry func()) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		ws.mu.Lock()
		ok, err := cond(ws.got), ws.err
		ws.mu.Unlock()
		if ok {
			return
		}
		if err != nil {
			t.Fatalf("%s: stream failed: %v", what, err)
		}
		select {
		case <-ws.more:
		case <-tick.C:
			if retry != nil {
				retry()
			}
		case <-deadline:
			ws.mu.Lock()
			for _, r := range ws.got[max(0, len(ws.got)-8):] {
				t.Logf("%s: got %v", what, r)
			}
			ws.mu.Unlock()
			t.Fatalf("%s: not within 20s", what)
		}
	}
}

// create sends req on stream i and waits for its created response, so that
// a watch from the current revision starts at the same point on both sides.
func (s *watchSide) create(t *testing.T, i int, req *pb.WatchCreateRequest) {
	t.Helper()
	ws := s.stream(t, i)
	ws.mu.Lock()
	n := created(ws.got)
	ws.mu.Unlock()
	if err := ws.s.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: req}}); err != nil {
		t.Fatalf("%s: send create: %v", s.p.Label(), err)
	}
	ws.wait(t, s.p.Label()+" created", func(got []*pb.WatchResponse) bool { return created(got) > n }, nil)
}

func created(got []*pb.WatchResponse) int {
	n := 0
	for _, r := range got {
		if r.Created {
			n++
		}
	}
	return n
}

// settle waits until every stream reported progress at rev or later (all
// events up to rev were sent) and every watcher canceled by a compaction was
// canceled by the client too. etcd keeps such a watcher on the stream, and
// answers no progress request, until the client cancels it; it also drops a
// progress request while a watcher catches up, so requests are repeated.
func (s *watchSide) settle(t *testing.T, rev int64) {
	t.Helper()
	for i, ws := range s.streams {
		poke := func() {
			ws.mu.Lock()
			var ids []int64
			for j, r := range ws.got {
				if r.Canceled && r.CompactRevision != 0 && !ws.canceled[j] {
					ids = append(ids, r.WatchId)
					ws.canceled[j] = true
				}
			}
			ws.mu.Unlock()
			for _, id := range ids {
				_ = ws.s.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{CancelRequest: &pb.WatchCancelRequest{WatchId: id}}})
			}
			_ = ws.s.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}})
		}
		poke()
		ws.wait(t, fmt.Sprintf("%s stream %d settled at %d", s.p.Label(), i, rev), func(got []*pb.WatchResponse) bool {
			acked := map[int64]bool{}
			progress := false
			for _, r := range got {
				switch {
				case r.Canceled && r.CompactRevision != 0:
					acked[r.WatchId] = false
				case r.Canceled && !r.Created:
					if _, ok := acked[r.WatchId]; ok {
						acked[r.WatchId] = true
					}
				case r.WatchId == -1 && !r.Created && len(r.Events) == 0 && r.Header.Revision >= rev:
					progress = true
				}
			}
			for _, ok := range acked {
				if !ok {
					return false
				}
			}
			// A stream whose watchers are all canceled gets no progress.
			return progress || len(got) > 0 && allCanceled(got)
		}, poke)
	}
}

func allCanceled(got []*pb.WatchResponse) bool {
	live := map[int64]bool{}
	for _, r := range got {
		switch {
		case r.Created && !r.Canceled:
			live[r.WatchId] = true
		case r.Canceled:
			delete(live, r.WatchId)
		}
	}
	return len(live) == 0
}

// summary is what must match: per watcher, its control responses and its
// events, in order; refused creates (watch ID -1) in order per stream.
func (s *watchSide) summary() map[string][]string {
	out := map[string][]string{}
	for i, ws := range s.streams {
		ws.mu.Lock()
		for _, r := range ws.got {
			if r.WatchId == -1 && !r.Created {
				continue // progress
			}
			k := fmt.Sprintf("stream %d watch %d", i, r.WatchId)
			// A compaction cancel comes when the watcher tries to catch
			// up: its place among other watchers' responses is timing.
			if r.Created || r.Canceled {
				c := k + " control"
				out[c] = append(out[c], fmt.Sprintf("created=%v canceled=%v compact=%d reason=%q", r.Created, r.Canceled, r.CompactRevision, r.CancelReason))
			}
			for _, e := range r.Events {
				out[k] = append(out[k], prototext.MarshalOptions{}.Format(e))
			}
		}
		ws.mu.Unlock()
	}
	return out
}

func compareWatchSides(t *testing.T, ref, sut *watchSide) {
	t.Helper()
	want, got := ref.summary(), sut.summary()
	n := 0
	for k, w := range want {
		if g := got[k]; strings.Join(g, "\n") != strings.Join(w, "\n") {
			t.Errorf("%s differs:\netcd:\n  %s\nkvd:\n  %s", k, strings.Join(w, "\n  "), strings.Join(g, "\n  "))
			if n++; n >= 3 {
				return
			}
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: kvd only", k)
		}
	}
	if t.Failed() {
		return
	}
	events := 0
	for _, v := range want {
		events += len(v)
	}
	t.Logf("%d watch keys, %d lines compared", len(want), events)
}

// TestWatchResumesAcrossRestart: a clientv3 watch whose server restarts
// resumes from its last revision + 1: every write seen once, in order.
func TestWatchResumesAcrossRestart(t *testing.T) {
	forEachEngine(t, func(t *testing.T, m *member) {
		ctx := testCtx(t)
		start, err := m.cli.Put(ctx, "r/0", "0")
		if err != nil {
			t.Fatal(err)
		}
		wch := m.cli.Watch(clientv3.WithRequireLeader(ctx), "r/", clientv3.WithPrefix(), clientv3.WithRev(start.Header.Revision))
		want := []int64{start.Header.Revision}
		put := func(i int) {
			// Retry while the member restarts.
			for {
				r, err := m.cli.Put(ctx, fmt.Sprintf("r/%d", i), fmt.Sprint(i))
				if err == nil {
					want = append(want, r.Header.Revision)
					return
				}
				if ctx.Err() != nil {
					t.Fatalf("put r/%d: %v", i, err)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		var got []int64
		read := func(n int) {
			for len(got) < n {
				select {
				case wr, ok := <-wch:
					if !ok {
						t.Fatalf("watch closed after %d events", len(got))
					}
					for _, e := range wr.Events {
						got = append(got, e.Kv.ModRevision)
					}
				case <-ctx.Done():
					t.Fatalf("%d of %d events before the deadline", len(got), n)
				}
			}
		}
		for i := 1; i < 20; i++ {
			put(i)
		}
		read(10) // some events read before the restart, some after
		m.proc.Restart()
		for i := 20; i < 40; i++ {
			put(i)
		}
		read(len(want))
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("revisions seen:\n%v\nwant\n%v", got, want)
		}
	})
}
