package watchhub

import (
	"fmt"
	"slices"
	"sync"
	"testing"

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
