package mvcc

import (
	"errors"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
)

// TestEventsMatchApplied checks that the events read back from the store,
// whether committed or still buffered, are the events the writes produced,
// split only at revision boundaries.
func TestEventsMatchApplied(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		ts := newTestStore(t, e)
		var want []*mvccpb.Event
		write := func(fn func(tw *TxnWrite)) {
			ts.apply(func(b *Batch) {
				tw := b.Write()
				fn(tw)
				want = append(want, tw.Events()...)
				tw.End()
			})
		}
		for i := range 30 {
			write(func(tw *TxnWrite) {
				tw.Put(fmt.Appendf(nil, "k%d", i%7), fmt.Appendf(nil, "v%d", i), 0)
				if i%3 == 0 {
					tw.Put(fmt.Appendf(nil, "t%d", i), []byte("x"), 0)
				}
			})
			if i%5 == 4 {
				write(func(tw *TxnWrite) { tw.DeleteRange([]byte("k"), []byte("k4")) })
			}
			if i == 15 {
				if err := ts.Flush(); err != nil {
					t.Fatal(err)
				}
			}
		}
		rt := ts.Read()
		defer rt.End()
		cur := rt.Rev()
		for _, limit := range []int{0, 1, 2, 5, 1000} {
			var got []*mvccpb.Event
			for from := int64(2); from <= cur; {
				evs, last, err := rt.Events(from, cur, limit)
				if err != nil {
					t.Fatalf("Events(%d, %d, %d): %v", from, cur, limit, err)
				}
				if last < from {
					t.Fatalf("Events(%d, %d, %d) made no progress (last %d)", from, cur, limit, last)
				}
				for _, ev := range evs {
					if ev.Kv.ModRevision > last {
						t.Fatalf("limit %d: event at %d after last %d", limit, ev.Kv.ModRevision, last)
					}
				}
				if len(evs) > 0 && evs[len(evs)-1].Kv.ModRevision != last && last != cur {
					t.Fatalf("limit %d: batch ends at %d but last is %d", limit, evs[len(evs)-1].Kv.ModRevision, last)
				}
				got = append(got, evs...)
				from = last + 1
			}
			if len(got) != len(want) {
				t.Fatalf("limit %d: %d events, want %d", limit, len(got), len(want))
			}
			for i := range got {
				if !proto.Equal(got[i], want[i]) {
					t.Fatalf("limit %d: event %d = %v, want %v", limit, i, got[i], want[i])
				}
			}
		}
		if _, _, err := rt.Events(1, cur+1, 0); !errors.Is(err, ErrFutureRev) {
			t.Fatalf("Events past the view: %v, want ErrFutureRev", err)
		}
	})
}

func TestEventsBelowCompaction(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		ts := newTestStore(t, e)
		for i := range 10 {
			ts.put("a", fmt.Sprint(i))
		}
		ts.compact(6)
		rt := ts.Read()
		defer rt.End()
		if _, _, err := rt.Events(5, rt.Rev(), 0); !errors.Is(err, ErrCompacted) {
			t.Fatalf("Events below the compaction: %v, want ErrCompacted", err)
		}
		evs, _, err := rt.Events(6, rt.Rev(), 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 6 || evs[0].Kv.ModRevision != 6 {
			t.Fatalf("Events from the compaction revision: %v", evs)
		}
	})
}
