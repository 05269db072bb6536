package server

import (
	"context"
	"time"

	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/config"
	"github.com/kvd-dev/kvd/pkg/membership"
	"github.com/kvd-dev/kvd/pkg/transport"
)

// Initial election tick advance, as etcd's adjustTicks: with
// initial-election-tick-advance, a member of a multi-member cluster waits
// up to 5 s for streams to more than one peer, then fast-forwards
// election-ticks - 2 ticks, so that without a leader it campaigns after
// about two heartbeats instead of a whole election timeout. A single
// member campaigns at once anyway (raftnode's sole voter rule).
const (
	tickAdvanceWait = 5 * time.Second
	tickAdvancePoll = 50 * time.Millisecond
)

// tickAdvancer is what the advance needs; tests fake it.
type tickAdvancer struct {
	enabled       bool
	members       int
	electionTicks int
	activePeers   func() int
	advance       func(ctx context.Context, ticks int) error
	lg            *zap.Logger
}

// run returns the number of ticks advanced (0: none).
func (t tickAdvancer) run(ctx context.Context) int {
	if t.members <= 1 {
		return 0
	}
	if !t.enabled {
		t.lg.Info("skipping initial election tick advance", zap.Int("election-ticks", t.electionTicks))
		return 0
	}
	t.lg.Info("starting initial election tick advance", zap.Int("election-ticks", t.electionTicks))
	for i := 0; i < int(tickAdvanceWait/tickAdvancePoll); i++ {
		select {
		case <-time.After(tickAdvancePoll):
		case <-ctx.Done():
			return 0
		}
		if n := t.activePeers(); n > 1 {
			ticks := t.electionTicks - 2
			if err := t.advance(ctx, ticks); err != nil {
				return 0
			}
			t.lg.Info("initialized peer connections; fast-forwarding election ticks",
				zap.Int("forward-ticks", ticks), zap.Int("election-ticks", t.electionTicks), zap.Int("active-remote-members", n))
			return ticks
		}
	}
	return 0
}

func advanceElectionTicks(lc fx.Lifecycle, c *config.Config, a *Actors, cl *membership.Cluster, ptr *transport.Transport, lg *zap.Logger) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			t := tickAdvancer{
				enabled:       c.InitialElectionTickAdvance,
				members:       len(cl.Members()),
				electionTicks: c.ElectionTicks(),
				activePeers: func() int {
					n := 0
					for _, p := range ptr.PeerHealth() {
						if p.Active {
							n++
						}
					}
					return n
				},
				advance: a.Node.AdvanceTicks,
				lg:      lg,
			}
			go func() { defer close(done); t.run(ctx) }()
			return nil
		},
		OnStop: func(context.Context) error { cancel(); <-done; return nil },
	})
}
