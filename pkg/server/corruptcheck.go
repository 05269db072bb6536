package server

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/api"
	"github.com/kvd-dev/kvd/pkg/config"
	"github.com/kvd-dev/kvd/pkg/corruptcheck"
	"github.com/kvd-dev/kvd/pkg/membership"
	"github.com/kvd-dev/kvd/pkg/mvcc"
	"github.com/kvd-dev/kvd/pkg/raftnode"
	"github.com/kvd-dev/kvd/pkg/tlsconf"
)

// peerHashTimeout bounds one peer's HashKV answer, as etcd's request timeout.
const peerHashTimeout = 5 * time.Second

// startCorruptMonitor starts etcd's two leader-side corruption monitors.
//
// monitorKVHash: with corrupt-check-time > 0, every corrupt-check-time the
// leader runs the periodic corruption check (pkg/corruptcheck) and raises
// CORRUPT through raft for a diverged member.
//
// monitorCompactHash: with the CompactHashCheck feature gate on, every
// compact-hash-check-time the leader compares the hashes its compactions
// stored with the followers' at the same revisions.
//
// Followers tick but do not check. The peers' hashes are asked over their
// client URLs with Maintenance.HashKV, as the initial check does (etcd asks
// its peers' /members/hashkv over the peer URLs).
func startCorruptMonitor(lc fx.Lifecycle, c *config.Config, n *raftnode.Node, st *mvcc.Store, cl *membership.Cluster, s *api.Server, lg *zap.Logger) error {
	periodic := c.CorruptCheckTime.Std()
	compact := time.Duration(0)
	if c.FeatureEnabled("CompactHashCheck") {
		compact = c.CompactHashCheckTime.Std()
	}
	if periodic <= 0 && compact <= 0 {
		return nil
	}
	info, err := tlsconf.ForClient(c, lg)
	if err != nil {
		return err
	}
	h := &corruptHasher{n: n, st: st, cl: cl, s: s, info: info, lg: lg}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	// every runs check every d while this member leads, until the stop.
	every := func(d time.Duration, stopped string, check func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tk := time.NewTicker(d)
			defer tk.Stop()
			for {
				select {
				case <-ctx.Done():
					lg.Info(stopped)
					return
				case <-tk.C:
				}
				if n.Leader() == n.ID() {
					check()
				}
			}
		}()
	}
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			if periodic > 0 {
				cm := corruptcheck.New(lg, h)
				lg.Info("enabled corruption checking", zap.String("local-member-id", idHex(n.ID())), zap.Duration("interval", periodic))
				every(periodic, "server has stopped; stopping kv hash's monitor", func() {
					if _, err := cm.PeriodicCheck(ctx); err != nil && ctx.Err() == nil {
						lg.Warn("failed to check hash KV", zap.Error(err))
					}
				})
			}
			if compact > 0 {
				cc := corruptcheck.NewCompactChecker(lg, h)
				lg.Info("enabled compaction hash check", zap.String("local-member-id", idHex(n.ID())), zap.Duration("interval", compact))
				every(compact, "server has stopped; stopping compact hash's monitor", func() { cc.CompactHashCheck(ctx) })
			}
			return nil
		},
		OnStop: func(context.Context) error { cancel(); wg.Wait(); return nil },
	})
	return nil
}

// corruptHasher is the member as corruptcheck.Hasher.
type corruptHasher struct {
	n    *raftnode.Node
	st   *mvcc.Store
	cl   *membership.Cluster
	s    *api.Server
	info *tlsconf.Info
	lg   *zap.Logger
}

func (h *corruptHasher) MemberID() uint64 { return h.n.ID() }

// Hashes are the hashes the local compactions stored.
func (h *corruptHasher) Hashes() []corruptcheck.KeyValueHash {
	var out []corruptcheck.KeyValueHash
	for _, kh := range h.st.Hashes() {
		out = append(out, corruptcheck.KeyValueHash{Hash: kh.Hash, Revision: kh.Revision, CompactRevision: kh.CompactRevision})
	}
	return out
}

func (h *corruptHasher) HashByRev(rev int64) (corruptcheck.KeyValueHash, int64, error) {
	hash, cur, compact, err := h.st.HashByRev(rev)
	if err != nil {
		return corruptcheck.KeyValueHash{}, cur, err
	}
	if rev <= 0 {
		rev = cur
	}
	return corruptcheck.KeyValueHash{Hash: hash, Revision: rev, CompactRevision: compact}, cur, nil
}

// PeerHashByRev asks each other member's client URLs in turn for HashKV at
// rev, as etcd's getPeerHashKVs tries each peer URL; a member with no URL
// answering is listed with the last error.
func (h *corruptHasher) PeerHashByRev(ctx context.Context, rev int64) []corruptcheck.PeerHash {
	var out []corruptcheck.PeerHash
	for _, m := range h.cl.Members() {
		if m.ID == h.cl.Self() || len(m.ClientURLs) == 0 {
			continue
		}
		p := corruptcheck.PeerHash{ID: m.ID, Endpoints: m.ClientURLs}
		for _, u := range m.ClientURLs {
			cctx, cancel := context.WithTimeout(ctx, peerHashTimeout)
			resp, err := peerHashKV(cctx, u, h.info, rev)
			cancel()
			if err == nil {
				p.Resp, p.Err = resp, nil
				break
			}
			p.Err = err
			h.lg.Warn("failed hash kv request", zap.String("local-member-id", idHex(h.n.ID())),
				zap.Int64("requested-revision", rev), zap.String("remote-peer-endpoint", u), zap.Error(err))
		}
		out = append(out, p)
	}
	return out
}

func (h *corruptHasher) LinearizableReadNotify(ctx context.Context) error {
	return h.s.LinearizableReadNotify(ctx)
}

func (h *corruptHasher) TriggerCorruptAlarm(ctx context.Context, id uint64) {
	if err := h.s.RaiseCorrupt(ctx, id); err != nil && !errors.Is(err, context.Canceled) {
		h.lg.Warn("raising the CORRUPT alarm failed", zap.String("member", idHex(id)), zap.Error(err))
	}
}
