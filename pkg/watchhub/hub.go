// Package watchhub is kvd's watch hub: the actor that matches the applier's
// events to watchers and hands them, in order, to the streams that read
// them, etcd's watchable store.
//
// Watchers are in one of three states, as in etcd:
//   - synced: every event up to the hub's revision was handed over; new
//     events are matched against the synced group as the applier reports
//     them (single keys by map, ranges by an interval treap);
//   - unsynced: behind the hub's revision (a start revision in the past, or a
//     victim that caught up with its backlog too late); it catches up from
//     the store in bounded batches, then joins the synced group;
//   - victim: its stream's buffer was full when a response was due; the hub
//     keeps that one response and retries it later, so a slow reader never
//     blocks the applier or any other watcher and never loses an event.
//
// Every method of Hub and Stream only enqueues to the hub's mailbox; the hub
// goroutine (Run) owns all watcher state.
package watchhub

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/actors"
	"github.com/kvd-dev/kvd/pkg/mvcc"
)

// Errors carried in CancelReason of a refused watch; their text is etcd's.
var (
	ErrDuplicateID = errors.New("mvcc: duplicate watch ID provided on the WatchStream")
	ErrEmptyRange  = errors.New("mvcc: watcher range is empty")
	// ErrCompacted is etcd's wire text for a negative start revision.
	ErrCompacted = errors.New("etcdserver: mvcc: required revision has been compacted")
)

// InvalidID is the watch ID of responses that belong to no watcher: a
// refused create and a stream-wide progress notification (clientv3's
// InvalidWatchID).
const InvalidID = -1

// Defaults of Config.
const (
	DefaultStreamBuffer  = 128
	DefaultSyncBatch     = 1000
	DefaultRetryInterval = 10 * time.Millisecond
	// DefaultProgressInterval is etcd's watch-progress-notify-interval.
	DefaultProgressInterval = 10 * time.Minute
	// DefaultMaxBacklog bounds the applied events waiting for the hub.
	DefaultMaxBacklog = 100000
)

// Config configures a Hub.
type Config struct {
	Store *mvcc.Store
	// Logger may be nil.
	Logger *zap.Logger
	// StreamBuffer is how many responses a stream holds for its reader;
	// past that its watchers become victims (etcd's chanBufLen).
	StreamBuffer int
	// SyncBatch bounds the events one catch-up round reads from the store
	// (whole revisions: a txn is never split).
	SyncBatch int
	// RetryInterval is how often victims and blocked control responses are
	// retried.
	RetryInterval time.Duration
	// ProgressInterval is how often a watcher that asked for progress
	// notifications and got no events gets an empty response; the API
	// drives it (ProgressInterval, Stream.Progress).
	ProgressInterval time.Duration
	// Metrics, if set, is told about watchers and events.
	Metrics Metrics
	// MaxBacklog is how many applied events may wait for the hub before
	// Notify blocks the applier until the hub took them: the hub's memory
	// stays bounded when it falls behind (events are never dropped).
	MaxBacklog int
}

// Metrics receives the hub's counts (etcd's watch metrics).
type Metrics interface {
	// Watchers is added +1 or -1 as watchers come and go.
	Watchers(delta int)
	// Streams is added +1 or -1 as streams come and go.
	Streams(delta int)
	// EventsSent counts events handed to streams.
	EventsSent(n int)
	// Slow reports the current numbers of unsynced and victim watchers.
	Slow(unsynced, victims int)
}

// WatchRequest creates a watcher on a stream.
type WatchRequest struct {
	// ID is the client's watch ID; 0 lets the hub pick the lowest free one.
	ID int64
	// Key and End select the keys, as etcd's watcher: End nil watches Key
	// only, End empty and non-nil watches every key >= Key, otherwise
	// [Key, End).
	Key, End []byte
	// StartRev is the first revision to deliver; 0 means after the current
	// one.
	StartRev int64
	NoPut    bool
	NoDelete bool
	PrevKV   bool
	// Refuse, if set, is why the API refused the create (permission): it
	// is answered Created and Canceled with this reason, in order with the
	// stream's other creates.
	Refuse string
}

// Response is what a stream's reader gets, in order. Events and their
// KeyValues are shared between watchers: readers must not modify them.
type Response struct {
	WatchID int64
	// Revision is the header revision: for events, every event up to it
	// that the watcher selects was delivered.
	Revision int64
	Events   []*mvccpb.Event
	Created  bool
	Canceled bool
	// CompactRevision is set when the watcher was canceled because the
	// revisions it needs were compacted.
	CompactRevision int64
	CancelReason    string
}

type watchState int8

const (
	stateSynced watchState = iota
	stateUnsynced
	stateVictim
	// stateCompacted: canceled because its next revision was compacted.
	// As in etcd it keeps its ID on the stream until the client cancels it.
	stateCompacted
)

type watcher struct {
	id       int64
	s        *Stream
	key, end []byte
	startRev int64
	// next is the first revision not yet handed over (etcd's minRev).
	next     int64
	noPut    bool
	noDelete bool
	prevKV   bool
	state    watchState
	// pending is a victim's response waiting for room in its stream.
	pending *Response
}

type msgKind int8

const (
	msgEvents msgKind = iota
	msgWatch
	msgCancel
	msgProgressAll
	msgProgress
	msgClose
	msgResync
)

type msg struct {
	kind   msgKind
	s      *Stream
	events []*mvccpb.Event
	req    WatchRequest
	id     int64
}

// Hub is the watch hub actor.
type Hub struct {
	cfg   Config
	lg    *zap.Logger
	inbox *actors.Inbox[msg]
	// wake asks for a retry of victims and held responses now.
	wake chan struct{}
	// backlog counts the events handed to Notify and not yet taken; taken
	// signals a Notify waiting for it to fall, done that Run ended.
	backlog atomic.Int64
	taken   chan struct{}
	done    chan struct{}

	// Owned by the Run goroutine.
	// seen is the newest revision whose events the hub has matched.
	seen     int64
	synced   *group
	unsynced map[*watcher]struct{}
	victims  map[*watcher]struct{}
	// blocked are streams with control responses waiting for room.
	blocked map[*Stream]struct{}
	// progress are streams with a progress request not answered yet.
	progress map[*Stream]int64
	streams  map[*Stream]struct{}
}

// New returns a hub; start it with Run.
func New(cfg Config) *Hub {
	if cfg.StreamBuffer <= 0 {
		cfg.StreamBuffer = DefaultStreamBuffer
	}
	if cfg.SyncBatch <= 0 {
		cfg.SyncBatch = DefaultSyncBatch
	}
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = DefaultRetryInterval
	}
	if cfg.MaxBacklog <= 0 {
		cfg.MaxBacklog = DefaultMaxBacklog
	}
	if cfg.ProgressInterval <= 0 {
		cfg.ProgressInterval = DefaultProgressInterval
	}
	lg := cfg.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	return &Hub{
		cfg: cfg, lg: lg, inbox: actors.NewInbox[msg](), wake: make(chan struct{}, 1),
		taken: make(chan struct{}, 1), done: make(chan struct{}),
		seen:     cfg.Store.Rev(),
		synced:   newGroup(),
		unsynced: map[*watcher]struct{}{},
		victims:  map[*watcher]struct{}{},
		blocked:  map[*Stream]struct{}{},
		progress: map[*Stream]int64{},
		streams:  map[*Stream]struct{}{},
	}
}

// ProgressInterval is the period of progress notifications.
func (h *Hub) ProgressInterval() time.Duration { return h.cfg.ProgressInterval }

// QueueLength is how many messages wait in the hub's mailbox (for
// metrics: it takes the inbox's lock).
func (h *Hub) QueueLength() int { return h.inbox.Len() }

// Notify hands the hub the events of one applied batch, in revision order,
// once they are visible to readers (apply.Config.Events). The slice is the
// hub's. It blocks only while MaxBacklog events wait for the hub (or until
// the hub stopped).
func (h *Hub) Notify(evs []*mvccpb.Event) {
	if len(evs) == 0 {
		return
	}
	for h.backlog.Load() >= int64(h.cfg.MaxBacklog) {
		select {
		case <-h.taken:
		case <-h.done:
			return
		}
	}
	h.backlog.Add(int64(len(evs)))
	h.inbox.Put(msg{kind: msgEvents, events: evs})
}

// Resync tells the hub the store was replaced under it (a raft snapshot was
// installed): the events between what the hub saw and the new store's
// revision never came through Notify, so every synced watcher catches up
// from the store instead. It never blocks.
func (h *Hub) Resync() { h.inbox.Put(msg{kind: msgResync}) }

// Stream is one reader's multiplex of watchers (one gRPC Watch stream).
type Stream struct {
	h   *Hub
	out chan Response

	// Owned by the hub goroutine.
	watchers map[int64]*watcher
	nextID   int64
	// ctrl are responses that found out full; while any wait, nothing
	// else is sent to out, so order is kept.
	ctrl []Response
	// closed is set by Close: later requests of the stream are ignored.
	closed bool
	// stalled is set by the hub when a response found no room, and
	// cleared by the reader's Ack, which then wakes the hub to retry.
	stalled atomic.Bool
}

// NewStream returns a stream with no watchers.
func (h *Hub) NewStream() *Stream {
	return &Stream{h: h, out: make(chan Response, h.cfg.StreamBuffer), watchers: map[int64]*watcher{}}
}

// C delivers the stream's responses in order.
func (s *Stream) C() <-chan Response { return s.out }

// Ack tells the hub the reader took responses from C. Calling it after
// each receive lets a stream that filled up resume at once instead of at
// the next retry tick.
func (s *Stream) Ack() {
	if s.stalled.Load() && s.stalled.CompareAndSwap(true, false) {
		select {
		case s.h.wake <- struct{}{}:
		default:
		}
	}
}

// Watch asks for a watcher; the answer is a Created response on C (with
// Canceled and CancelReason set when refused), before any of its events.
func (s *Stream) Watch(r WatchRequest) { s.h.inbox.Put(msg{kind: msgWatch, s: s, req: r}) }

// Cancel removes a watcher; a Canceled response follows on C if it existed.
func (s *Stream) Cancel(id int64) { s.h.inbox.Put(msg{kind: msgCancel, s: s, id: id}) }

// RequestProgress asks for a response with WatchID InvalidID and no events
// once every event up to the current revision was sent on the stream.
func (s *Stream) RequestProgress() { s.h.inbox.Put(msg{kind: msgProgressAll, s: s}) }

// Progress sends watcher id an empty response at the hub's revision if it
// is synced and there is room; otherwise it does nothing (etcd's periodic
// progress notify).
func (s *Stream) Progress(id int64) { s.h.inbox.Put(msg{kind: msgProgress, s: s, id: id}) }

// Close removes every watcher of the stream; nothing is sent on C after.
func (s *Stream) Close() { s.h.inbox.Put(msg{kind: msgClose, s: s}) }

// Run is the hub loop.
func (h *Hub) Run(ctx context.Context) error {
	defer close(h.done)
	tick := time.NewTicker(h.cfg.RetryInterval)
	defer tick.Stop()
	for {
		var retry <-chan time.Time
		if len(h.victims) > 0 || len(h.blocked) > 0 {
			retry = tick.C
		}
		due := false
		if len(h.unsynced) > 0 {
			// Catching up goes on between messages, without waiting.
			select {
			case <-ctx.Done():
				return nil
			case <-retry:
				due = true
			case <-h.wake:
				due = true
			default:
			}
		} else {
			select {
			case <-ctx.Done():
				return nil
			case <-h.inbox.Ready():
			case <-retry:
				due = true
			case <-h.wake:
				due = true
			}
		}
		var took int64
		for _, m := range h.inbox.Take() {
			took += int64(len(m.events))
			h.handle(m)
		}
		if took > 0 {
			h.backlog.Add(-took)
			select {
			case h.taken <- struct{}{}:
			default:
			}
		}
		if due {
			h.retry()
		}
		if len(h.unsynced) > 0 {
			if err := h.syncRound(); err != nil {
				return err
			}
		}
		h.answerProgress()
		if h.cfg.Metrics != nil {
			h.cfg.Metrics.Slow(len(h.unsynced), len(h.victims))
		}
	}
}

func (h *Hub) handle(m msg) {
	if m.s != nil && m.s.closed {
		return
	}
	switch m.kind {
	case msgEvents:
		h.notify(m.events)
	case msgWatch:
		h.watch(m.s, m.req)
	case msgCancel:
		if w := m.s.watchers[m.id]; w != nil {
			h.drop(w)
			h.sendCtrl(m.s, Response{WatchID: m.id, Revision: h.cfg.Store.Rev(), Canceled: true})
		}
	case msgProgressAll:
		if len(m.s.watchers) > 0 {
			h.progress[m.s] = h.cfg.Store.Rev()
		}
	case msgProgress:
		if w := m.s.watchers[m.id]; w != nil && w.state == stateSynced && h.seen >= w.startRev {
			h.trySend(m.s, Response{WatchID: w.id, Revision: h.seen})
		}
	case msgResync:
		for s := range h.streams {
			for _, w := range s.watchers {
				if w.state == stateSynced {
					h.synced.remove(w)
					w.state = stateUnsynced
					h.unsynced[w] = struct{}{}
				}
			}
		}
		h.seen = max(h.seen, h.cfg.Store.Rev())
	case msgClose:
		for _, w := range m.s.watchers {
			h.drop(w)
		}
		m.s.ctrl = nil
		m.s.closed = true
		delete(h.blocked, m.s)
		delete(h.progress, m.s)
		if _, ok := h.streams[m.s]; ok {
			delete(h.streams, m.s)
			if h.cfg.Metrics != nil {
				h.cfg.Metrics.Streams(-1)
			}
		}
	}
}

func (h *Hub) watch(s *Stream, r WatchRequest) {
	if _, ok := h.streams[s]; !ok {
		h.streams[s] = struct{}{}
		if h.cfg.Metrics != nil {
			h.cfg.Metrics.Streams(1)
		}
	}
	rev := h.cfg.Store.Rev()
	refuse := func(err error) {
		h.sendCtrl(s, Response{WatchID: InvalidID, Revision: rev, Created: true, Canceled: true, CancelReason: err.Error()})
	}
	switch {
	case r.Refuse != "":
		h.sendCtrl(s, Response{WatchID: InvalidID, Revision: rev, Created: true, Canceled: true, CancelReason: r.Refuse})
		return
	case r.StartRev < 0:
		refuse(ErrCompacted)
		return
	case len(r.End) > 0 && bytes.Compare(r.Key, r.End) >= 0:
		refuse(ErrEmptyRange)
		return
	}
	id := r.ID
	if id == 0 {
		for s.watchers[s.nextID] != nil {
			s.nextID++
		}
		id = s.nextID
		s.nextID++
	} else if s.watchers[id] != nil {
		refuse(ErrDuplicateID)
		return
	}
	w := &watcher{id: id, s: s, key: r.Key, end: r.End, startRev: r.StartRev,
		noPut: r.NoPut, noDelete: r.NoDelete, prevKV: r.PrevKV}
	s.watchers[id] = w
	if h.cfg.Metrics != nil {
		h.cfg.Metrics.Watchers(1)
	}
	h.sendCtrl(s, Response{WatchID: id, Revision: rev, Created: true})
	switch {
	case r.StartRev == 0:
		w.next = rev + 1
	default:
		w.next = r.StartRev
	}
	if w.next > h.seen {
		h.synced.add(w)
	} else {
		w.state = stateUnsynced
		h.unsynced[w] = struct{}{}
	}
}

// drop forgets w, whatever its state.
func (h *Hub) drop(w *watcher) {
	switch w.state {
	case stateSynced:
		h.synced.remove(w)
	case stateUnsynced:
		delete(h.unsynced, w)
	case stateVictim:
		delete(h.victims, w)
	}
	w.pending = nil
	delete(w.s.watchers, w.id)
	if h.cfg.Metrics != nil {
		h.cfg.Metrics.Watchers(-1)
	}
}

// notify matches a batch from the applier against the synced watchers.
func (h *Hub) notify(evs []*mvccpb.Event) {
	last := evs[len(evs)-1].Kv.ModRevision
	if h.synced.len() > 0 {
		matched := map[*watcher][]*mvccpb.Event{}
		for _, ev := range evs {
			h.synced.match(ev.Kv.Key, func(w *watcher) {
				if ev.Kv.ModRevision >= w.next {
					matched[w] = append(matched[w], ev)
				}
			})
		}
		var rt *mvcc.ReadTxn
		for w, wevs := range matched {
			if w.prevKV && rt == nil {
				rt = h.cfg.Store.Read()
			}
			if !h.deliver(w, wevs, last, rt) {
				h.synced.remove(w)
				w.state = stateVictim
				h.victims[w] = struct{}{}
			}
		}
		if rt != nil {
			rt.End()
		}
	}
	h.seen = last
}

// deliver sends w the events it selects among evs, all of them at
// revisions <= rev, with the header revision rev. When the stream has no
// room it keeps the response in w.pending and returns false. rt reads the
// previous values when w wants them.
func (h *Hub) deliver(w *watcher, evs []*mvccpb.Event, rev int64, rt *mvcc.ReadTxn) bool {
	out := make([]*mvccpb.Event, 0, len(evs))
	for _, ev := range evs {
		if ev.Type == mvccpb.PUT && w.noPut || ev.Type == mvccpb.DELETE && w.noDelete {
			continue
		}
		if w.prevKV {
			ev = withPrevKV(rt, ev)
		}
		out = append(out, ev)
	}
	w.next = rev + 1
	if len(out) == 0 {
		return true
	}
	resp := Response{WatchID: w.id, Revision: rev, Events: out}
	if h.trySend(w.s, resp) {
		return true
	}
	w.pending = &resp
	return false
}

// withPrevKV returns a copy of ev with the key's value before ev's revision,
// as etcd: nothing for a create, or when that revision is compacted.
func withPrevKV(rt *mvcc.ReadTxn, ev *mvccpb.Event) *mvccpb.Event {
	if ev.Type == mvccpb.PUT && ev.Kv.CreateRevision == ev.Kv.ModRevision {
		return ev
	}
	cp := &mvccpb.Event{Type: ev.Type, Kv: ev.Kv}
	res, err := rt.Range(ev.Kv.Key, nil, mvcc.RangeOptions{Rev: ev.Kv.ModRevision - 1})
	if err == nil && len(res.KVs) > 0 {
		cp.PrevKv = &res.KVs[0]
	}
	return cp
}

func (h *Hub) trySend(s *Stream, r Response) bool {
	if len(s.ctrl) > 0 {
		s.stalled.Store(true)
		return false
	}
	select {
	case s.out <- r:
		if h.cfg.Metrics != nil && len(r.Events) > 0 {
			h.cfg.Metrics.EventsSent(len(r.Events))
		}
		return true
	default:
		s.stalled.Store(true)
		return false
	}
}

// sendCtrl sends r after everything sent before, holding it if the stream
// has no room. Control responses are few (one per request of the reader),
// so holding them does not grow without bound.
func (h *Hub) sendCtrl(s *Stream, r Response) {
	if h.trySend(s, r) {
		return
	}
	s.ctrl = append(s.ctrl, r)
	h.blocked[s] = struct{}{}
}

// retry flushes held control responses, then victims' responses.
func (h *Hub) retry() {
	for s := range h.blocked {
		n := 0
	flush:
		for _, r := range s.ctrl {
			select {
			case s.out <- r:
				n++
			default:
				s.stalled.Store(true)
				break flush
			}
		}
		s.ctrl = s.ctrl[n:]
		if len(s.ctrl) == 0 {
			s.ctrl = nil
			delete(h.blocked, s)
		}
	}
	for w := range h.victims {
		if !h.trySend(w.s, *w.pending) {
			continue
		}
		w.pending = nil
		delete(h.victims, w)
		if w.next > h.seen {
			w.state = stateSynced
			h.synced.add(w)
		} else {
			w.state = stateUnsynced
			h.unsynced[w] = struct{}{}
		}
	}
}

// syncRound moves the unsynced watchers one batch closer to the hub's
// revision, cancels those whose next revision was compacted, and lets
// those that caught up join the synced group.
func (h *Hub) syncRound() error {
	rt := h.cfg.Store.Read()
	defer rt.End()
	compactRev := rt.CompactRev()
	from := int64(-1)
	for w := range h.unsynced {
		if w.next < compactRev {
			delete(h.unsynced, w)
			w.state = stateCompacted
			// etcd's compaction cancel carries no header revision.
			h.sendCtrl(w.s, Response{WatchID: w.id, Canceled: true, CompactRevision: compactRev})
			continue
		}
		if from < 0 || w.next < from {
			from = w.next
		}
	}
	if from < 0 {
		return nil
	}
	var (
		evs  []*mvccpb.Event
		last = h.seen
	)
	if from <= h.seen {
		var err error
		evs, last, err = rt.Events(from, h.seen, h.cfg.SyncBatch)
		if err != nil {
			return err
		}
	}
	ws := make([]*watcher, 0, len(h.unsynced))
	for w := range h.unsynced {
		ws = append(ws, w)
	}
	for _, w := range ws {
		if w.next > last {
			if w.next > h.seen {
				delete(h.unsynced, w)
				w.state = stateSynced
				h.synced.add(w)
			}
			continue
		}
		var wevs []*mvccpb.Event
		for _, ev := range evs {
			if ev.Kv.ModRevision >= w.next && w.contains(ev.Kv.Key) {
				wevs = append(wevs, ev)
			}
		}
		delete(h.unsynced, w)
		if !h.deliver(w, wevs, last, rt) {
			w.state = stateVictim
			h.victims[w] = struct{}{}
			continue
		}
		if last >= h.seen {
			w.state = stateSynced
			h.synced.add(w)
		} else {
			w.state = stateUnsynced
			h.unsynced[w] = struct{}{}
		}
	}
	return nil
}

// answerProgress sends the progress responses that became due: every
// watcher of the stream synced, the hub past the revision current when the
// request came.
func (h *Hub) answerProgress() {
	for s, rev := range h.progress {
		if h.seen < rev {
			continue
		}
		ready := true
		for _, w := range s.watchers {
			if w.state == stateCompacted {
				continue
			}
			if w.state != stateSynced || h.seen < w.startRev {
				ready = false
				break
			}
		}
		if !ready {
			continue
		}
		delete(h.progress, s)
		if len(s.watchers) > 0 {
			h.sendCtrl(s, Response{WatchID: InvalidID, Revision: h.seen})
		}
	}
}
