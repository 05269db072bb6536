package watchhub

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
)

// TestSlowStreamLosesNothing: a stream nobody reads does not hold up the
// writer or another stream, and gets every event once read again.
func TestSlowStreamLosesNothing(t *testing.T) {
	eachEngine(t, Config{StreamBuffer: 2, SyncBatch: 7}, func(t *testing.T, e *env) {
		slow, fast := e.h.NewStream(), e.h.NewStream()
		slow.Watch(WatchRequest{Key: []byte("k"), End: []byte("l")})
		sid := created(t, slow)
		fast.Watch(WatchRequest{Key: []byte("k"), End: []byte("l")})
		fid := created(t, fast)
		var want []string
		for i := range 200 {
			rev := e.put(fmt.Sprintf("k%d", i%10), fmt.Sprint(i))
			want = append(want, fmt.Sprintf("PUT k%d=%d@%d", i%10, i, rev))
			if i%50 == 0 {
				// The fast reader keeps up while the slow one sleeps.
				if got := events(t, fast, fid, rev); got[len(got)-1] != want[len(want)-1] {
					t.Fatalf("fast stream at %v, want %v", got[len(got)-1], want[len(want)-1])
				}
			}
		}
		final := int64(201)
		events(t, fast, fid, final)
		if got := events(t, slow, sid, final); !slices.Equal(got, want) {
			t.Fatalf("slow stream:\ngot  %v\nwant %v", got, want)
		}
		// Caught up, it is fed from the applier again.
		rev := e.put("k0", "again")
		if got := events(t, slow, sid, rev); !slices.Equal(got, []string{fmt.Sprintf("PUT k0=again@%d", rev)}) {
			t.Fatalf("after catching up: %v", got)
		}
	})
}

func TestCompaction(t *testing.T) {
	eachEngine(t, Config{StreamBuffer: 1}, func(t *testing.T, e *env) {
		for i := range 10 {
			e.put("k", fmt.Sprint(i))
		}
		e.compact(6)

		// A start revision below the compaction: created, then canceled.
		s := e.h.NewStream()
		s.Watch(WatchRequest{ID: 7, Key: []byte("k"), StartRev: 5})
		id := created(t, s)
		r := recv(t, s)
		if r.WatchID != id || !r.Canceled || r.CompactRevision != 6 {
			t.Fatalf("watch below the compaction: %+v, want canceled with compact revision 6", r)
		}
		// As in etcd, its ID stays taken until the client cancels it.
		s.Watch(WatchRequest{ID: id, Key: []byte("k")})
		if r := recv(t, s); !r.Canceled || r.CancelReason != ErrDuplicateID.Error() {
			t.Fatalf("reusing a compacted watcher's ID: %+v", r)
		}
		s.Cancel(id)
		if r := recv(t, s); !r.Canceled || r.WatchID != id || r.CompactRevision != 0 {
			t.Fatalf("cancel of a compacted watcher: %+v", r)
		}
		// At the compaction revision: replayed.
		s.Watch(WatchRequest{Key: []byte("k"), StartRev: 6})
		id = created(t, s)
		if got := events(t, s, id, 11); len(got) != 6 || got[0] != "PUT k=4@6" {
			t.Fatalf("watch at the compaction revision: %v", got)
		}
		s.Close()

		// A victim whose backlog falls behind a compaction is canceled.
		v := e.h.NewStream()
		v.Watch(WatchRequest{Key: []byte("k")})
		id = created(t, v)
		first := e.put("k", "a") // fills the buffer
		e.put("k", "b")          // held as the victim's response
		for range 5 {
			e.put("k", "c")
		}
		e.compact(e.st.Rev())
		// A watch created on another stream is answered once the hub
		// handled every event before it: only then may the victim drain,
		// or it could rejoin the synced watchers before the last puts.
		barrier := e.h.NewStream()
		barrier.Watch(WatchRequest{Key: []byte("other")})
		created(t, barrier)
		got := events(t, v, id, first+1)
		if !slices.Equal(got, []string{fmt.Sprintf("PUT k=a@%d", first), fmt.Sprintf("PUT k=b@%d", first+1)}) {
			t.Fatalf("victim got %v", got)
		}
		r = recv(t, v)
		if !r.Canceled || r.CompactRevision != e.st.Rev() {
			t.Fatalf("victim behind the compaction: %+v, want canceled at %d", r, e.st.Rev())
		}
	})
}

func TestCreateErrorsAndCancel(t *testing.T) {
	eachEngine(t, Config{}, func(t *testing.T, e *env) {
		s := e.h.NewStream()
		s.Watch(WatchRequest{Key: []byte("a")})
		if id := created(t, s); id != 0 {
			t.Fatalf("first automatic id %d, want 0", id)
		}
		s.Watch(WatchRequest{ID: 1, Key: []byte("a")})
		created(t, s)
		s.Watch(WatchRequest{Key: []byte("a")})
		if id := created(t, s); id != 2 {
			t.Fatalf("automatic id skips taken ones: %d, want 2", id)
		}
		for _, c := range []struct {
			req  WatchRequest
			want string
		}{
			{WatchRequest{ID: 1, Key: []byte("a")}, ErrDuplicateID.Error()},
			{WatchRequest{Key: []byte("b"), End: []byte("a")}, ErrEmptyRange.Error()},
			{WatchRequest{Key: []byte("a"), StartRev: -1}, ErrCompacted.Error()},
		} {
			s.Watch(c.req)
			r := recv(t, s)
			if !r.Created || !r.Canceled || r.WatchID != InvalidID || r.CancelReason != c.want {
				t.Fatalf("watch %+v: %+v, want refused with %q", c.req, r, c.want)
			}
		}
		s.Cancel(1)
		if r := recv(t, s); !r.Canceled || r.WatchID != 1 {
			t.Fatalf("cancel: %+v", r)
		}
		s.Cancel(1) // gone: no answer
		rev := e.put("a", "x")
		for range 2 {
			r := recv(t, s)
			if r.WatchID == 1 || len(r.Events) != 1 || r.Events[0].Kv.ModRevision != rev {
				t.Fatalf("after cancel: %+v", r)
			}
		}
	})
}

func TestProgress(t *testing.T) {
	eachEngine(t, Config{StreamBuffer: 1, SyncBatch: 2}, func(t *testing.T, e *env) {
		s := e.h.NewStream()
		s.Watch(WatchRequest{Key: []byte("x")})
		id := created(t, s)
		s.Progress(id)
		if r := recv(t, s); r.WatchID != id || r.Revision != 1 || len(r.Events) != 0 {
			t.Fatalf("progress notify: %+v", r)
		}
		for i := range 10 {
			e.put("k", fmt.Sprint(i))
		}
		// A watcher far behind: the stream's progress waits for it.
		s.Watch(WatchRequest{Key: []byte("k"), StartRev: 2})
		slowID := created(t, s)
		s.RequestProgress()
		var evs []string
		for {
			r := recv(t, s)
			if r.WatchID == InvalidID {
				if r.Revision != 11 || len(evs) != 10 {
					t.Fatalf("progress at %d after %d events, want 11 after 10", r.Revision, len(evs))
				}
				break
			}
			if r.WatchID != slowID {
				t.Fatalf("unexpected %+v", r)
			}
			for _, x := range r.Events {
				evs = append(evs, ev(x))
			}
		}
	})
}

// TestGroupMatchesBruteForce checks the map and treap against a scan.
func TestGroupMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	key := func() []byte { return []byte{byte('a' + rng.IntN(12)), byte('a' + rng.IntN(3))}[:1+rng.IntN(2)] }
	g := newGroup()
	var all []*watcher
	for step := range 4000 {
		if len(all) > 0 && rng.IntN(3) == 0 {
			i := rng.IntN(len(all))
			if !g.remove(all[i]) {
				t.Fatalf("step %d: remove of a member failed", step)
			}
			if g.remove(all[i]) {
				t.Fatalf("step %d: a second remove of one watcher succeeded", step)
			}
			all = slices.Delete(all, i, i+1)
		} else {
			w := &watcher{id: int64(step), key: key()}
			switch rng.IntN(3) {
			case 1:
				w.end = []byte{}
			case 2:
				w.end = key()
				if bytes.Compare(w.key, w.end) >= 0 {
					w.end = append(slices.Clone(w.key), 0)
				}
			}
			g.add(w)
			all = append(all, w)
		}
		if g.len() != len(all) {
			t.Fatalf("step %d: len %d, want %d", step, g.len(), len(all))
		}
		k := key()
		var got, want []*watcher
		g.match(k, func(w *watcher) { got = append(got, w) })
		for _, w := range all {
			if w.contains(k) {
				want = append(want, w)
			}
		}
		order := func(a, b *watcher) int { return int(a.id - b.id) }
		slices.SortFunc(got, order)
		slices.SortFunc(want, order)
		if !slices.Equal(got, want) {
			t.Fatalf("step %d: match %q: %d watchers, want %d", step, k, len(got), len(want))
		}
	}
}

type countMetrics struct {
	watchers, streams, events atomic.Int64
}

func (m *countMetrics) Watchers(d int)   { m.watchers.Add(int64(d)) }
func (m *countMetrics) Streams(d int)    { m.streams.Add(int64(d)) }
func (m *countMetrics) EventsSent(n int) { m.events.Add(int64(n)) }
func (m *countMetrics) Slow(int, int)    {}

// TestCloseFreesWatchers: a closed stream's watchers are gone, and requests
// that race with the close are ignored.
func TestCloseFreesWatchers(t *testing.T) {
	m := &countMetrics{}
	eachEngine(t, Config{Metrics: m, StreamBuffer: 1}, func(t *testing.T, e *env) {
		baseW, baseS := m.watchers.Load(), m.streams.Load()
		s := e.h.NewStream()
		for range 3 {
			s.Watch(WatchRequest{Key: []byte("k"), End: []byte{}})
		}
		e.put("k", "x") // the stream is full: watchers turn victims
		s.Close()
		s.Watch(WatchRequest{Key: []byte("k")})
		// The hub handles messages in order: once another stream's create
		// is answered, the close was handled.
		other := e.h.NewStream()
		other.Watch(WatchRequest{Key: []byte("z")})
		created(t, other)
		if n := m.watchers.Load() - baseW; n != 1 {
			t.Fatalf("%d watchers after the close, want 1 (the other stream's)", n)
		}
		if n := m.streams.Load() - baseS; n != 1 {
			t.Fatalf("%d streams after the close, want 1", n)
		}
		other.Close()
	})
}
