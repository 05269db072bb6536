package watchhub

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/backend/enginetest"

	"github.com/kvd-dev/kvd/pkg/mvcc"
)

func TestKeyRangePrefixFromKey(t *testing.T) {
	eachEngine(t, Config{}, func(t *testing.T, e *env) {
		s := e.h.NewStream()
		reqs := map[string]WatchRequest{
			"key":     {Key: []byte("b")},
			"range":   {Key: []byte("b"), End: []byte("c")},
			"fromkey": {Key: []byte("b"), End: []byte{}},
			"all":     {Key: []byte{0}, End: []byte{}},
		}
		ids := map[string]int64{}
		for _, name := range []string{"key", "range", "fromkey", "all"} {
			s.Watch(reqs[name])
			ids[name] = created(t, s)
		}
		e.put("a", "1")
		e.put("b", "2")
		e.put("ba", "3")
		e.put("c", "4")
		last := e.del("b")
		want := map[string][]string{
			"key":     {"PUT b=2@3", "DELETE b@6"},
			"range":   {"PUT b=2@3", "PUT ba=3@4", "DELETE b@6"},
			"fromkey": {"PUT b=2@3", "PUT ba=3@4", "PUT c=4@5", "DELETE b@6"},
			"all":     {"PUT a=1@2", "PUT b=2@3", "PUT ba=3@4", "PUT c=4@5", "DELETE b@6"},
		}
		got := map[string][]string{}
		byID := map[int64]string{}
		for n, id := range ids {
			byID[id] = n
		}
		// Responses of different watchers interleave; collect per watcher.
		for done := 0; done < len(ids); {
			r := recv(t, s)
			n := byID[r.WatchID]
			for _, x := range r.Events {
				got[n] = append(got[n], ev(x))
				if x.Kv.ModRevision == last {
					done++
				}
			}
			// Every watcher sees the last delete, but "key", "range" and
			// "fromkey" each count once.
		}
		for n := range want {
			if !slices.Equal(got[n], want[n]) {
				t.Errorf("%s: got %v, want %v", n, got[n], want[n])
			}
		}
	})
}

func TestFiltersAndPrevKV(t *testing.T) {
	eachEngine(t, Config{}, func(t *testing.T, e *env) {
		s := e.h.NewStream()
		s.Watch(WatchRequest{ID: 1, Key: []byte("k"), NoPut: true, PrevKV: true})
		created(t, s)
		s.Watch(WatchRequest{ID: 2, Key: []byte("k"), NoDelete: true, PrevKV: true})
		created(t, s)
		e.put("k", "a")
		e.put("k", "b")
		last := e.del("k")
		var puts, dels []string
		for len(dels) == 0 || len(puts) < 2 {
			r := recv(t, s)
			for _, x := range r.Events {
				if r.WatchID == 1 {
					dels = append(dels, ev(x))
				} else {
					puts = append(puts, ev(x))
				}
			}
		}
		if want := []string{fmt.Sprintf("DELETE k@%d prev=b", last)}; !slices.Equal(dels, want) {
			t.Errorf("NOPUT watcher got %v, want %v", dels, want)
		}
		if want := []string{"PUT k=a@2", "PUT k=b@3 prev=a"}; !slices.Equal(puts, want) {
			t.Errorf("NODELETE watcher got %v, want %v", puts, want)
		}
	})
}

// TestReplayInBatchesUnderWrites replays history in small batches while
// writers go on: every event once, in order, a txn's events together.
func TestReplayInBatchesUnderWrites(t *testing.T) {
	eachEngine(t, Config{SyncBatch: 3}, func(t *testing.T, e *env) {
		var want []string
		txn := func(i int) {
			rev := e.txn(func(tw *mvcc.TxnWrite) {
				for j := range 1 + i%5 {
					tw.Put(fmt.Appendf(nil, "p/%d", j), fmt.Appendf(nil, "%d", i), 0)
				}
			})
			for j := range 1 + i%5 {
				want = append(want, fmt.Sprintf("PUT p/%d=%d@%d", j, i, rev))
			}
		}
		for i := range 40 {
			txn(i)
			e.put("other", "x")
		}
		s := e.h.NewStream()
		s.Watch(WatchRequest{Key: []byte("p/"), End: []byte("p0"), StartRev: 2})
		id := created(t, s)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 40; i < 80; i++ {
				txn(i)
			}
			e.put("p/end", "x")
		}()
		// 1 + 80 + 40 + 1 revisions.
		const final = 122
		got := events(t, s, id, final)
		wg.Wait()
		want = append(want, fmt.Sprintf("PUT p/end=x@%d", final))
		if !slices.Equal(got, want) {
			t.Fatalf("replayed events differ:\ngot  %v\nwant %v", got, want)
		}
	})
}

// The events waiting for the hub are bounded: past MaxBacklog, Notify waits
// until the hub takes them, then every event is still delivered in order;
// a stopped hub never holds Notify.
func TestNotifyBacklogIsBounded(t *testing.T) {
	st, err := mvcc.Open(enginetest.OpenT(t, "bolt"), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	h := New(Config{Store: st, MaxBacklog: 3})
	e := &env{t: t, st: st, h: h}
	s := h.NewStream()
	s.Watch(WatchRequest{Key: []byte("k"), StartRev: 1})
	for i := 0; i < 3; i++ {
		e.put("k", fmt.Sprint(i))
	}
	fourth := make(chan int64, 1)
	go func() { fourth <- e.put("k", "3") }()
	// The fourth Notify is parked in its wait for the hub: no sleep needed
	// to give it the chance to return.
	waitParked(t, "watchhub.(*Hub).Notify(")
	select {
	case <-fourth:
		t.Fatal("Notify did not wait with a full backlog")
	default:
	}
	if n := h.backlog.Load(); n != 3 {
		t.Fatalf("backlog %d while Notify waits, want 3", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	var last int64
	select {
	case last = <-fourth:
	case <-time.After(10 * time.Second):
		t.Fatal("Notify still blocked after the hub ran")
	}
	created(t, s)
	var got []string
	for len(got) == 0 || !strings.HasSuffix(got[len(got)-1], fmt.Sprintf("@%d", last)) {
		for _, x := range recv(t, s).Events {
			got = append(got, ev(x))
		}
	}
	if want := []string{"PUT k=0@2", "PUT k=1@3", "PUT k=2@4", "PUT k=3@5"}; !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	h.backlog.Store(100)
	e.put("k", "after stop") // returns: the hub is gone
}

// After the store is replaced under the hub (a raft snapshot installed), the
// events between what the hub saw and the new store's revision never came
// through Notify: Resync makes synced watchers catch up from the store.
func TestResyncAfterStoreReset(t *testing.T) {
	open := func(dir string) *mvcc.Store {
		be, err := enginetest.Open("bolt", dir)
		if err != nil {
			t.Fatal(err)
		}
		st, err := mvcc.Open(be, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	srcDir := t.TempDir()
	src := open(srcDir)
	se := &env{t: t, st: src, h: New(Config{Store: src})}
	for i := 0; i < 4; i++ {
		se.put("k", fmt.Sprint(i)) // the hub is not running: Notify only queues
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	if err := src.Backend().Close(); err != nil {
		t.Fatal(err)
	}

	st := open(t.TempDir())
	defer func() { st.Close(); st.Backend().Close() }()
	h := New(Config{Store: st})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	defer func() { cancel(); <-done }()
	e := &env{t: t, st: st, h: h}
	s := h.NewStream()
	s.Watch(WatchRequest{Key: []byte("k")})
	id := created(t, s)
	e.put("k", "0")
	e.put("k", "1")
	if got := events(t, s, id, 3); len(got) != 2 {
		t.Fatalf("before the reset: %v", got)
	}
	err := st.Reset(func(old backend.Backend) (backend.Backend, error) {
		if err := old.Close(); err != nil {
			return nil, err
		}
		return enginetest.Open("bolt", srcDir)
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h.Resync()
	if got, want := events(t, s, id, 5), []string{"PUT k=2@4", "PUT k=3@5"}; !slices.Equal(got, want) {
		t.Fatalf("after the reset: %v, want %v", got, want)
	}
}

// waitParked waits until a goroutine is blocked (in a select or on a
// channel) inside fn, as runtime.Stack shows it.
func waitParked(t *testing.T, fn string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		for _, g := range strings.Split(string(buf[:n]), "\n\n") {
			head, _, _ := strings.Cut(g, "\n")
			if strings.Contains(g, fn) && (strings.Contains(head, "[select") || strings.Contains(head, "[chan receive")) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no goroutine parked in %s", fn)
		}
		time.Sleep(time.Millisecond)
	}
}
