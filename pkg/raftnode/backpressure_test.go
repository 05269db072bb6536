package raftnode

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/actors"
	"github.com/kvd-dev/kvd/pkg/raftlog"
)

// TestStalledApplierMailboxBounded: while the applier does not run, raft
// keeps committing, but hands the applier's mailbox no more than
// MaxCommittedSizePerReady bytes (plus one entry); the rest waits in the
// log and is delivered, in order and complete, once the applier resumes.
func TestStalledApplierMailboxBounded(t *testing.T) {
	l, err := raftlog.Open(raftlog.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	n, err := New(Config{ID: 1, Peers: []raft.Peer{{ID: 1}}, TickInterval: 10 * time.Millisecond, ElectionTicks: 10, HeartbeatTicks: 1, Log: l, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	app := &fakeApplier{n: n, changed: make(chan struct{}, 1)}
	g := actors.NewGroup(zap.NewNop(), func(err error) { t.Errorf("actor failed: %v", err) })
	defer func() {
		if err := g.Stop(); err != nil {
			t.Error(err)
		}
	}()
	g.Go("raft", n)
	g.Go("wal", NewWALWriter(l, n, nil))
	// The first applier applies the bootstrap conf change (raft does not
	// campaign before), then stops: the stall.
	first := actors.NewGroup(zap.NewNop(), func(err error) { t.Errorf("actor failed: %v", err) })
	first.Go("applier", &fakeApplier{n: n, changed: make(chan struct{}, 1)})
	waitFor(t, "leadership", func() bool { return n.Leader() == 1 })
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	start := n.CommitIndex()

	const size, count = 128 << 10, 3 * MaxCommittedSizePerReady / (128 << 10) // 48 MiB
	ctx := context.Background()
	for i := 0; i < count; i++ {
		data := make([]byte, size)
		copy(data, fmt.Sprintf("%06d", i))
		if err := n.Propose(ctx, data); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "all proposals committed", func() bool { return n.CommitIndex() >= start+count })
	// Give the driver turns to (wrongly) hand out more.
	for i := 0; i < 10; i++ {
		if _, err := n.Status(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	queued, bytes := 0, 0
	msgs := n.Applies.Take()
	for _, m := range msgs {
		for _, e := range m.GetEntries() {
			queued++
			bytes += len(e.GetData())
		}
	}
	t.Logf("committed %d entries (%d MiB); applier mailbox holds %d entries, %d KiB, in %d messages",
		n.CommitIndex(), count*size>>20, queued, bytes>>10, len(msgs))
	if bytes > MaxCommittedSizePerReady+size {
		t.Fatalf("applier mailbox holds %d bytes, over %d", bytes, MaxCommittedSizePerReady+size)
	}
	if queued >= count {
		t.Fatalf("every committed entry (%d) was queued for the stalled applier", queued)
	}

	// Resume: the taken messages go back first, then the applier runs.
	n.Applies.Put(msgs...)
	g.Go("applier", app)
	waitFor(t, "everything applied", func() bool { a, _ := app.snapshot(); return len(a) == count })
	applied, _ := app.snapshot()
	for i, d := range applied {
		if want := fmt.Sprintf("%06d", i); string(d[:6]) != want {
			t.Fatalf("entry %d is %s, want %s", i, d[:6], want)
		}
	}
}
