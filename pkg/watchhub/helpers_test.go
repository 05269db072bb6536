package watchhub

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/backend/enginetest"
	"github.com/kvd-dev/kvd/pkg/mvcc"
)

// env is a store and a running hub fed the way the applier feeds it: each
// batch's events after the batch is visible.
type env struct {
	t  *testing.T
	st *mvcc.Store
	h  *Hub
}

func eachEngine(t *testing.T, cfg Config, fn func(t *testing.T, e *env)) {
	for _, engine := range enginetest.Names {
		t.Run(engine, func(t *testing.T) {
			st, err := mvcc.Open(enginetest.OpenT(t, engine), zap.NewNop())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			c := cfg
			c.Store = st
			h := New(c)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- h.Run(ctx) }()
			t.Cleanup(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("hub: %v", err)
				}
			})
			fn(t, &env{t: t, st: st, h: h})
		})
	}
}

// txn applies one write txn in its own batch and notifies the hub.
func (e *env) txn(fn func(tw *mvcc.TxnWrite)) int64 {
	e.t.Helper()
	var evs []*mvccpb.Event
	var rev int64
	err := e.st.Apply(func(b *mvcc.Batch) error {
		tw := b.Write()
		fn(tw)
		evs = append(evs, tw.Events()...)
		rev = tw.Rev()
		tw.End()
		return nil
	})
	if err != nil {
		e.t.Fatalf("apply: %v", err)
	}
	e.h.Notify(evs)
	return rev
}

func (e *env) put(k, v string) int64 {
	e.t.Helper()
	return e.txn(func(tw *mvcc.TxnWrite) { tw.Put([]byte(k), []byte(v), 0) })
}

func (e *env) del(k string) int64 {
	e.t.Helper()
	return e.txn(func(tw *mvcc.TxnWrite) { tw.DeleteRange([]byte(k), nil) })
}

func (e *env) compact(rev int64) {
	e.t.Helper()
	var done <-chan struct{}
	if err := e.st.Apply(func(b *mvcc.Batch) error {
		var err error
		done, err = b.Compact(rev)
		return err
	}); err != nil {
		e.t.Fatalf("compact %d: %v", rev, err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		e.t.Fatalf("compaction at %d did not finish", rev)
	}
}

func recv(t *testing.T, s *Stream) Response {
	t.Helper()
	select {
	case r := <-s.C():
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no watch response within 10s")
		return Response{}
	}
}

// created reads the Created response of a watch and returns its ID.
func created(t *testing.T, s *Stream) int64 {
	t.Helper()
	r := recv(t, s)
	if !r.Created || r.Canceled {
		t.Fatalf("want a created response, got %+v", r)
	}
	return r.WatchID
}

// ev is an event in short form: "PUT k=v@rev" or "DELETE k@rev".
func ev(e *mvccpb.Event) string {
	s := fmt.Sprintf("%s %s", e.Type, e.Kv.Key)
	if e.Type == mvccpb.PUT {
		s += "=" + string(e.Kv.Value)
	}
	s += fmt.Sprintf("@%d", e.Kv.ModRevision)
	if e.PrevKv != nil {
		s += fmt.Sprintf(" prev=%s", e.PrevKv.Value)
	}
	return s
}

// events reads responses of watcher id until it holds an event at rev or
// later, checking that each response holds whole revisions in order.
func events(t *testing.T, s *Stream, id, rev int64) []string {
	t.Helper()
	var out []string
	last := int64(0)
	for last < rev {
		r := recv(t, s)
		if r.WatchID != id {
			t.Fatalf("response for watcher %d, want %d: %+v", r.WatchID, id, r)
		}
		if r.Canceled {
			t.Fatalf("watcher %d canceled: %+v", id, r)
		}
		for i, e := range r.Events {
			if i == 0 && e.Kv.ModRevision == last {
				t.Fatalf("revision %d split across responses", last)
			}
			if e.Kv.ModRevision < last {
				t.Fatalf("event %s after revision %d", ev(e), last)
			}
			if e.Kv.ModRevision > r.Revision {
				t.Fatalf("event %s above the header revision %d", ev(e), r.Revision)
			}
			last = e.Kv.ModRevision
			out = append(out, ev(e))
		}
	}
	return out
}
