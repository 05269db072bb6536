package raftnode

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/raftlog"
)

// AdvanceTicks moves raft's election clock: with a tick of an hour, only
// the advanced ticks can start a campaign.
func TestAdvanceTicksStartsCampaign(t *testing.T) {
	l, err := raftlog.Open(raftlog.Options{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var (
		mu   sync.Mutex
		sent int
	)
	n, err := New(Config{
		ID: 1, Peers: []raft.Peer{{ID: 1}, {ID: 2}},
		TickInterval: time.Hour, ElectionTicks: 10, HeartbeatTicks: 1, PreVote: true, Log: l, Logger: zap.NewNop(),
		Send: func(ms []*raftpb.Message) {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range ms {
				if m.GetType() == raftpb.MessageType_MsgPreVote {
					sent++
				}
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	g := runNode(t, n, l)
	defer stopGroup(t, g)
	count := func() int { mu.Lock(); defer mu.Unlock(); return sent }
	time.Sleep(100 * time.Millisecond)
	if c := count(); c != 0 {
		t.Fatalf("%d pre-votes before any tick", c)
	}
	// The randomized election timeout is below 2 election timeouts.
	if err := n.AdvanceTicks(context.Background(), 20); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a pre-vote after the advanced ticks", func() bool { return count() > 0 })
}
