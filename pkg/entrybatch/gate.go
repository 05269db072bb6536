package entrybatch

import (
	"context"
	"strings"
	"time"

	"go.uber.org/zap"
)

// Feature is what a member whose build reads batched entries sends its
// peers when they open a raft stream to it (transport.Config.Features).
const Feature = "entrybatch/1"

// GateInterval is how often Gate looks at the members again.
const GateInterval = 100 * time.Millisecond

// Reads reports whether a peer's features include Feature.
func Reads(features string) bool {
	for f := range strings.SplitSeq(features, ",") {
		if f == Feature {
			return true
		}
	}
	return false
}

// Gate lets a member propose batched entries only while every other member
// of the cluster, learners included, has a raft stream open from this one
// and said, when it opened, that it reads them. A member it has not heard
// from (down, partitioned, just added, or restarted and not yet
// reconnected) turns batching off until it has.
//
// What the gate cannot do is take back batches already in the log: a
// member of a build that does not read them, joining or restarting into a
// cluster whose log still holds one, stops at that entry (it fails to
// decode it; it never applies it wrongly).
type Gate struct {
	Self uint64
	// Members lists the cluster's members, this one included.
	Members func() []uint64
	// Features is what a peer said when the stream to it opened, and
	// whether one is open (transport.Transport.PeerFeatures).
	Features func(id uint64) (string, bool)
	// Set turns batching on or off (raftnode.Node.SetBatching).
	Set    func(on bool)
	Logger *zap.Logger
}

// Open reports whether every member but Self reads batches now.
func (g *Gate) Open() bool {
	for _, id := range g.Members() {
		if id == g.Self {
			continue
		}
		if f, ok := g.Features(id); !ok || !Reads(f) {
			return false
		}
	}
	return true
}

// Run checks the members every GateInterval until ctx ends, and once at
// the start; batching is off when it returns.
func (g *Gate) Run(ctx context.Context) error {
	t := time.NewTicker(GateInterval)
	defer t.Stop()
	on := false
	defer func() { g.Set(false) }()
	for {
		if open := g.Open(); open != on {
			on = open
			g.Set(on)
			g.Logger.Info("raft entry batching", zap.Bool("on", on))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
