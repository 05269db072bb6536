package apply

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
)

// Result is what applying one request produced.
type Result struct {
	Resp proto.Message
	Err  error
	// Dropped is raft's refusal of the proposal (Registry.ProposalDropped):
	// it was never appended, so it was not applied either.
	Dropped error
	// Compacted is closed when a physical compaction finished.
	Compacted <-chan struct{}
}

type waiter struct {
	ctx context.Context
	// req is the request as proposed, when the proposer registered it, so
	// the applier need not decode its own member's entries.
	req *pb.InternalRaftRequest
	// proposal is the context of the proposal's raft.propose span, nil
	// unless traced.
	proposal context.Context
	ch       chan Result
	// swept: a sweeping registry ends this wait (RegisterRequest's waiters);
	// sweep is Registry.sweeps when it was registered.
	swept bool
	sweep uint64
}

// sweepInterval is how often a sweeping registry looks for waiters whose
// context ended or whose request timeout passed.
const sweepInterval = 100 * time.Millisecond

// Registry hands results from the applier to the API call waiting on a
// proposal ID.
//
// A sweeping registry (Sweep) also ends the waits nobody will finish, so a
// caller waits on its result channel alone: a select over the result, its
// context and a timeout cost a put more than a microsecond, most of it
// locking three channels, one of them shared by every waiting call.
type Registry struct {
	mu sync.Mutex
	m  map[uint64]waiter
	// timeout is the request timeout of a sweeping registry (0: none).
	timeout time.Duration
	// sweepOn is set by Sweep; sweeping is whether a sweep is scheduled,
	// which it is while any waiter is registered.
	sweepOn, sweeping bool
	// sweeps counts the sweeps made, the clock of the request timeout.
	sweeps uint64
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{m: make(map[uint64]waiter)} }

// Register returns the channel that receives id's result. ctx travels to the
// applier for tracing.
func (r *Registry) Register(ctx context.Context, id uint64) <-chan Result {
	return r.RegisterTraced(ctx, nil, id)
}

// RegisterTraced is Register for a traced proposal: proposal, the context
// of its raft.propose span, travels to the applier too, which links the
// backend commit of the proposal's writes to it.
func (r *Registry) RegisterTraced(ctx, proposal context.Context, id uint64) <-chan Result {
	return r.register(ctx, proposal, id, nil, false)
}

// RegisterRequest is RegisterTraced that also keeps req, the request whose
// encoding the caller proposes with id, for the applier (Request). Neither
// the caller nor anyone else may change req afterwards. A sweeping registry
// ends the wait (Sweep): the caller may wait on the channel alone. Those of
// Register and RegisterTraced wait on their context themselves.
func (r *Registry) RegisterRequest(ctx, proposal context.Context, id uint64, req *pb.InternalRaftRequest) Wait {
	ch, _ := resultChans.Get().(chan Result)
	if ch == nil {
		ch = make(chan Result, 1)
	}
	r.add(ctx, proposal, id, req, true, ch)
	return Wait{ch: ch}
}

// resultChans recycles RegisterRequest's result channels (Wait.Result):
// a channel of a type with pointers is two allocations.
var resultChans sync.Pool

// Wait is RegisterRequest's pending result.
type Wait struct{ ch chan Result }

// Result waits for the result. Call it once, and not after Cancel: the
// channel goes back to be reused. The registry sends on a channel once,
// after it forgot the wait, so nobody sends on it after this receive.
func (w Wait) Result() Result {
	res := <-w.ch
	resultChans.Put(w.ch)
	return res
}

// C is the result's channel, for a caller that selects on it; the channel
// is not reused then.
func (w Wait) C() <-chan Result { return w.ch }

func (r *Registry) register(ctx, proposal context.Context, id uint64, req *pb.InternalRaftRequest, sweep bool) <-chan Result {
	ch := make(chan Result, 1)
	r.add(ctx, proposal, id, req, sweep, ch)
	return ch
}

func (r *Registry) add(ctx, proposal context.Context, id uint64, req *pb.InternalRaftRequest, sweep bool, ch chan Result) {
	r.mu.Lock()
	swept := sweep && r.sweepOn
	r.m[id] = waiter{ctx: ctx, req: req, proposal: proposal, ch: ch, swept: swept, sweep: r.sweeps}
	if swept && !r.sweeping {
		r.sweeping = true
		time.AfterFunc(sweepInterval, r.sweep)
	}
	r.mu.Unlock()
}

// Sweep makes the registry end, with a Result whose Dropped is the reason,
// the waits registered from now on with RegisterRequest whose context ended
// (its Err) or that last longer than timeout (context.DeadlineExceeded; 0:
// no timeout).
// Either happens within sweepInterval of its cause, a timeout never before
// timeout has passed since Register.
func (r *Registry) Sweep(timeout time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweepOn, r.timeout = true, timeout
}

// sweep is one look at the waiters; it schedules the next while any is
// left.
func (r *Registry) sweep() {
	type ended struct {
		ch  chan Result
		err error
	}
	var done []ended
	r.mu.Lock()
	r.sweeps++
	left := 0
	for id, w := range r.m {
		if !w.swept {
			continue
		}
		err := w.ctx.Err()
		// Sweep w.sweep+1 came after the registration, each later one
		// sweepInterval or more after the one before.
		if err == nil && r.timeout > 0 && time.Duration(r.sweeps-w.sweep-1)*sweepInterval >= r.timeout {
			err = context.DeadlineExceeded
		}
		if err != nil {
			delete(r.m, id)
			done = append(done, ended{w.ch, err})
			continue
		}
		left++
	}
	r.sweeping = left > 0
	if r.sweeping {
		time.AfterFunc(sweepInterval, r.sweep)
	}
	r.mu.Unlock()
	for _, e := range done {
		e.ch <- Result{Dropped: e.err}
	}
}

// Request is the request registered with id (RegisterRequest), or nil.
func (r *Registry) Request(id uint64) *pb.InternalRaftRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[id].req
}

// Cancel forgets id (the caller gave up).
func (r *Registry) Cancel(id uint64) {
	r.mu.Lock()
	delete(r.m, id)
	r.mu.Unlock()
}

// Context is the context id was registered with and its proposal's
// context (RegisterTraced), or nils: requests proposed by another member
// have no waiter here.
func (r *Registry) Context(id uint64) (ctx, proposal context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w, ok := r.m[id]; ok {
		return w.ctx, w.proposal
	}
	return nil, nil
}

// Trigger delivers id's result, if anyone waits for it.
func (r *Registry) Trigger(id uint64, res Result) {
	r.mu.Lock()
	w, ok := r.m[id]
	delete(r.m, id)
	r.mu.Unlock()
	if ok {
		w.ch <- res
	}
}

// ProposalDropped tells id's waiter, if any, that raft refused its
// proposal (raftnode.Dropped).
func (r *Registry) ProposalDropped(id uint64, err error) { r.Trigger(id, Result{Dropped: err}) }

// Applied publishes the applied index and lets readers wait for it.
type Applied struct {
	index atomic.Uint64
	mu    sync.Mutex
	next  chan struct{} // closed at the next publish
}

// NewApplied starts at index.
func NewApplied(index uint64) *Applied {
	a := &Applied{next: make(chan struct{})}
	a.index.Store(index)
	return a
}

// Index is the applied index.
func (a *Applied) Index() uint64 { return a.index.Load() }

func (a *Applied) publish(index uint64) {
	a.index.Store(index)
	a.mu.Lock()
	close(a.next)
	a.next = make(chan struct{})
	a.mu.Unlock()
}

// Wait returns once the applied index reaches index.
func (a *Applied) Wait(ctx context.Context, index uint64) error {
	for a.index.Load() < index {
		a.mu.Lock()
		ch := a.next
		a.mu.Unlock()
		if a.index.Load() >= index {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Len is the number of proposals waiting for their result (etcd's
// etcd_server_proposals_pending).
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.m)
}
