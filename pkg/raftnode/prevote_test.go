package raftnode

import (
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/raftlog"
)

// Config.PreVote decides how a member without a leader campaigns: with it,
// its first message to a peer is a MsgPreVote at the current term; without
// it, a MsgVote at a raised term.
func TestPreVoteConfigDecidesCampaignMessage(t *testing.T) {
	for _, tc := range []struct {
		preVote bool
		want    raftpb.MessageType
	}{
		{true, raftpb.MessageType_MsgPreVote},
		{false, raftpb.MessageType_MsgVote},
	} {
		t.Run(tc.want.String(), func(t *testing.T) {
			l, err := raftlog.Open(raftlog.Options{Dir: t.TempDir(), NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			var (
				mu    sync.Mutex
				first *raftpb.Message
			)
			n, err := New(Config{
				ID: 1, Peers: []raft.Peer{{ID: 1}, {ID: 2}},
				TickInterval: 5 * time.Millisecond, ElectionTicks: 10, HeartbeatTicks: 1,
				PreVote: tc.preVote, Log: l, Logger: zap.NewNop(),
				Send: func(ms []*raftpb.Message) {
					mu.Lock()
					defer mu.Unlock()
					for _, m := range ms {
						if first == nil && m.GetTo() == 2 {
							first = m
						}
					}
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			g := runNode(t, n, l)
			defer stopGroup(t, g)
			waitFor(t, "a campaign message to member 2", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return first != nil
			})
			mu.Lock()
			defer mu.Unlock()
			if first.GetType() != tc.want {
				t.Fatalf("first message to the peer is %s (term %d), want %s", first.GetType(), first.GetTerm(), tc.want)
			}
		})
	}
}
