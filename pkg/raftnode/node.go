// Package raftnode is the raft driver actor: it owns the raft.RawNode, turns
// proposals, ticks and messages into Ready batches, and routes what raft asks
// for (with AsyncStorageWrites) to the WAL writer, the applier and peers.
package raftnode

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/actors"
	"github.com/kvd-dev/kvd/pkg/entrybatch"
	"github.com/kvd-dev/kvd/pkg/raftlog"
)

// maxBatchBufReuse bounds the leader's reused batch buffer: a larger batch
// gets a buffer of its own.
const maxBatchBufReuse = 1 << 20

// maxBatchBytes bounds the requests in one batched entry: more waits for
// the next entry. A request larger than this is proposed alone.
const maxBatchBytes = 512 << 10

// maxTurnProposals is how many queued proposals one driver turn takes.
const maxTurnProposals = 256

// ErrStopped is returned to callers once the driver has stopped.
var ErrStopped = errors.New("raftnode: stopped")

// Raft's flow-control limits (see New).
const (
	MaxSizePerMsg             = 1 << 20
	MaxInflightMsgs           = 512
	MaxUncommittedEntriesSize = 1 << 30
	MaxCommittedSizePerReady  = 16 << 20
)

// Config describes one member's raft.
type Config struct {
	ID uint64
	// Peers bootstraps a new cluster; empty when restarting or joining.
	Peers []raft.Peer
	// Applied is the index up to which the state machine is known applied at
	// start (the latest raft snapshot); raft redelivers entries after it.
	Applied        uint64
	TickInterval   time.Duration
	ElectionTicks  int
	HeartbeatTicks int
	// PreVote enables raft's pre-vote phase (etcd's pre-vote, default
	// true): a member that lost its leader first asks whether it could win
	// before raising its term.
	PreVote bool
	Log     *raftlog.Log
	Logger  *zap.Logger
	Tracer  trace.Tracer
	// ReadIndexTimeout, when positive, ends a read index round raft has
	// not answered in that time: its callers get ErrReadIndexTimeout (the
	// API's request timeout, as etcd's read loop gives up after it).
	ReadIndexTimeout time.Duration
	// Send delivers messages to other members; nil for a single member.
	Send func([]*raftpb.Message)
}

// Append is one MsgStorageAppend for the WAL writer, with the trace contexts
// of the proposals whose entries it carries.
type Append struct {
	Msg    *raftpb.Message
	Traces []context.Context
}

// errcPool holds proposals' answer channels: one per proposal would be an
// allocation per request. A channel goes back only once its answer is read.
var errcPool = sync.Pool{New: func() any { return make(chan error, 1) }}

type proposal struct {
	ctx  context.Context
	data []byte
	// errc receives raft's answer (Propose); or, with errc nil, dropped
	// hears of a refusal only (ProposeAsync).
	errc    chan error
	dropped Dropped
	id      uint64
	// batch: the proposal may share an entry with others (entrybatch),
	// when the node batches.
	batch bool
}

// Dropped hears of the proposals raft refused (ProposeAsync). It is
// called on the driver goroutine and must not block.
type Dropped interface {
	ProposalDropped(id uint64, err error)
}

type confRequest struct {
	cc    raftpb.ConfChangeI
	reply chan *raftpb.ConfState
}

// readRound is the callers sharing one read index request. They wait for
// done to close, then read index or err; a caller that gives up counts
// itself out of waiters. No per-caller channel or driver message: a round
// costs one allocation however many callers join it.
type readRound struct {
	done    chan struct{}
	index   uint64
	err     error
	waiters atomic.Int64
	started time.Time // when the driver first handed it to raft
	sent    time.Time // when its request was last handed to raft
}

// answer ends the round (driver goroutine).
func (r *readRound) answer(index uint64, err error) {
	r.index, r.err = index, err
	close(r.done)
}

// ErrReadIndexTimeout is the error of callers whose read index round raft
// did not answer within Config.ReadIndexTimeout. It wraps
// context.DeadlineExceeded.
var ErrReadIndexTimeout = fmt.Errorf("read index timed out: %w", context.DeadlineExceeded)

// ReadIndexRetry is how long a read index request waits for raft's answer
// before it is sent again (etcd's readIndexRetryTime). Raft drops a request
// without telling (no leader, the leader lost it, a message to the leader
// was lost in a partition); the retry keeps readers from waiting out their
// whole timeout for an answer that will not come.
const ReadIndexRetry = 500 * time.Millisecond

// Node is the raft driver. Its exported methods are safe from any goroutine;
// only Run touches the RawNode.
type Node struct {
	cfg Config
	lg  *zap.Logger
	rn  *raft.RawNode

	// The driver's queues and what bounds each. The driver never waits on
	// the WAL writer or the applier (they feed it back through stepc), so a
	// stalled writer or applier cannot stall raft, and their mailboxes are
	// bounded by raft's own flow control instead of by blocking.
	//
	// propc: a channel of 1024; callers wait when full. Readers join
	// nextRead (under readMu) and the first of a round wakes the driver
	// through readKick.
	propc    chan proposal
	readMu   sync.Mutex
	nextRead *readRound
	readKick chan struct{}
	confc    chan confRequest
	// stepc: peers' messages and the storage threads' responses. The driver
	// empties it every turn and no turn waits for another actor, so it holds
	// what arrives during one turn (peers are held to MaxInflightMsgs
	// appends of MaxSizePerMsg by the leader's flow control).
	stepc *actors.Inbox[*raftpb.Message]
	// ctlc runs closures on the driver goroutine: everything else that
	// touches the RawNode (reports from the transport, conf change
	// proposals, leadership transfer, status). Emptied every turn, as stepc.
	ctlc *actors.Inbox[func()]

	// Appends is the WAL writer's mailbox. Each entry in it is handed out
	// once (raft tracks what is in flight to storage), so it holds at most
	// raft's unstable entries: on a leader the uncommitted tail (at most
	// MaxUncommittedEntriesSize) plus what committed but is not yet
	// durable here, which the API's apply/commit gap check keeps within
	// 5000 entries; on a follower what the leader sent, at most
	// MaxInflightMsgs messages of MaxSizePerMsg.
	Appends *actors.Inbox[Append]
	// Applies is the applier's mailbox. Raft hands out committed entries
	// only while those not yet acknowledged applied (the applier delivers
	// the responses after applying) total less than
	// MaxCommittedSizePerReady, so a stalled applier holds at most that
	// many bytes here plus one entry; what is committed beyond waits in the
	// log, held to 5000 entries by the API's apply/commit gap check
	// (api.MaxGapBetweenApplyAndCommitIndex).
	Applies *actors.Inbox[*raftpb.Message]

	term          atomic.Uint64
	lead          atomic.Uint64
	leaderChanges atomic.Uint64
	commit        atomic.Uint64
	// heartbeats finds the leader's late heartbeats (driver goroutine);
	// lateHeartbeats counts them.
	heartbeats     heartbeatWatch
	lateHeartbeats atomic.Uint64
	leaderc        atomic.Pointer[chan struct{}] // closed when a leader is known

	// queued is one turn's proposals (driver goroutine); batching allows
	// batchable ones to share an entry (SetBatching); batchedEntries counts
	// the entries proposed as batches.
	queued         []proposal
	batchBuf       []byte // the leader's batches are built here (proposeBatch)
	batching       atomic.Bool
	batchedEntries atomic.Uint64
	// walPending counts the appends handed to the WAL writer and not yet
	// written; walDone wakes the driver when it falls to zero. While
	// batching, the driver leaves proposals queued during a WAL write:
	// they could not be written before it ends anyway, and taken together
	// after it they share an entry.
	walPending atomic.Int64
	walDone    chan struct{}

	// pendingTraces are the contexts of proposals made since the last Ready,
	// in proposal order: raft appends their entries in that order.
	pendingTraces []context.Context
	readSeq       uint64
	readers       map[uint64]*readRound
	// readWaiters counts the callers in ReadIndex, for tests and metrics.
	readWaiters atomic.Int64
	// readCheck is when readers were last swept for abandoned rounds,
	// timeouts and unanswered requests.
	readCheck time.Time
	// soleVoter is set when the configuration makes this member the only
	// voter; it then campaigns at once instead of after an election timeout.
	soleVoter bool

	// Conf-change gate (driver goroutine only). A leader's raft turns a conf
	// change into an empty entry while an earlier one is not yet applied
	// (its pendingConfIndex), and the proposer would wait in vain: the
	// applier answers clients before raft hears the entry was applied. So
	// the leader holds such proposals until raft's applied index reaches
	// lastConf, the last conf-change entry it appended (or its first entry
	// as leader, as raft's own rule).
	lastConf uint64
	heldConf []func() error

	stopped  chan struct{}
	stopOnce sync.Once
}

// New creates the RawNode from the log's recovered state.
func New(cfg Config) (*Node, error) {
	lg := cfg.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	rc := &raft.Config{
		ID:            cfg.ID,
		ElectionTick:  cfg.ElectionTicks,
		HeartbeatTick: cfg.HeartbeatTicks,
		Storage:       cfg.Log.Storage(),
		Applied:       cfg.Applied,
		// etcd's: 1 MiB appends, 512 in flight per follower.
		MaxSizePerMsg:   MaxSizePerMsg,
		MaxInflightMsgs: MaxInflightMsgs,
		// etcd's 1 GiB. It bounds the leader's uncommitted tail, which
		// only grows while a quorum is slow but not lost (CheckQuorum
		// steps a leader without one down within an election timeout,
		// and then proposals are dropped). Committed entries are bounded
		// separately: raft hands the applier at most
		// MaxCommittedSizePerReady unacknowledged bytes, and the API
		// refuses proposals once 5000 entries wait to be applied, so
		// this bound is the only one left for the uncommitted tail and
		// etcd's value keeps kvd refusing writes exactly when etcd does.
		MaxUncommittedEntriesSize: MaxUncommittedEntriesSize,
		// The most bytes of committed entries in the applier's mailbox
		// and being applied, not yet acknowledged (etcd leaves raft's
		// default, MaxSizePerMsg; kvd batches more per backend commit).
		MaxCommittedSizePerReady: MaxCommittedSizePerReady,
		CheckQuorum:              true,
		PreVote:                  cfg.PreVote,
		AsyncStorageWrites:       true,
		Logger:                   raftLogger{lg.Named("raft").Sugar()},
	}
	rn, err := raft.NewRawNode(rc)
	if err != nil {
		return nil, fmt.Errorf("create raft node: %w", err)
	}
	if len(cfg.Peers) > 0 {
		if err := rn.Bootstrap(cfg.Peers); err != nil {
			return nil, fmt.Errorf("bootstrap raft: %w", err)
		}
	}
	n := &Node{
		cfg:      cfg,
		lg:       lg,
		rn:       rn,
		propc:    make(chan proposal, 1024),
		walDone:  make(chan struct{}, 1),
		readKick: make(chan struct{}, 1),
		confc:    make(chan confRequest),
		stepc:    actors.NewInbox[*raftpb.Message](),
		ctlc:     actors.NewInbox[func()](),
		Appends:  actors.NewInbox[Append](),
		Applies:  actors.NewInbox[*raftpb.Message](),
		readers:  make(map[uint64]*readRound),
		stopped:  make(chan struct{}),
		// etcd's: twice the heartbeat interval.
		heartbeats: newHeartbeatWatch(2 * time.Duration(cfg.HeartbeatTicks) * cfg.TickInterval),
	}
	ch := make(chan struct{})
	n.leaderc.Store(&ch)
	return n, nil
}

// ID is this member's raft ID.
func (n *Node) ID() uint64 { return n.cfg.ID }

// Term is the current raft term.
func (n *Node) Term() uint64 { return n.term.Load() }

// Leader is the current leader's ID, 0 if none is known.
func (n *Node) Leader() uint64 { return n.lead.Load() }

// LeaderChanges counts the leaders this member has seen (etcd's
// etcd_server_leader_changes_seen_total).
func (n *Node) LeaderChanges() uint64 { return n.leaderChanges.Load() }

// LateHeartbeats counts the heartbeats this member, as the leader, sent to
// a peer more than two heartbeat intervals after the previous one
// (etcd_server_heartbeat_send_failures_total).
func (n *Node) LateHeartbeats() uint64 { return n.lateHeartbeats.Load() }

// CommitIndex is the highest index known committed.
func (n *Node) CommitIndex() uint64 { return n.commit.Load() }

// LeaderKnown returns a channel closed once a leader is known.
func (n *Node) LeaderKnown() <-chan struct{} { return *n.leaderc.Load() }

// Step delivers a message from a peer or from a local storage thread.
func (n *Node) Step(msgs ...*raftpb.Message) { n.stepc.Put(msgs...) }

// Propose hands data to raft. It returns once raft accepted or refused it
// (raft.ErrProposalDropped when there is no leader), not when it commits.
func (n *Node) Propose(ctx context.Context, data []byte) error {
	p := proposal{ctx: ctx, data: data, errc: errcPool.Get().(chan error)}
	select {
	case n.propc <- p:
	case <-ctx.Done():
		errcPool.Put(p.errc)
		return ctx.Err()
	case <-n.stopped:
		return ErrStopped
	}
	select {
	case err := <-p.errc:
		// The driver answers once: the channel is empty again.
		errcPool.Put(p.errc)
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stopped:
		return ErrStopped
	}
}

// ProposeAsync hands data to the driver and returns without waiting for
// raft's answer: a caller that waits for the entry to apply anyway learns
// of a refusal through dropped, with id, instead of parking once more per
// request to hear that raft accepted. It fails only if ctx ends or the
// driver stops before the proposal is queued. A batchable proposal may
// share its entry with others queued in the same turn, once SetBatching
// allows it: data is then one request of an entrybatch entry.
func (n *Node) ProposeAsync(ctx context.Context, data []byte, id uint64, dropped Dropped, batchable bool) error {
	select {
	case n.propc <- proposal{ctx: ctx, data: data, dropped: dropped, id: id, batch: batchable}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stopped:
		return ErrStopped
	}
}

// SetBatching lets batchable proposals share entries (on) or not. Turn
// it on only while every member of the configuration reads entrybatch
// entries: a member that does not stops at the first one.
func (n *Node) SetBatching(on bool) { n.batching.Store(on) }

// Batching reports whether batchable proposals may share entries now.
func (n *Node) Batching() bool { return n.batching.Load() }

// BatchedEntries is how many batched entries this member has handed to
// raft (raft may have refused some: no leader).
func (n *Node) BatchedEntries() uint64 { return n.batchedEntries.Load() }

// ReadIndex returns an index such that a read served once the applied index
// reaches it is linearizable. Concurrent callers share one raft round.
func (n *Node) ReadIndex(ctx context.Context) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	n.readWaiters.Add(1)
	defer n.readWaiters.Add(-1)
	n.readMu.Lock()
	r := n.nextRead
	first := r == nil
	if first {
		r = &readRound{done: make(chan struct{})}
		n.nextRead = r
	}
	r.waiters.Add(1)
	n.readMu.Unlock()
	if first {
		select {
		case n.readKick <- struct{}{}:
		default: // the driver is woken already; it takes the round then
		}
	}
	select {
	case <-r.done:
		return r.index, r.err
	case <-ctx.Done():
		r.waiters.Add(-1)
		return 0, ctx.Err()
	case <-n.stopped:
		return 0, ErrStopped
	}
}

// ApplyConfChange applies a committed conf change to raft; the applier calls
// it while applying the entry.
func (n *Node) ApplyConfChange(cc raftpb.ConfChangeI) (*raftpb.ConfState, error) {
	r := confRequest{cc: cc, reply: make(chan *raftpb.ConfState, 1)}
	select {
	case n.confc <- r:
	case <-n.stopped:
		return nil, ErrStopped
	}
	select {
	case cs := <-r.reply:
		return cs, nil
	case <-n.stopped:
		return nil, ErrStopped
	}
}

// Run is the driver loop.
func (n *Node) Run(ctx context.Context) error {
	defer n.stopOnce.Do(func() { close(n.stopped) })
	ticker := time.NewTicker(n.cfg.TickInterval)
	defer ticker.Stop()
	// A member restarting as the only voter (its configuration from a
	// snapshot, so no conf change sets soleVoter below) campaigns at once
	// too, as etcd's adjustTicks fast-forwards a single member: no
	// election timeout between a restart and serving.
	if voters := n.rn.Status().Config.Voters.IDs(); len(voters) == 1 {
		_, n.soleVoter = voters[n.cfg.ID]
	}
	n.campaignIfSole()
	if err := n.handleReady(); err != nil {
		return err
	}
	for {
		propc := n.propc
		if n.batching.Load() && n.walPending.Load() > 0 {
			propc = nil
		}
		select {
		case <-ctx.Done():
			return nil
		case now := <-ticker.C:
			n.rn.Tick()
			n.sweepReads(now)
		case <-n.walDone:
		case p := <-propc:
			n.queued = append(n.queued[:0], p)
			for len(n.queued) < maxTurnProposals {
				select {
				case p = <-n.propc:
					n.queued = append(n.queued, p)
					continue
				default:
				}
				break
			}
			n.proposeQueued(n.queued)
			clear(n.queued)
		case <-n.stepc.Ready():
			for _, m := range n.stepc.Take() {
				if m.GetType() == raftpb.MessageType_MsgProp && hasConfChange(m.GetEntries()) {
					// A follower's conf change, forwarded to this leader.
					_ = n.proposeConf(func() error { n.step(m); return nil })
					continue
				}
				n.step(m)
			}
		case <-n.ctlc.Ready():
			for _, f := range n.ctlc.Take() {
				f()
			}
		case <-n.readKick:
			n.startReadRound()
		case r := <-n.confc:
			cs := n.rn.ApplyConfChange(r.cc)
			r.reply <- cs
			n.soleVoter = len(cs.GetVoters()) == 1 && cs.GetVoters()[0] == n.cfg.ID
		}
		n.releaseConf()
		n.campaignIfSole()
		if err := n.handleReady(); err != nil {
			return err
		}
	}
}

// campaignIfSole campaigns while this member is the only voter and not
// yet the leader. Raft refuses while a conf change is not yet marked
// applied; the next turn tries again.
func (n *Node) campaignIfSole() {
	if n.soleVoter && n.lead.Load() != n.cfg.ID && n.rn.Status().RaftState == raft.StateFollower {
		_ = n.rn.Campaign()
	} else {
		n.soleVoter = false
	}
}

// proposeQueued hands one turn's proposals to raft in order: runs of
// batchable ones as one entry each while batching is on (up to
// maxBatchBytes of requests), the others one entry each.
func (n *Node) proposeQueued(ps []proposal) {
	batching := n.batching.Load()
	for len(ps) > 0 {
		k, size := 1, len(ps[0].data)
		if batching && ps[0].batch {
			for k < len(ps) && ps[k].batch && size+len(ps[k].data) <= maxBatchBytes {
				size += len(ps[k].data)
				k++
			}
		}
		if k == 1 {
			n.propose(ps[0])
		} else {
			n.proposeBatch(ps[:k], size)
		}
		ps = ps[k:]
	}
}

// proposeBatch proposes ps (batchable, so ProposeAsync's) as one entry.
func (n *Node) proposeBatch(ps []proposal, size int) {
	// A leader's raft copies a proposed entry into its log (appendEntry;
	// TestLeaderProposalIsCopied holds raft to it), so the leader builds
	// every batch in one buffer. A follower's raft forwards the proposal
	// as it is, so it gets a buffer of its own. lead is raft's own as of
	// the last Ready, and raft is the leader exactly when it is this
	// member (its lead is None in every other state).
	need := entrybatch.Size(len(ps), size)
	var buf []byte
	if need <= maxBatchBufReuse && n.lead.Load() == n.cfg.ID {
		if cap(n.batchBuf) < need {
			n.batchBuf = make([]byte, 0, max(need, 2*cap(n.batchBuf)))
		}
		buf = n.batchBuf[:0]
	} else {
		buf = make([]byte, 0, need)
	}
	data := entrybatch.Begin(buf)
	for _, p := range ps {
		data = entrybatch.Append(data, p.data)
	}
	err := n.rn.Propose(data)
	n.batchedEntries.Add(1)
	for _, p := range ps {
		if err != nil {
			p.dropped.ProposalDropped(p.id, err)
		} else if n.cfg.Tracer != nil && n.lead.Load() == n.cfg.ID {
			n.pendingTraces = append(n.pendingTraces, p.ctx)
		}
	}
}

func (n *Node) propose(p proposal) {
	err := n.rn.Propose(p.data)
	if err == nil && n.cfg.Tracer != nil && n.lead.Load() == n.cfg.ID {
		n.pendingTraces = append(n.pendingTraces, p.ctx)
	}
	switch {
	case p.errc != nil:
		p.errc <- err
	case err != nil:
		p.dropped.ProposalDropped(p.id, err)
	}
}

func (n *Node) handleReady() error {
	for n.rn.HasReady() {
		rd := n.rn.Ready()
		if rd.SoftState != nil {
			if rd.SoftState.Lead != n.lead.Load() {
				n.heartbeats.reset()
			}
			n.setLeader(rd.SoftState.Lead)
		}
		if hs := rd.HardState; hs != nil && !raft.IsEmptyHardState(hs) {
			n.term.Store(hs.GetTerm())
			n.commit.Store(hs.GetCommit())
		}
		for _, rs := range rd.ReadStates {
			n.answerReads(rs)
		}
		var remote []*raftpb.Message
		for _, m := range rd.Messages {
			switch m.GetTo() {
			case raft.LocalAppendThread:
				n.noteConfEntries(m.GetEntries(), rd.SoftState != nil && rd.SoftState.RaftState == raft.StateLeader)
				n.walPending.Add(1)
				n.Appends.Put(Append{Msg: m, Traces: n.takeTraces(m)})
			case raft.LocalApplyThread:
				n.Applies.Put(m)
			default:
				if m.GetType() == raftpb.MsgHeartbeat {
					n.heartbeatSent(m.GetTo())
				}
				remote = append(remote, m)
			}
		}
		if len(remote) > 0 && n.cfg.Send != nil {
			n.cfg.Send(remote)
		}
	}
	return nil
}

// appendsWritten is the WAL writer's report that k appends are written.
func (n *Node) appendsWritten(k int) {
	if n.walPending.Add(-int64(k)) == 0 {
		select {
		case n.walDone <- struct{}{}:
		default:
		}
	}
}

// heartbeatSent counts a late heartbeat to peer, and logs it as etcd does.
func (n *Node) heartbeatSent(peer uint64) {
	if late, by := n.heartbeats.sent(peer, time.Now()); late {
		n.lateHeartbeats.Add(1)
		n.lg.Warn("leader failed to send out heartbeat on time; took too long, leader is overloaded likely from slow disk",
			zap.String("to", fmt.Sprintf("%x", peer)), zap.Duration("heartbeat-interval", n.heartbeats.max/2),
			zap.Duration("expected-duration", n.heartbeats.max), zap.Duration("exceeded-duration", by))
	}
}

func (n *Node) step(m *raftpb.Message) {
	if err := n.rn.Step(m); err != nil && !errors.Is(err, raft.ErrStepLocalMsg) {
		n.lg.Debug("raft step", zap.Error(err), zap.Stringer("type", m.GetType()))
	}
}

// proposeConf runs propose now and returns its error, or holds it while raft
// would drop it and returns nil.
func (n *Node) proposeConf(propose func() error) error {
	if len(n.heldConf) > 0 || n.confPending() {
		n.heldConf = append(n.heldConf, propose)
		return nil
	}
	return propose()
}

// releaseConf proposes the oldest held conf change once raft takes it. One
// at a time: each makes the next wait for its own entry.
func (n *Node) releaseConf() {
	if len(n.heldConf) == 0 || n.confPending() {
		return
	}
	propose := n.heldConf[0]
	n.heldConf[0] = nil
	n.heldConf = n.heldConf[1:]
	if err := propose(); err != nil {
		// Its proposer was told it was accepted and times out, as it
		// would had raft dropped it.
		n.lg.Info("held conf change refused by raft", zap.Error(err))
	}
}

// confPending reports whether this member leads and raft would drop a conf
// change now. Off the leader nothing is held: raft forwards or refuses.
func (n *Node) confPending() bool {
	st := n.rn.BasicStatus()
	return st.RaftState == raft.StateLeader && n.lastConf > st.Applied
}

// noteConfEntries moves lastConf past the conf changes among appended
// entries. A new leader starts from its first entry, the empty one raft
// appends on election (raft's own rule), and forgets what it appended as a
// follower: that may have been overwritten.
func (n *Node) noteConfEntries(ents []*raftpb.Entry, becameLeader bool) {
	if becameLeader {
		n.lastConf = 0
		if len(ents) > 0 {
			n.lastConf = ents[0].GetIndex()
		}
	}
	for _, e := range ents {
		if isConfChange(e) {
			n.lastConf = max(n.lastConf, e.GetIndex())
		}
	}
}

func isConfChange(e *raftpb.Entry) bool {
	t := e.GetType()
	return t == raftpb.EntryType_EntryConfChange || t == raftpb.EntryType_EntryConfChangeV2
}

func hasConfChange(ents []*raftpb.Entry) bool {
	for _, e := range ents {
		if isConfChange(e) {
			return true
		}
	}
	return false
}

// takeTraces hands the pending proposal contexts to the append that carries
// their entries (the first append after they were proposed, on a leader).
func (n *Node) takeTraces(m *raftpb.Message) []context.Context {
	if len(n.pendingTraces) == 0 || len(m.GetEntries()) == 0 {
		return nil
	}
	t := n.pendingTraces
	n.pendingTraces = nil
	return t
}

func (n *Node) setLeader(lead uint64) {
	old := n.lead.Swap(lead)
	if old == lead {
		return
	}
	if lead != raft.None {
		n.leaderChanges.Add(1)
	}
	if lead != raft.None {
		ch := *n.leaderc.Load()
		select {
		case <-ch:
		default:
			close(ch)
		}
	} else {
		ch := make(chan struct{})
		n.leaderc.Store(&ch)
	}
	n.lg.Info("raft leader changed", zap.Uint64("from", old), zap.Uint64("to", lead))
}

// PendingReads is the number of ReadIndex callers waiting for raft's answer.
func (n *Node) PendingReads() int { return int(n.readWaiters.Load()) }

// Queues are the lengths of the mailboxes of the raft driver and of the
// WAL writer and applier it feeds.
type Queues struct {
	Step, Propose, Read, Control int // the driver's
	Appends                      int // the WAL writer's
	Applies                      int // the applier's
}

// QueueLengths returns how many messages wait in each mailbox now (for
// metrics: the inboxes take their locks).
func (n *Node) QueueLengths() Queues {
	return Queues{
		Step:    n.stepc.Len(),
		Propose: len(n.propc),
		Read:    n.queuedReads(),
		Control: n.ctlc.Len(),
		Appends: n.Appends.Len(),
		Applies: n.Applies.Len(),
	}
}

// startReadRound hands the round readers joined to raft; later callers
// join a new one.
func (n *Node) startReadRound() {
	n.readMu.Lock()
	r := n.nextRead
	n.nextRead = nil
	n.readMu.Unlock()
	if r == nil {
		return
	}
	n.readSeq++
	r.started = time.Now()
	r.sent = r.started
	n.readers[n.readSeq] = r
	n.sendReadIndex(n.readSeq)
}

// queuedReads is how many callers wait for the driver to start their round.
func (n *Node) queuedReads() int {
	n.readMu.Lock()
	defer n.readMu.Unlock()
	if n.nextRead == nil {
		return 0
	}
	return int(n.nextRead.waiters.Load())
}

func (n *Node) sendReadIndex(seq uint64) {
	var rctx [8]byte
	binary.BigEndian.PutUint64(rctx[:], seq)
	n.rn.ReadIndex(rctx[:])
}

func (n *Node) answerReads(rs raft.ReadState) {
	if len(rs.RequestCtx) != 8 {
		return
	}
	seq := binary.BigEndian.Uint64(rs.RequestCtx)
	// The index answers every batch requested before this one too (raft
	// read it after they were made), so a retried request answers all
	// older batches at once.
	for s, r := range n.readers {
		if s > seq {
			continue
		}
		r.answer(rs.Index, nil)
		delete(n.readers, s)
	}
}

// sweepReads runs at every tick, acting at most every ReadIndexRetry/5:
// it forgets rounds every caller gave up on, so readers holds only rounds
// someone waits for however long raft stays silent (a partition), ends
// rounds older than ReadIndexTimeout, and sends the newest unanswered
// request again once it has waited ReadIndexRetry. The newest alone: its
// answer answers every older round too, so a partition costs one request
// per ReadIndexRetry, not one per round.
func (n *Node) sweepReads(now time.Time) {
	if len(n.readers) == 0 || now.Sub(n.readCheck) < ReadIndexRetry/5 {
		return
	}
	n.readCheck = now
	var newest uint64
	for s, r := range n.readers {
		switch {
		case r.waiters.Load() == 0:
			delete(n.readers, s)
			continue
		case n.cfg.ReadIndexTimeout > 0 && now.Sub(r.started) >= n.cfg.ReadIndexTimeout:
			r.answer(0, ErrReadIndexTimeout)
			delete(n.readers, s)
			continue
		}
		newest = max(newest, s)
	}
	if newest == 0 {
		return
	}
	// The newest batch was sent last; once it has waited long enough, so
	// have all the others.
	if b := n.readers[newest]; now.Sub(b.sent) >= ReadIndexRetry {
		b.sent = now
		n.lg.Debug("read index not answered, retrying", zap.Uint64("request", newest), zap.Int("waiters", n.PendingReads()))
		n.sendReadIndex(newest)
	}
}
