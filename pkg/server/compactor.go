package server

import (
	"context"
	"os"
	"time"

	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/api"
	"github.com/kvd-dev/kvd/pkg/compactor"
	"github.com/kvd-dev/kvd/pkg/config"
	"github.com/kvd-dev/kvd/pkg/mvcc"
	"github.com/kvd-dev/kvd/pkg/raftnode"
)

// revisionIntervalEnv shortens revision mode's five-minute interval; it is a
// test knob (the e2e tests), not a setting: etcd has none.
const revisionIntervalEnv = "KVD_TEST_AUTO_COMPACTION_REVISION_INTERVAL"

// startCompactor runs auto compaction (auto-compaction-mode and
// auto-compaction-retention) on this member while it leads, from start to
// stop; nothing when the retention is 0.
func startCompactor(lc fx.Lifecycle, c *config.Config, n *raftnode.Node, st *mvcc.Store, s *api.Server, lg *zap.Logger) error {
	period, revisions, err := c.AutoCompaction()
	if err != nil {
		return err
	}
	if period == 0 && revisions == 0 {
		return nil
	}
	cfg := compactor.Config{
		Mode:      c.AutoCompactionMode,
		Period:    period,
		Retention: revisions,
		Rev:       st.Rev,
		IsLeader:  func() bool { return n.Leader() == n.ID() },
		Compact:   s.AutoCompact,
		Logger:    lg.Named("compactor"),
	}
	if v := os.Getenv(revisionIntervalEnv); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			cfg.RevisionInterval = d
		}
	}
	cp, err := compactor.New(cfg)
	if err != nil {
		return err
	}
	fields := []zap.Field{zap.String("auto-compaction-mode", c.AutoCompactionMode)}
	if period > 0 {
		fields = append(fields, zap.Duration("auto-compaction-retention", period),
			zap.Duration("compact-interval", compactor.CompactInterval(period)),
			zap.Duration("sample-interval", compactor.RetryInterval(period)))
	} else {
		fields = append(fields, zap.Int64("auto-compaction-retention", revisions),
			zap.Duration("check-interval", cp.RevisionInterval()))
	}
	lg.Info("auto compaction enabled", fields...)
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error { cp.Start(); return nil },
		OnStop:  func(context.Context) error { cp.Stop(); return nil },
	})
	return nil
}
