package apply

import (
	"context"
	"errors"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"testing"
	"time"
)

// A sweeping registry ends a RegisterRequest wait with the request timeout
// never before the timeout has passed since the registration, and not
// much later; waits registered a moment apart end apart.
func TestSweepTimesWaitsOutNeverEarly(t *testing.T) {
	const timeout = 250 * time.Millisecond
	r := NewRegistry()
	r.Sweep(timeout)
	type wait struct {
		at time.Time
		ch <-chan Result
	}
	var waits []wait
	for id := range uint64(8) {
		waits = append(waits, wait{time.Now(), r.RegisterRequest(context.Background(), nil, id, nil).C()})
		time.Sleep(sweepInterval / 3)
	}
	for i, w := range waits {
		res := <-w.ch
		waited := time.Since(w.at)
		if !errors.Is(res.Dropped, context.DeadlineExceeded) {
			t.Fatalf("wait %d ended with %+v, want Dropped DeadlineExceeded", i, res)
		}
		if waited < timeout {
			t.Errorf("wait %d timed out after %v, before the request timeout %v", i, waited, timeout)
		}
		if waited > timeout+sweepInterval+time.Second {
			t.Errorf("wait %d timed out only after %v", i, waited)
		}
	}
	if n := r.Len(); n != 0 {
		t.Errorf("%d waiters left", n)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sweeping {
		t.Error("the registry still sweeps with nothing to sweep")
	}
}

// A wait whose context ends is ended with the context's error; a result
// delivered first wins; the waits of Register (whose callers watch their
// own context) are left alone.
func TestSweepEndsWaitsOfEndedContexts(t *testing.T) {
	r := NewRegistry()
	r.Sweep(0)
	ctx, cancel := context.WithCancel(context.Background())
	canceled := r.RegisterRequest(ctx, nil, 1, nil).C()
	answered := r.RegisterRequest(ctx, nil, 2, nil).C()
	own := r.Register(ctx, 3)
	r.Trigger(2, Result{Err: errors.New("applied")})
	cancel()
	if res := <-canceled; !errors.Is(res.Dropped, context.Canceled) {
		t.Fatalf("canceled wait ended with %+v, want Dropped Canceled", res)
	}
	if res := <-answered; res.Dropped != nil || res.Err == nil || res.Err.Error() != "applied" {
		t.Fatalf("answered wait got %+v, want its result", res)
	}
	select {
	case res := <-own:
		t.Fatalf("Register's wait was ended by the sweep: %+v", res)
	case <-time.After(3 * sweepInterval):
	}
	if n := r.Len(); n != 1 {
		t.Errorf("%d waiters left, want Register's one", n)
	}
}

// Without Sweep nothing is ended for the caller.
func TestNoSweepWithoutSweep(t *testing.T) {
	r := NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ch := r.RegisterRequest(ctx, nil, 1, nil).C()
	select {
	case res := <-ch:
		t.Fatalf("wait ended without Sweep: %+v", res)
	case <-time.After(3 * sweepInterval):
	}
}

// Result's channels are reused: every wait still gets its own result, never
// one left from an earlier wait.
func TestWaitResultsAfterReuse(t *testing.T) {
	r := NewRegistry()
	r.Sweep(time.Minute)
	for id := range uint64(1000) {
		w := r.RegisterRequest(context.Background(), nil, id, nil)
		r.Trigger(id, Result{Resp: &pb.PutResponse{Header: &pb.ResponseHeader{Revision: int64(id)}}})
		res := w.Result()
		if got := res.Resp.(*pb.PutResponse).Header.Revision; got != int64(id) {
			t.Fatalf("wait %d got the result of %d", id, got)
		}
	}
	if n := r.Len(); n != 0 {
		t.Fatalf("%d waiters left", n)
	}
}
