package server

import (
	"context"
	"errors"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.uber.org/fx"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

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
// Followers tick but do not check. The peers' hashes are asked over the
// peer transport (its HashKV method), as etcd asks its peers'
// /members/hashkv over the peer URLs.
func startCorruptMonitor(lc fx.Lifecycle, c *config.Config, n *raftnode.Node, st *mvcc.Store, cl *membership.Cluster, s *api.Server, lg *zap.Logger) error {
	periodic := c.CorruptCheckTime.Std()
	compact := time.Duration(0)
	if c.FeatureEnabled("CompactHashCheck") {
		compact = c.CompactHashCheckTime.Std()
	}
	if periodic <= 0 && compact <= 0 {
		return nil
	}
	peerTLS, err := tlsconf.ForPeer(c, lg)
	if err != nil {
		return err
	}
	h := &corruptHasher{n: n, st: st, cl: cl, s: s, peerCreds: peerTLS.ClientCredentials(), lg: lg}
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
				lg.Info("enabled corruption checking", zap.String("local-member-id", membership.HexID(n.ID())), zap.Duration("interval", periodic))
				every(periodic, "server has stopped; stopping kv hash's monitor", func() {
					if _, err := cm.PeriodicCheck(ctx); err != nil && ctx.Err() == nil {
						lg.Warn("failed to check hash KV", zap.Error(err))
					}
				})
			}
			if compact > 0 {
				cc := corruptcheck.NewCompactChecker(lg, h)
				lg.Info("enabled compaction hash check", zap.String("local-member-id", membership.HexID(n.ID())), zap.Duration("interval", compact))
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
	n         *raftnode.Node
	st        *mvcc.Store
	cl        *membership.Cluster
	s         *api.Server
	peerCreds credentials.TransportCredentials
	lg        *zap.Logger
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

// PeerHashByRev asks each other member for HashKV at rev over the peer
// transport, each peer URL in turn, as etcd's getPeerHashKVs asks each peer
// URL's /members/hashkv (no client auth in the way); a member with no URL
// answering is listed with the last error.
func (h *corruptHasher) PeerHashByRev(ctx context.Context, rev int64) []corruptcheck.PeerHash {
	var out []corruptcheck.PeerHash
	for _, m := range h.cl.Members() {
		if m.ID == h.cl.Self() || len(m.PeerURLs) == 0 {
			continue
		}
		p := corruptcheck.PeerHash{ID: m.ID, Endpoints: m.PeerURLs}
		p.Resp, p.Err = peerHashKV(ctx, m.PeerURLs, h.cl.ID(), h.peerCreds, rev)
		if p.Err != nil {
			h.lg.Warn("failed hash kv request", zap.String("local-member-id", membership.HexID(h.n.ID())),
				zap.Int64("requested-revision", rev), zap.Strings("remote-peer-endpoints", m.PeerURLs), zap.Error(p.Err))
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
		h.lg.Warn("raising the CORRUPT alarm failed", zap.String("member", membership.HexID(id)), zap.Error(err))
	}
}

// peerHashKVAnswer answers a peer's HashKV over the peer transport (etcd's
// /members/hashkv handler): the request and answer are pb.HashKVRequest and
// pb.HashKVResponse, header revision the current one. A compacted or future
// revision is etcd's gRPC error.
func peerHashKVAnswer(st *mvcc.Store, cl *membership.Cluster, req []byte) ([]byte, error) {
	var r pb.HashKVRequest
	if err := proto.Unmarshal(req, &r); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "hashkv request: %v", err)
	}
	h, cur, compact, err := st.HashByRev(r.Revision)
	switch {
	case errors.Is(err, mvcc.ErrCompacted):
		return nil, rpctypes.ErrGRPCCompacted
	case errors.Is(err, mvcc.ErrFutureRev):
		return nil, rpctypes.ErrGRPCFutureRev
	case err != nil:
		return nil, status.Errorf(codes.Internal, "hashkv: %v", err)
	}
	hashRev := cur
	if r.Revision > 0 {
		hashRev = r.Revision
	}
	return proto.Marshal(&pb.HashKVResponse{
		Header:          &pb.ResponseHeader{ClusterId: cl.ID(), MemberId: cl.Self(), Revision: cur},
		Hash:            h,
		CompactRevision: compact,
		HashRevision:    hashRev,
	})
}
