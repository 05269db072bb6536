package leasemgr

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// DefaultTick is how often the Expirer looks at leadership and expiries.
const DefaultTick = 100 * time.Millisecond

// ExpirerConfig wires an Expirer.
type ExpirerConfig struct {
	Manager *Manager
	// IsLeader tells whether this member leads raft now.
	IsLeader func() bool
	// Extend is added to every lease on promotion (etcd: the election
	// timeout), so a new leader does not expire leases whose keep-alives
	// went to the old one.
	Extend time.Duration
	// Revoke proposes the revocation of lease id through raft; it need not
	// wait for the result (the manager hands the lease out again after its
	// retry interval if the revocation is not applied).
	Revoke func(ctx context.Context, id int64) error
	// CheckpointInterval, if positive, enables checkpointing: every
	// interval, the remaining TTLs of long leases are proposed through
	// Checkpoint, in batches of at most MaxCheckpointBatch.
	CheckpointInterval time.Duration
	Checkpoint         func(ctx context.Context, cps []Checkpoint) error
	// Tick defaults to DefaultTick.
	Tick   time.Duration
	Logger *zap.Logger
}

// Expirer is the lease-expirer actor: it promotes the manager when its member
// becomes leader and demotes it when it stops leading, and while primary it
// proposes the revocation of expired leases, at most the manager's revoke
// rate per second, so a mass expiry never floods raft ahead of client
// writes.
type Expirer struct {
	cfg ExpirerConfig
	lg  *zap.Logger
	// lastCheckpoint is when checkpoints were last proposed.
	lastCheckpoint time.Time
}

// MaxCheckpointBatch bounds the checkpoints in one raft entry (etcd's).
const MaxCheckpointBatch = 1000

// NewExpirer returns the actor.
func NewExpirer(cfg ExpirerConfig) *Expirer {
	if cfg.Tick <= 0 {
		cfg.Tick = DefaultTick
	}
	lg := cfg.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	return &Expirer{cfg: cfg, lg: lg}
}

// Run is the actor loop.
func (e *Expirer) Run(ctx context.Context) error {
	m := e.cfg.Manager
	perTick := max(1, int(int64(m.cfg.RevokeRate)*int64(e.cfg.Tick)/int64(time.Second)))
	t := time.NewTicker(e.cfg.Tick)
	defer t.Stop()
	for {
		e.step(ctx, perTick)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (e *Expirer) step(ctx context.Context, limit int) {
	m := e.cfg.Manager
	leader := e.cfg.IsLeader()
	switch primary := m.Primary(); {
	case leader && !primary:
		m.Promote(e.cfg.Extend)
		e.lg.Info("lease manager promoted", zap.Int("leases", m.Len()), zap.Duration("extend", e.cfg.Extend))
	case !leader && primary:
		m.Demote()
		e.lg.Info("lease manager demoted")
	}
	if !leader {
		return
	}
	if e.cfg.CheckpointInterval > 0 && e.cfg.Checkpoint != nil {
		now := m.cfg.Now()
		if e.lastCheckpoint.IsZero() {
			e.lastCheckpoint = now
		}
		if now.Sub(e.lastCheckpoint) >= e.cfg.CheckpointInterval {
			e.lastCheckpoint = now
			cps := m.Checkpoints(e.cfg.CheckpointInterval)
			for len(cps) > 0 {
				n := min(len(cps), MaxCheckpointBatch)
				if err := e.cfg.Checkpoint(ctx, cps[:n]); err != nil {
					e.lg.Warn("propose lease checkpoints", zap.Int("leases", n), zap.Error(err))
					break
				}
				cps = cps[n:]
			}
		}
	}
	for _, id := range m.Expired(limit) {
		if err := e.cfg.Revoke(ctx, id); err != nil {
			if ctx.Err() != nil {
				return
			}
			e.lg.Warn("propose revocation of expired lease", zap.Int64("lease", id), zap.Error(err))
			continue
		}
		m.counts.expired.Add(1)
	}
}
