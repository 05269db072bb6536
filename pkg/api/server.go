// Package api holds kvd's gRPC services (KV, Maintenance, Cluster): request
// validation, proposing through raft, waiting for the applied result, and
// reads from MVCC views.
package api

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-dev/kvd/pkg/alarms"
	"github.com/kvd-dev/kvd/pkg/apply"
	"github.com/kvd-dev/kvd/pkg/authz"
	"github.com/kvd-dev/kvd/pkg/fastpb"
	"github.com/kvd-dev/kvd/pkg/leasemgr"
	"github.com/kvd-dev/kvd/pkg/membership"
	"github.com/kvd-dev/kvd/pkg/mvcc"
	"github.com/kvd-dev/kvd/pkg/pluginhost"
	"github.com/kvd-dev/kvd/pkg/raftnode"
	"github.com/kvd-dev/kvd/pkg/watchhub"
)

// Raft is what the API needs from the raft driver.
type Raft interface {
	ID() uint64
	Propose(ctx context.Context, data []byte) error
	// ProposeAsync queues data for raft without waiting for its answer;
	// a refusal reaches dropped with id. A batchable proposal may share
	// its raft entry with others.
	ProposeAsync(ctx context.Context, data []byte, id uint64, dropped raftnode.Dropped, batchable bool) error
	// ReadIndex fails with an error wrapping context.DeadlineExceeded
	// when raft has not answered within the request timeout (the round's
	// timeout, shared by its callers: none pays for a timer of its own).
	ReadIndex(ctx context.Context) (uint64, error)
	Term() uint64
	Leader() uint64
	CommitIndex() uint64
	ProposeConfChange(ctx context.Context, cc raftpb.ConfChangeI) error
	Status(ctx context.Context) (raft.Status, error)
	TransferLeadership(ctx context.Context, to uint64) error
}

// Config are the API's limits.
type Config struct {
	MaxTxnOps       int
	MaxRequestBytes int
	// RequestTimeout bounds a request's wait for raft (etcd: 5s + 2 election timeouts).
	RequestTimeout time.Duration
	// ElectionTimeout paces the watch on leader loss of streams that
	// require a leader; default 1 s.
	ElectionTimeout time.Duration
	// QuotaBytes is reported as db_size_quota.
	QuotaBytes int64
	Version    string
	// ClientCertAuth makes a verified client certificate's CommonName the
	// caller when the request has no token (client-cert-auth).
	ClientCertAuth bool
	// BcryptCost hashes new passwords (bcrypt-cost).
	BcryptCost int
	// WarningApplyDuration: a Range or read-only Txn served from this
	// member that takes longer is logged, as etcd logs it
	// (warning-apply-duration; 0 logs every read, as etcd).
	WarningApplyDuration time.Duration
	// StrictReconfigCheck refuses member changes that would leave fewer
	// started voting members, or voting members this member has been
	// connected to for HealthInterval, than a quorum
	// (strict-reconfig-check, etcd's mayAddMember, mayRemoveMember and
	// mayPromoteMember); without it they are proposed as asked.
	StrictReconfigCheck bool
	// HealthInterval is how long a peer must have been connected to count
	// in that check; 0 is etcd's HealthInterval, negative counts a peer
	// as soon as its stream is up (tests).
	HealthInterval time.Duration
	// SnapshotDir holds the etcd-format file Maintenance.Snapshot builds
	// while it streams it (removed afterwards); "" is the OS's temp dir.
	SnapshotDir string
}

// Deps are the member's parts the API talks to.
type Deps struct {
	Raft     Raft
	Store    *mvcc.Store
	Registry *apply.Registry
	Applied  *apply.Applied
	Cluster  *membership.Cluster
	// PeerActiveSince returns since when the stream to a peer has been up,
	// the zero time if it is down (the transport's ActiveSince, for the
	// strict reconfiguration check); nil: no peer is connected.
	PeerActiveSince func(id uint64) time.Time
	// Now is the clock of the strict reconfiguration check; nil: time.Now.
	Now    func() time.Time
	Tracer trace.Tracer
	Logger *zap.Logger
	// Leases, if set, serves the Lease service.
	Leases *leasemgr.Manager
	// WatchHub, if set, serves the Watch service.
	WatchHub *watchhub.Hub
	// Auth, if set, serves the Auth service and checks callers.
	Auth *authz.Store
	// Plugins are the auth plugins (authenticators asked in Authenticate,
	// authorizers before a KV request is proposed or read); nil: none.
	Plugins *pluginhost.Host
	// Alarms is the replicated alarm set (Alarm, Status errors); Quota
	// is what Put, Txn and LeaseGrant are checked against first. nil: none.
	Alarms *alarms.Store
	Quota  *alarms.Quota
	// LeaderCreds chooses the credentials to reach another member's client
	// URL (lease and promote calls only the leader answers); nil: no TLS.
	LeaderCreds func(url string) (credentials.TransportCredentials, error)
	// SlowReads, if set, counts the reads logged as slow (etcd counts
	// them on etcd_server_slow_apply_total, with slow applies).
	SlowReads apply.Counter
	// SlowReadIndexes, if set, counts linearizable reads whose read index
	// round timed out (etcd_server_slow_read_indexes_total).
	SlowReadIndexes apply.Counter
	// ProposalsFailed, if set, counts proposals raft refused or that
	// timed out before they were applied (etcd_server_proposals_failed_total);
	// ReadIndexesFailed counts failed read index rounds
	// (etcd_server_read_indexes_failed_total).
	ProposalsFailed, ReadIndexesFailed apply.Counter
	// ClientRequests, if set, counts each call (stream or unary) by the
	// client's API version (etcd_server_client_requests_total). Called on
	// every call's goroutine: it must not block.
	ClientRequests func(stream bool, version string)
	// DefragDuration, if set, observes each Defragment's duration in
	// seconds, successful ones only as etcd's (etcd_disk_backend_defrag_duration_seconds);
	// SnapshotDuration each Maintenance.Snapshot's, from the read view to
	// the last byte sent (etcd_disk_backend_snapshot_duration_seconds).
	DefragDuration, SnapshotDuration Observer
	// LearnerPromotions, if set, counts the promotions this member made as
	// the leader (etcd_server_learner_promote_successes); a follower
	// forwards the call, and the leader counts it.
	LearnerPromotions apply.Counter
}

// Observer takes a measurement (a prometheus.Histogram is one).
type Observer interface{ Observe(float64) }

// Server implements the services.
type Server struct {
	cfg Config
	Deps
	ids idGen
	// tracing is false when no tracer is configured: then spans are not
	// even started (a noop span still costs a context per call).
	tracing bool
	leader  leaderConns
	// slow logs slow reads.
	slow apply.SlowLog
	// defrags counts the Defragment calls in progress.
	defrags atomic.Int32
}

// Defragmenting reports whether a Defragment is in progress
// (etcd_disk_defrag_inflight).
func (s *Server) Defragmenting() bool { return s.defrags.Load() > 0 }

// Close releases the connection to the leader, if one was opened.
func (s *Server) Close() { s.leader.close() }

var noSpan = trace.SpanFromContext(context.Background())

// span starts a span when tracing is on.
func (s *Server) span(ctx context.Context, name string) (context.Context, trace.Span) {
	if !s.tracing {
		return ctx, noSpan
	}
	return s.Tracer.Start(ctx, name)
}

// New returns the API server.
func New(cfg Config, d Deps) *Server {
	tracing := d.Tracer != nil
	if !tracing {
		d.Tracer = noop.NewTracerProvider().Tracer("kvd")
	}
	if d.Logger == nil {
		d.Logger = zap.NewNop()
	}
	if cfg.ElectionTimeout <= 0 {
		cfg.ElectionTimeout = time.Second
	}
	s := &Server{cfg: cfg, Deps: d, tracing: tracing}
	if d.Registry != nil {
		// The registry ends a proposal's wait when its caller gives up or
		// the request timeout passes: propose waits on the result alone.
		d.Registry.Sweep(cfg.RequestTimeout)
	}
	s.slow = apply.SlowLog{Logger: d.Logger, Limit: cfg.WarningApplyDuration, Slow: d.SlowReads}
	s.leader.creds = d.LeaderCreds
	s.ids.init(d.Raft.ID(), time.Now())
	return s
}

// Register adds the services to g.
func (s *Server) Register(g *grpc.Server) {
	pb.RegisterKVServer(g, &kvServer{s: s})
	pb.RegisterMaintenanceServer(g, &maintenanceServer{s: s})
	pb.RegisterClusterServer(g, &clusterServer{s: s})
	if s.Leases != nil {
		pb.RegisterLeaseServer(g, &leaseServer{s: s})
	}
	if s.WatchHub != nil {
		pb.RegisterWatchServer(g, &watchServer{s: s})
	}
	if s.Auth != nil {
		pb.RegisterAuthServer(g, &authServer{s: s})
	}
}

func (s *Server) header(rev int64) *pb.ResponseHeader {
	return &pb.ResponseHeader{
		ClusterId: s.Cluster.ID(),
		MemberId:  s.Raft.ID(),
		Revision:  rev,
		RaftTerm:  s.Raft.Term(),
	}
}

func (s *Server) fill(h *pb.ResponseHeader) {
	h.ClusterId = s.Cluster.ID()
	h.MemberId = s.Raft.ID()
	h.RaftTerm = s.Raft.Term()
}

// MaxGapBetweenApplyAndCommitIndex is how far the committed index may run
// ahead of the applied index before proposals are refused with
// ErrGRPCRequestTooManyRequests (etcd's maxGapBetweenApplyAndCommitIndex). It is
// the backpressure between commit and apply: a stalled or slow applier
// stops the writes that would pile up behind it, and it bounds what waits
// committed but unapplied (in raft's log and the applier's mailbox) to this
// many entries plus the proposals already past the check.
const MaxGapBetweenApplyAndCommitIndex = 5000

// batchable: the KV writes, the requests worth sharing a raft entry (the
// rest are rare, and an Authenticate's token names its entry's index).
func batchable(req *pb.InternalRaftRequest) bool {
	return req.Put != nil || req.DeleteRange != nil || req.Txn != nil
}

// propose sends req through raft and waits for its applied result.
func (s *Server) propose(ctx context.Context, req *pb.InternalRaftRequest) (apply.Result, error) {
	if s.Applied != nil && s.Raft.CommitIndex() > s.Applied.Index()+MaxGapBetweenApplyAndCommitIndex {
		return apply.Result{}, rpctypes.ErrGRPCRequestTooManyRequests
	}
	id := s.ids.next()
	// Who is calling travels in the entry: the applier checks it there.
	// Authenticate ignores any token, as etcd's: clients send their old,
	// perhaps dead, token along when they log in again; its header is the
	// identity an authenticator plugin vouched for, if one did.
	switch {
	case req.Authenticate != nil && req.Header != nil:
		req.Header.ID = id
	case req.Authenticate != nil:
		req.Header = &pb.RequestHeader{ID: id}
	default:
		req.Header = &pb.RequestHeader{ID: id}
		who, err := s.caller(ctx)
		if err != nil {
			return apply.Result{}, err
		}
		if !who.Anonymous() {
			authz.StampHeader(req.Header, who)
		}
	}
	data, err := marshalEntry(req)
	if err != nil {
		return apply.Result{}, err
	}
	if len(data) > s.cfg.MaxRequestBytes {
		return apply.Result{}, rpctypes.ErrGRPCRequestTooLarge
	}
	cctx, commit := s.span(ctx, "raft.commit")
	pctx, pspan := s.span(ctx, "raft.propose")
	var proposal context.Context
	if s.tracing {
		proposal = pctx
	}
	// req is the entry's request from here on: the applier uses it rather
	// than decode the entry, and nothing here changes it.
	wait := s.Registry.RegisterRequest(cctx, proposal, id, req)
	err = s.Raft.ProposeAsync(pctx, data, id, s.Registry, batchable(req))
	pspan.End()
	if err != nil {
		s.Registry.Cancel(id)
		commit.End()
		s.count(s.ProposalsFailed)
		return apply.Result{}, s.raftErr(ctx, err)
	}
	// The registry ends the wait if ctx ends or the request timeout passes
	// (Registry.Sweep), with Dropped set as for a proposal raft refused.
	res := wait.Result()
	if res.Dropped == nil {
		return res, nil
	}
	commit.End()
	s.count(s.ProposalsFailed)
	return apply.Result{}, s.raftErr(ctx, res.Dropped)
}

// marshalEntry encodes a request for the raft log; the KV writes by hand.
func marshalEntry(req *pb.InternalRaftRequest) ([]byte, error) {
	if data, ok := fastpb.MarshalEntry(nil, req); ok {
		return data, nil
	}
	return proto.Marshal(req)
}

// count increments c if it is set.
func (s *Server) count(c apply.Counter) {
	if c != nil {
		c.Inc()
	}
}

// linearize waits until this member has applied everything committed before
// the call: a read after it is linearizable.
func (s *Server) linearize(ctx context.Context) error {
	ctx, span := s.span(ctx, "raft.readindex")
	defer span.End()
	idx, err := s.Raft.ReadIndex(ctx)
	if err != nil {
		s.count(s.ReadIndexesFailed)
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			// The round outlived the request timeout (not the caller's
			// own deadline): as etcd, whose read loop gives up then.
			s.Logger.Warn("timed out waiting for read index response (local node might have slow network)",
				zap.Duration("timeout", s.cfg.RequestTimeout))
			s.count(s.SlowReadIndexes)
		}
		return s.raftErr(ctx, err)
	}
	if err := s.Applied.Wait(ctx, idx); err != nil {
		return s.raftErr(ctx, err)
	}
	return nil
}

// raftErr maps a failure to reach raft to etcd's error.
func (s *Server) raftErr(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, raft.ErrProposalDropped):
		if s.Raft.Leader() == raft.None {
			return rpctypes.ErrGRPCNoLeader
		}
		return rpctypes.ErrGRPCTimeout
	case errors.Is(err, context.Canceled):
		return rpctypes.ErrGRPCCanceled
	case errors.Is(err, context.DeadlineExceeded):
		if s.Raft.Leader() == raft.None {
			return rpctypes.ErrGRPCNoLeader
		}
		return rpctypes.ErrGRPCTimeout
	}
	return err
}

// idGen makes request IDs unique across members and restarts, like etcd's:
// member bits, then milliseconds at start, then a counter.
type idGen struct {
	prefix uint64
	suffix atomic.Uint64
}

func (g *idGen) init(member uint64, now time.Time) {
	g.prefix = member << 48
	g.suffix.Store(uint64(now.UnixMilli()) << 8 & (1<<48 - 1))
}

func (g *idGen) next() uint64 {
	return g.prefix | g.suffix.Add(1)&(1<<48-1)
}
