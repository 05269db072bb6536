package apply

import (
	"context"
	"errors"
	"fmt"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/raft/v3/raftpb"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-dev/kvd/pkg/actors"
	"github.com/kvd-dev/kvd/pkg/alarms"
	"github.com/kvd-dev/kvd/pkg/authz"
	"github.com/kvd-dev/kvd/pkg/entrybatch"
	"github.com/kvd-dev/kvd/pkg/fastpb"
	"github.com/kvd-dev/kvd/pkg/leasemgr"
	"github.com/kvd-dev/kvd/pkg/membership"
	"github.com/kvd-dev/kvd/pkg/mvcc"
)

// maxBatchBytes bounds the entry bytes applied in one backend transaction
// (Badger caps a transaction's size; bolt's dirty pages grow with it).
const maxBatchBytes = 8 << 20

// Raft is what the applier needs from the raft driver.
type Raft interface {
	ApplyConfChange(raftpb.ConfChangeI) (*raftpb.ConfState, error)
	Deliver([]*raftpb.Message)
}

// Snapshotter records raft snapshots once the backend holds the state,
// keeping the last keep entries before index for slow followers.
type Snapshotter interface {
	CreateSnapshotKeeping(index uint64, cs *raftpb.ConfState, data []byte, keep uint64) error
}

// Config wires an Applier.
type Config struct {
	Store    *mvcc.Store
	Raft     Raft
	Inbox    *actors.Inbox[*raftpb.Message]
	Registry *Registry
	Applied  *Applied
	// Snapshots and SyncBackend are used every SnapshotCount applied
	// requests (etcd's "committed transactions": a batched entry counts
	// each request it carries, any other entry one): the backend is synced,
	// then the WAL may be truncated behind it. The snapshot keeps the
	// entries that carried about the last SnapshotCatchup requests, etcd's
	// snapshot-catchup-entries, whose entries hold one request each.
	Snapshots       Snapshotter
	SyncBackend     func() error
	SnapshotCount   uint64
	SnapshotCatchup uint64
	// SnapshotIndex and ConfState describe the latest raft snapshot at start.
	SnapshotIndex uint64
	ConfState     *raftpb.ConfState
	// Leases, if set, is changed by LeaseGrant and LeaseRevoke and follows
	// which keys each lease holds; nil: no leases exist.
	Leases *leasemgr.Manager
	// Auth, if set, is the auth store: Auth requests change it and every
	// request is checked against it; nil: no auth.
	Auth *authz.Store
	// Members, if set, is the member list conf changes and attribute
	// updates change; nil: conf changes only reach raft.
	Members *membership.Cluster
	// Alarms, if set, is the alarm set: Alarm requests change it, and its
	// NOSPACE and CORRUPT alarms refuse requests (alarm.go).
	Alarms *alarms.Store
	// Quota, if set, is checked as each put, txn and lease grant applies;
	// one over it raises NOSPACE through RaiseNoSpace (which must not
	// block: it proposes from another goroutine).
	Quota        *alarms.Quota
	RaiseNoSpace func()
	// Events, if set, receives every event of a batch, in revision order,
	// once the batch is visible to readers (the watch hub's feed). The slice
	// is the callee's.
	Events func([]*mvccpb.Event)
	Tracer trace.Tracer
	Logger *zap.Logger
	// WarningApplyDuration: an apply that takes longer is logged
	// (warning-apply-duration; 0 logs every apply, as etcd).
	WarningApplyDuration time.Duration
	// SlowApplies, if set, counts the applies logged as slow
	// (etcd_server_slow_apply_total).
	SlowApplies Counter
}

// Applier is the actor that applies committed entries to the MVCC store, one
// mvcc.Apply per batch (the store commits its backend behind, in bigger
// batches), and hands each result to its waiting caller.
type Applier struct {
	cfg      Config
	lg       *zap.Logger
	slow     SlowLog
	lastSnap uint64
	// sinceSnap counts the requests applied since lastSnap (an entry that
	// is not a batch counts one), to snapshot every SnapshotCount.
	sinceSnap uint64
	// raftIndex is the newest index of raft's log the applier has been
	// given (an entry or an installed snapshot); confState is raft's
	// configuration there. It can trail the backend's consistent index:
	// after a crash between installing a leader's snapshot and saving it to
	// the WAL, the backend is ahead of the log, and a snapshot of the log
	// can only be taken where the log is.
	raftIndex uint64
	confState *raftpb.ConfState
	results   []pending
	events    []*mvccpb.Event
	// pre is applyTxnLike's precheck, reused (one per request was two
	// allocations); leaseExists is Leases.Exists, bound at first use.
	pre         precheck
	leaseExists func(int64) bool
	// fatal is set when a request failed after it had written: the batch
	// cannot be committed.
	fatal    error
	installc chan installReq
}

type installReq struct {
	snap *raftpb.Snapshot // nil: a snapshot point (SnapshotPoint)
	fn   func() error
	done chan error
}

type pending struct {
	id  uint64
	res Result
}

// New returns an applier.
func New(cfg Config) *Applier {
	lg := cfg.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	cs := cfg.ConfState
	if cs == nil {
		cs = &raftpb.ConfState{}
	}
	slow := SlowLog{Logger: lg, Limit: cfg.WarningApplyDuration, Slow: cfg.SlowApplies}
	return &Applier{cfg: cfg, lg: lg, slow: slow, lastSnap: cfg.SnapshotIndex, raftIndex: cfg.SnapshotIndex, confState: cs, installc: make(chan installReq)}
}

// Install runs install on the applier once everything handed to it before
// is applied, and then takes snap as the state applied: the way a raft
// snapshot from the leader replaces the state machine (install swaps the
// backend). It waits for the result; ctx bounds only the wait to start.
func (a *Applier) Install(ctx context.Context, snap *raftpb.Snapshot, install func() error) error {
	r := installReq{snap: snap, fn: install, done: make(chan error, 1)}
	select {
	case a.installc <- r:
	case <-ctx.Done():
		return ctx.Err()
	}
	return <-r.done
}

// SnapshotPoint runs fn on the applier between two batches, with the
// configuration as of everything applied so far: what a leader sending a raft
// snapshot needs to describe its backend consistently (etcd rewrites the
// snapshot message the same way). fn must not block for long.
func (a *Applier) SnapshotPoint(ctx context.Context, fn func(cs *raftpb.ConfState) error) error {
	r := installReq{fn: func() error { return fn(proto.Clone(a.confState).(*raftpb.ConfState)) }, done: make(chan error, 1)}
	select {
	case a.installc <- r:
	case <-ctx.Done():
		return ctx.Err()
	}
	return <-r.done
}

func (a *Applier) install(r installReq) error {
	if r.snap == nil {
		return r.fn()
	}
	if msgs := a.cfg.Inbox.Take(); len(msgs) > 0 {
		if err := a.applyMessages(msgs); err != nil {
			return err
		}
	}
	if err := r.fn(); err != nil {
		return err
	}
	md := r.snap.GetMetadata()
	a.confState = md.GetConfState()
	a.lastSnap, a.raftIndex = md.GetIndex(), md.GetIndex()
	a.sinceSnap = 0
	if md.GetIndex() > a.cfg.Applied.Index() {
		a.cfg.Applied.publish(md.GetIndex())
	}
	a.lg.Info("installed raft snapshot", zap.Uint64("index", md.GetIndex()), zap.Uint64("term", md.GetTerm()))
	return nil
}

// Run is the applier loop.
func (a *Applier) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case r := <-a.installc:
			err := a.install(r)
			r.done <- err
			if err != nil && r.snap != nil {
				return fmt.Errorf("install raft snapshot at %d: %w", r.snap.GetMetadata().GetIndex(), err)
			}
			continue
		case <-a.cfg.Inbox.Ready():
		}
		msgs := a.cfg.Inbox.Take()
		if len(msgs) == 0 {
			continue
		}
		if err := a.applyMessages(msgs); err != nil {
			return err
		}
	}
}

func (a *Applier) applyMessages(msgs []*raftpb.Message) error {
	var ents []*raftpb.Entry
	for _, m := range msgs {
		ents = append(ents, m.GetEntries()...)
	}
	for len(ents) > 0 {
		n, size := 0, 0
		for n < len(ents) && (n == 0 || size+len(ents[n].GetData()) <= maxBatchBytes) {
			size += len(ents[n].GetData())
			n++
		}
		if err := a.applyEntries(ents[:n]); err != nil {
			return err
		}
		ents = ents[n:]
	}
	for _, m := range msgs {
		a.cfg.Raft.Deliver(m.GetResponses())
	}
	return a.maybeSnapshot()
}

func (a *Applier) applyEntries(ents []*raftpb.Entry) error {
	ci := a.cfg.Store.ConsistentIndex()
	last := ents[len(ents)-1]
	a.results = a.results[:0]
	a.events = nil
	err := a.cfg.Store.Apply(func(b *mvcc.Batch) error {
		for _, e := range ents {
			switch e.GetType() {
			case raftpb.EntryConfChange, raftpb.EntryConfChangeV2:
				// Raft's configuration is rebuilt from the log on restart, so
				// conf changes are applied to raft even when already in the
				// backend; the member list only when not.
				if err := a.applyConfChange(b, e, e.GetIndex() > ci); err != nil {
					return err
				}
				a.sinceSnap++
				continue
			}
			if !entrybatch.Is(e.GetData()) {
				a.sinceSnap++
				if e.GetIndex() <= ci || len(e.GetData()) == 0 {
					continue
				}
				if err := a.applyData(b, e.GetIndex(), e.GetData()); err != nil {
					return err
				}
				continue
			}
			if e.GetIndex() <= ci {
				// Applied before a restart; still in the log since lastSnap.
				n, err := entrybatch.Count(e.GetData())
				if err != nil {
					return fmt.Errorf("entry %d: %w", e.GetIndex(), err)
				}
				a.sinceSnap += uint64(max(n, 1))
				continue
			}
			n := 0
			err := entrybatch.Split(e.GetData(), func(data []byte) error {
				n++
				return a.applyData(b, e.GetIndex(), data)
			})
			if err != nil {
				return fmt.Errorf("entry %d: %w", e.GetIndex(), err)
			}
			a.sinceSnap += uint64(max(n, 1))
		}
		if last.GetIndex() > ci {
			b.SetConsistentIndex(last.GetIndex(), last.GetTerm())
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("apply entries %d..%d: %w", ents[0].GetIndex(), last.GetIndex(), err)
	}
	a.raftIndex = last.GetIndex()
	if last.GetIndex() > a.cfg.Applied.Index() {
		a.cfg.Applied.publish(last.GetIndex())
	}
	if a.cfg.Events != nil && len(a.events) > 0 {
		a.cfg.Events(a.events)
	}
	for _, p := range a.results {
		a.cfg.Registry.Trigger(p.id, p.res)
	}
	return nil
}

// applyData applies one request of the entry at index (the entry's data,
// or one request of a batched entry) and queues its result.
func (a *Applier) applyData(b *mvcc.Batch, index uint64, data []byte) error {
	req, err := a.request(index, data)
	if err != nil {
		return err
	}
	id := req.GetHeader().GetID()
	if id == 0 {
		id = req.ID
	}
	res := a.applyRequest(b, req, index)
	if a.fatal != nil {
		return a.fatal
	}
	a.results = append(a.results, pending{id: id, res: res})
	return nil
}

// request is the request encoded in data, from the entry at index: the one
// this member proposed, kept in the wait registry, or else decoded (another
// member's proposal, a replay after a restart, a proposal whose caller gave
// up); KV writes with pkg/fastpb, anything else with protobuf-go.
func (a *Applier) request(index uint64, data []byte) (*pb.InternalRaftRequest, error) {
	if id := headerID(data); id != 0 {
		if req := a.cfg.Registry.Request(id); req != nil {
			return req, nil
		}
	}
	req := &pb.InternalRaftRequest{}
	if fastpb.Unmarshal(data, req) {
		return req, nil
	}
	if err := proto.Unmarshal(data, req); err != nil {
		return nil, fmt.Errorf("decode entry %d: %w", index, err)
	}
	return req, nil
}

// headerID reads header.ID (fields 100, then 1) of an encoded
// InternalRaftRequest without decoding the rest; 0 if it has none or the
// encoding is bad (then the full decode reports it).
func headerID(data []byte) uint64 {
	hdr, ok := protoField(data, 100, protowire.BytesType)
	if !ok {
		return 0
	}
	if hdr, n := protowire.ConsumeBytes(hdr); n >= 0 {
		if id, ok := protoField(hdr, 1, protowire.VarintType); ok {
			if v, n := protowire.ConsumeVarint(id); n >= 0 {
				return v
			}
		}
	}
	return 0
}

// protoField returns the encoding of the first field num of type typ in
// msg, from its value on; false if there is none or msg is malformed first.
func protoField(msg []byte, num protowire.Number, typ protowire.Type) ([]byte, bool) {
	for len(msg) > 0 {
		n2, t2, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return nil, false
		}
		msg = msg[n:]
		if n2 == num && t2 == typ {
			return msg, true
		}
		if n = protowire.ConsumeFieldValue(n2, t2, msg); n < 0 {
			return nil, false
		}
		msg = msg[n:]
	}
	return nil, false
}

func (a *Applier) applyConfChange(b *mvcc.Batch, e *raftpb.Entry, fresh bool) error {
	var cc raftpb.ConfChangeI
	if e.GetType() == raftpb.EntryConfChange {
		c := &raftpb.ConfChange{}
		if err := proto.Unmarshal(e.GetData(), c); err != nil {
			return fmt.Errorf("decode conf change %d: %w", e.GetIndex(), err)
		}
		if fresh && a.cfg.Members != nil {
			err := a.applyMemberChange(b, c)
			if err != nil {
				a.lg.Warn("conf change refused", zap.Uint64("index", e.GetIndex()), zap.Error(err))
			}
			if c.GetId() != 0 {
				a.results = append(a.results, pending{id: c.GetId(), res: Result{Err: err}})
			}
		}
		cc = c
	} else {
		c := &raftpb.ConfChangeV2{}
		if err := proto.Unmarshal(e.GetData(), c); err != nil {
			return fmt.Errorf("decode conf change %d: %w", e.GetIndex(), err)
		}
		cc = c
	}
	cs, err := a.cfg.Raft.ApplyConfChange(cc)
	if err != nil {
		return err
	}
	a.confState = cs
	return nil
}

func (a *Applier) maybeSnapshot() error {
	applied := a.raftIndex
	// sinceSnap >= applied-lastSnap: every entry counts at least one.
	if a.cfg.Snapshots == nil || a.cfg.SnapshotCount == 0 || a.sinceSnap < a.cfg.SnapshotCount || applied <= a.lastSnap {
		return nil
	}
	// The WAL is truncated behind the snapshot, so the backend must hold
	// everything up to it durably first.
	if a.cfg.SyncBackend != nil {
		if err := a.cfg.SyncBackend(); err != nil {
			return fmt.Errorf("sync backend before snapshot: %w", err)
		}
	}
	keep := catchUpEntries(a.cfg.SnapshotCatchup, applied-a.lastSnap, a.sinceSnap)
	if err := a.cfg.Snapshots.CreateSnapshotKeeping(applied, a.confState, nil, keep); err != nil {
		return fmt.Errorf("create raft snapshot at %d: %w", applied, err)
	}
	a.lastSnap, a.sinceSnap = applied, 0
	a.lg.Info("raft snapshot created", zap.Uint64("index", applied))
	return nil
}

// catchUpEntries is how many entries hold about catchUp requests, when the
// last ents entries held reqs (batched entries hold several): the entries
// etcd's snapshot-catchup-entries keeps, one request each.
func catchUpEntries(catchUp, ents, reqs uint64) uint64 {
	if reqs <= ents || ents == 0 {
		return catchUp
	}
	return (catchUp*ents + reqs - 1) / reqs
}

func (a *Applier) applyRequest(b *mvcc.Batch, req *pb.InternalRaftRequest, index uint64) (res Result) {
	span := a.startSpan(b, req)
	defer span.End()
	defer a.slow.Apply(time.Now(), req, &res)
	if req.Alarm != nil {
		return a.applyAlarm(b, req.Alarm)
	}
	if err := a.alarmRefusal(req); err != nil {
		return Result{Err: err}
	}
	if a.overQuota(req) {
		return a.quotaExceeded(a.applyChecked(b, req, index))
	}
	return a.applyChecked(b, req, index)
}

// applyChecked applies a request the raised alarms let through.
func (a *Applier) applyChecked(b *mvcc.Batch, req *pb.InternalRaftRequest, index uint64) Result {
	if a.cfg.Auth != nil {
		if authz.IsAuthRequest(req) {
			return a.applyAuth(b, req, index)
		}
		if err := a.checkRequest(req); err != nil {
			return Result{Err: err}
		}
	}
	switch {
	case req.Put != nil:
		return a.applyTxnLike(b, func(t *mvcc.TxnWrite, p *precheck) (proto.Message, error) {
			if err := p.checkPut(req.Put); err != nil {
				return nil, err
			}
			return put(t, req.Put, &txnState{})
		})
	case req.DeleteRange != nil:
		return a.applyTxnLike(b, func(t *mvcc.TxnWrite, _ *precheck) (proto.Message, error) {
			return deleteRange(t, req.DeleteRange, &txnState{})
		})
	case req.Txn != nil:
		return a.applyTxnLike(b, func(t *mvcc.TxnWrite, p *precheck) (proto.Message, error) {
			path := txnPath(t, req.Txn)
			if _, err := p.txn(req.Txn, path); err != nil {
				return nil, err
			}
			resp, _, err := execTxn(t, req.Txn, path, &txnState{})
			if err != nil {
				return nil, err
			}
			resp.Header.Revision = t.Rev()
			return resp, nil
		})
	case req.LeaseGrant != nil && a.cfg.Leases != nil:
		return a.applyLeaseGrant(b, req.LeaseGrant)
	case req.LeaseRevoke != nil && a.cfg.Leases != nil:
		return a.applyLeaseRevoke(b, req.LeaseRevoke)
	case req.LeaseCheckpoint != nil && a.cfg.Leases != nil:
		return a.applyLeaseCheckpoint(b, req.LeaseCheckpoint)
	case req.ClusterMemberAttrSet != nil:
		return a.applyAttrSet(b, req.ClusterMemberAttrSet)
	case req.Compaction != nil:
		done, err := b.Compact(req.Compaction.Revision)
		if err != nil {
			return Result{Err: ToGRPC(err)}
		}
		return Result{Resp: &pb.CompactionResponse{Header: &pb.ResponseHeader{Revision: b.Rev()}}, Compacted: done}
	}
	return Result{Err: errors.New("kvd: unsupported request")}
}

// applyTxnLike runs one request in one write txn. A request that fails its
// checks writes nothing; one that fails after writing would leave the batch
// half applied, so that is fatal for the batch (precheck rules it out).
func (a *Applier) applyTxnLike(b *mvcc.Batch, fn func(*mvcc.TxnWrite, *precheck) (proto.Message, error)) Result {
	t := b.Write()
	defer t.End()
	if a.leaseExists == nil && a.cfg.Leases != nil {
		a.leaseExists = a.cfg.Leases.Exists
	}
	p := &a.pre
	puts, dels := p.puts, p.dels[:0]
	clear(puts)
	clear(p.dels) // the last request's keys, not kept alive by the reuse
	*p = precheck{r: t, compactRev: a.cfg.Store.CompactRev(), leaseExists: a.leaseExists, puts: puts, dels: dels}
	resp, err := fn(t, p)
	if err != nil {
		if len(t.Events()) > 0 {
			a.fatal = fmt.Errorf("request failed after writing, batch not committed: %w", err)
		}
		return Result{Err: err}
	}
	if a.cfg.Leases != nil {
		a.cfg.Leases.Attach(t.Events())
	}
	if a.cfg.Events != nil {
		a.events = append(a.events, t.Events()...)
	}
	return Result{Resp: resp}
}

// startSpan ends the request's "raft.commit" span (the API registered its
// context) and starts its "apply" span. The batch links the proposal, so
// the backend commit that makes its writes durable links to it.
func (a *Applier) startSpan(b *mvcc.Batch, req *pb.InternalRaftRequest) trace.Span {
	var ctx, proposal context.Context
	if a.cfg.Tracer != nil {
		ctx, proposal = a.cfg.Registry.Context(req.GetHeader().GetID())
	}
	if ctx == nil {
		return trace.SpanFromContext(context.Background())
	}
	trace.SpanFromContext(ctx).End()
	if proposal != nil {
		b.Link(trace.SpanContextFromContext(proposal))
	}
	_, span := a.cfg.Tracer.Start(ctx, "apply")
	return span
}

// ToGRPC maps mvcc's and leasemgr's errors to the ones etcd sends on the
// wire.
func ToGRPC(err error) error {
	switch {
	case errors.Is(err, mvcc.ErrCompacted):
		return rpctypes.ErrGRPCCompacted
	case errors.Is(err, mvcc.ErrFutureRev):
		return rpctypes.ErrGRPCFutureRev
	case errors.Is(err, leasemgr.ErrNotFound):
		return rpctypes.ErrGRPCLeaseNotFound
	case errors.Is(err, leasemgr.ErrExists):
		return rpctypes.ErrGRPCLeaseExist
	case errors.Is(err, leasemgr.ErrTTLTooLarge):
		return rpctypes.ErrGRPCLeaseTTLTooLarge
	}
	return err
}
