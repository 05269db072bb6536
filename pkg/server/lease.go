package server

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/api"
	"github.com/kvd-dev/kvd/pkg/config"
	"github.com/kvd-dev/kvd/pkg/leasemgr"
	"github.com/kvd-dev/kvd/pkg/mvcc"
	"github.com/kvd-dev/kvd/pkg/raftnode"
)

// newLeases loads the leases kept in the store, with the minimum TTL etcd
// derives from the election timeout.
func newLeases(c *config.Config, st *mvcc.Store, disk earlyMetrics, lg *zap.Logger) (*leasemgr.Manager, error) {
	m := leasemgr.New(leasemgr.Config{MinTTL: leasemgr.MinTTL(c.HeartbeatDuration(), c.ElectionTicks()),
		OnGrant: func(ttl int64) { disk.leaseTTL.Observe(float64(ttl)) }})
	if err := m.Recover(st); err != nil {
		return nil, fmt.Errorf("open lease manager: %w", err)
	}
	lg.Info("leases recovered", zap.Int("leases", m.Len()))
	return m, nil
}

// newExpirer is the lease-expirer actor. Leases are extended by one
// election timeout on promotion, as etcd does.
func newExpirer(c *config.Config, n *raftnode.Node, m *leasemgr.Manager, s *api.Server, lg *zap.Logger) *leasemgr.Expirer {
	return leasemgr.NewExpirer(leasemgr.ExpirerConfig{
		Manager:  m,
		IsLeader: func() bool { return n.Leader() == n.ID() },
		Extend:   time.Duration(c.ElectionTimeout) * time.Millisecond,
		Revoke:   s.ProposeLeaseRevoke,
		// etcd's LeaseCheckpoint feature gate turns checkpointing on, at
		// etcd's default interval.
		CheckpointInterval: checkpointInterval(c),
		Checkpoint:         s.ProposeLeaseCheckpoints,
		Logger:             lg.Named("lease"),
	})
}

// leaseCheckpointInterval is etcd's default lease checkpoint interval.
const leaseCheckpointInterval = 5 * time.Minute

func checkpointInterval(c *config.Config) time.Duration {
	if c.FeatureEnabled("LeaseCheckpoint") {
		return leaseCheckpointInterval
	}
	return 0
}
