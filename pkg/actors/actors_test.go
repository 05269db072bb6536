package actors

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/zap"
)

func TestDrainTakesWhatIsWaiting(t *testing.T) {
	ch := make(chan int, 10)
	for i := 0; i < 5; i++ {
		ch <- i
	}
	got := Drain(ch, []int{-1}, 4)
	if len(got) != 4 || got[0] != -1 || got[3] != 2 {
		t.Fatalf("Drain = %v, want [-1 0 1 2]", got)
	}
	got = Drain(ch, nil, 100)
	if len(got) != 2 {
		t.Fatalf("second Drain = %v, want the 2 left", got)
	}
}

func TestGroupFailureStopsOthers(t *testing.T) {
	failed := make(chan error, 1)
	g := NewGroup(zap.NewNop(), func(err error) { failed <- err })
	stopped := make(chan struct{})
	g.Go("waiter", Func(func(ctx context.Context) error {
		<-ctx.Done()
		close(stopped)
		return ctx.Err()
	}))
	boom := errors.New("boom")
	g.Go("failer", Func(func(context.Context) error { return boom }))
	select {
	case err := <-failed:
		if !errors.Is(err, boom) {
			t.Fatalf("onFail got %v, want boom", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("onFail not called")
	}
	<-stopped
	if err := g.Stop(); !errors.Is(err, boom) {
		t.Fatalf("Stop = %v, want boom", err)
	}
}

func TestGroupCleanStop(t *testing.T) {
	g := NewGroup(zap.NewNop(), func(err error) { t.Errorf("unexpected failure %v", err) })
	g.Go("a", Func(func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }))
	g.Go("b", Func(func(ctx context.Context) error { <-ctx.Done(); return nil }))
	if err := g.Stop(); err != nil {
		t.Fatalf("Stop = %v", err)
	}
}

func TestInboxOrderAndWakeup(t *testing.T) {
	in := NewInbox[int]()
	in.Put(1, 2)
	in.Put(3)
	<-in.Ready()
	if got := in.Take(); len(got) != 3 || got[0] != 1 || got[2] != 3 {
		t.Fatalf("Take = %v", got)
	}
	if got := in.Take(); len(got) != 0 {
		t.Fatalf("second Take = %v, want empty", got)
	}
	in.Put(4)
	select {
	case <-in.Ready():
	default:
		t.Fatal("Put did not signal Ready")
	}
	if got := in.Take(); len(got) != 1 || got[0] != 4 {
		t.Fatalf("Take = %v", got)
	}
}
