// Package compactor is kvd's auto compaction (auto-compaction-mode and
// auto-compaction-retention), with etcd v3.7.3's semantics (its
// etcdserver/api/v3compactor): it runs on the leader only, picks the
// revision to compact as etcd does, and proposes the compaction through raft
// like a client's Compact.
//
// Periodic mode keeps a window of revisions sampled every tenth of the
// compaction interval (the retention, at most one hour); once the retention
// has passed since the start, and then every compaction interval, it
// compacts at the oldest sample, the revision of about one retention ago.
//
// Revision mode looks every five minutes and compacts at the current
// revision minus the retention.
//
// On a follower every tick is skipped, as etcd pauses its compactor when it
// loses leadership and resumes it when it wins it; periodic sampling goes on
// while skipped, as in etcd.
package compactor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.uber.org/zap"
)

// Modes, as etcd's.
const (
	ModePeriodic = "periodic"
	ModeRevision = "revision"
)

// DefaultRevisionInterval is how often revision mode looks (etcd's
// revInterval).
const DefaultRevisionInterval = 5 * time.Minute

// retryDivisor splits the compaction interval into sampling (and retry)
// ticks, as etcd's.
const retryDivisor = 10

// Clock is the time the compactor sees; tests pass a fake.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Config wires a Compactor.
type Config struct {
	// Mode is ModePeriodic or ModeRevision.
	Mode string
	// Period is the periodic retention (mode periodic).
	Period time.Duration
	// Retention is how many revisions are kept (mode revision).
	Retention int64
	// RevisionInterval is how often revision mode looks;
	// DefaultRevisionInterval when zero.
	RevisionInterval time.Duration

	// Rev is the member's current revision.
	Rev func() int64
	// IsLeader tells whether this member leads raft now.
	IsLeader func() bool
	// Compact proposes a compaction at rev through raft and waits for its
	// result; an already compacted revision is rpctypes.ErrGRPCCompacted
	// (or an error wrapping it).
	Compact func(ctx context.Context, rev int64) error

	// Clock defaults to the real clock.
	Clock  Clock
	Logger *zap.Logger
}

// Compactor runs the compaction loop in one goroutine between Start and Stop.
type Compactor struct {
	cfg    Config
	lg     *zap.Logger
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// New checks cfg and returns a stopped compactor.
func New(cfg Config) (*Compactor, error) {
	switch cfg.Mode {
	case ModePeriodic:
		if cfg.Period/retryDivisor <= 0 {
			return nil, fmt.Errorf("compactor: periodic retention %s is below %s", cfg.Period, retryDivisor*time.Nanosecond)
		}
	case ModeRevision:
		if cfg.Retention <= 0 {
			return nil, fmt.Errorf("compactor: revision retention %d is not positive", cfg.Retention)
		}
		if cfg.RevisionInterval <= 0 {
			cfg.RevisionInterval = DefaultRevisionInterval
		}
	default:
		return nil, fmt.Errorf("compactor: unsupported compaction mode %q", cfg.Mode)
	}
	if cfg.Rev == nil || cfg.IsLeader == nil || cfg.Compact == nil {
		return nil, errors.New("compactor: Rev, IsLeader and Compact are required")
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	lg := cfg.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	c := &Compactor{cfg: cfg, lg: lg, done: make(chan struct{})}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c, nil
}

// Start runs the loop in a goroutine.
func (c *Compactor) Start() {
	c.once.Do(func() {
		if c.cfg.Mode == ModePeriodic {
			go c.runPeriodic()
		} else {
			go c.runRevision()
		}
	})
}

// Stop ends the loop (cancelling a compaction in flight) and waits for it.
// It may be called without Start.
func (c *Compactor) Stop() {
	c.cancel()
	started := true
	c.once.Do(func() { started = false })
	if started {
		<-c.done
	}
}

// CompactInterval is how often periodic mode compacts once the first
// retention has passed: the retention, at most one hour (etcd's
// getCompactInterval).
func CompactInterval(period time.Duration) time.Duration {
	return min(period, time.Hour)
}

// RetryInterval is periodic mode's sampling and retry tick: a tenth of the
// compaction interval (etcd's getRetryInterval).
func RetryInterval(period time.Duration) time.Duration {
	return CompactInterval(period) / retryDivisor
}

// retentions is how many samples the periodic window holds: its oldest is
// the revision of one period ago.
func retentions(period time.Duration) int {
	return int(period/RetryInterval(period)) + 1
}

// runPeriodic is etcd's Periodic.Run: sample the revision every retry
// interval, keep one period of samples, and compact at the oldest once the
// first period, then every compaction interval, has passed since the last
// success; a failure retries at the next tick.
func (c *Compactor) runPeriodic() {
	defer close(c.done)
	clk, period := c.cfg.Clock, c.cfg.Period
	compactInterval, retryInterval, keep := CompactInterval(period), RetryInterval(period), retentions(period)
	revs := make([]int64, 0, keep+1)
	lastRevision := int64(0)
	lastSuccess := clk.Now()
	baseInterval := period
	for {
		revs = append(revs, c.cfg.Rev())
		if len(revs) > keep {
			revs = revs[1:] // revs[0] is the revision of one period ago
		}
		select {
		case <-c.ctx.Done():
			return
		case <-clk.After(retryInterval):
		}
		if !c.cfg.IsLeader() {
			continue
		}
		rev := revs[0]
		if clk.Now().Sub(lastSuccess) < baseInterval || rev == lastRevision {
			continue
		}
		// The first compaction waits one period, the next ones one
		// compaction interval.
		baseInterval = compactInterval

		c.lg.Info("starting auto periodic compaction", zap.Int64("revision", rev), zap.Duration("compact-period", period))
		start := clk.Now()
		err := c.cfg.Compact(c.ctx, rev)
		if c.ctx.Err() != nil {
			return
		}
		if err == nil || isCompacted(err) {
			c.lg.Info("completed auto periodic compaction", zap.Int64("revision", rev), zap.Duration("compact-period", period),
				zap.Duration("took", clk.Now().Sub(start)))
			lastRevision = rev
			lastSuccess = clk.Now()
		} else {
			c.lg.Warn("failed auto periodic compaction", zap.Int64("revision", rev), zap.Duration("compact-period", period),
				zap.Duration("retry-interval", retryInterval), zap.Error(err))
		}
	}
}

// runRevision is etcd's Revision.Run: every interval, compact at the current
// revision minus the retention unless that is not positive or was the last
// one compacted; a failure retries at the next interval.
func (c *Compactor) runRevision() {
	defer close(c.done)
	clk, retention, interval := c.cfg.Clock, c.cfg.Retention, c.cfg.RevisionInterval
	prev := int64(0)
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-clk.After(interval):
		}
		if !c.cfg.IsLeader() {
			continue
		}
		rev := c.cfg.Rev() - retention
		if rev <= 0 || rev == prev {
			continue
		}
		c.lg.Info("starting auto revision compaction", zap.Int64("revision", rev), zap.Int64("revision-compaction-retention", retention))
		start := clk.Now()
		err := c.cfg.Compact(c.ctx, rev)
		if c.ctx.Err() != nil {
			return
		}
		if err == nil || isCompacted(err) {
			prev = rev
			c.lg.Info("completed auto revision compaction", zap.Int64("revision", rev), zap.Int64("revision-compaction-retention", retention),
				zap.Duration("took", clk.Now().Sub(start)))
		} else {
			c.lg.Warn("failed auto revision compaction", zap.Int64("revision", rev), zap.Int64("revision-compaction-retention", retention),
				zap.Duration("retry-interval", interval), zap.Error(err))
		}
	}
}

// isCompacted tells an already compacted revision: no failure.
func isCompacted(err error) bool {
	return errors.Is(err, rpctypes.ErrGRPCCompacted) || rpctypes.Error(err) == rpctypes.ErrCompacted
}

// RevisionInterval is how often revision mode looks.
func (c *Compactor) RevisionInterval() time.Duration { return c.cfg.RevisionInterval }
