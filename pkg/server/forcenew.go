package server

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/apply"
	"github.com/kvd-dev/kvd/pkg/config"
	"github.com/kvd-dev/kvd/pkg/membership"
	"github.com/kvd-dev/kvd/pkg/mvcc"
	"github.com/kvd-dev/kvd/pkg/raftlog"
)

// forceNewCluster is --force-new-cluster on a restarted member, as etcd's:
// the WAL gets committed conf changes that remove every other member (and
// loses the entries that were not committed), so the member restarts as a
// one-member cluster with its data; members are then added as usual. A
// member starting without a WAL ignores the flag, as etcd does.
func forceNewCluster(c *config.Config, l *raftlog.Log, st *mvcc.Store, cl *membership.Cluster, lg *zap.Logger) error {
	if !c.ForceNewCluster || l.IsNew() {
		return nil
	}
	peers, err := c.AdvertisePeerURLs()
	if err != nil {
		return fmt.Errorf("initial-advertise-peer-urls: %w", err)
	}
	self := cl.Self()
	ctx := apply.ConfChangeContext{Member: membership.Member{ID: self, Name: c.Name, PeerURLs: urlStrings(peers)}}.Marshal()
	res, err := l.ForceNewCluster(self, st.ConsistentIndex(), ctx)
	if err != nil {
		return fmt.Errorf("force-new-cluster: %w", err)
	}
	removed := make([]string, len(res.Removed))
	for i, id := range res.Removed {
		removed[i] = fmt.Sprintf("%x", id)
	}
	lg.Info("forcing restart member",
		zap.String("cluster-id", fmt.Sprintf("%x", cl.ID())),
		zap.String("local-member-id", fmt.Sprintf("%x", self)),
		zap.Uint64("wal-commit-index", res.OldCommit),
		zap.Uint64("commit-index", res.Commit),
		zap.Strings("removed-members", removed),
		zap.Bool("added-self", res.AddedSelf))
	return nil
}
