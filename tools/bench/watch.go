package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
)

// watchKeyPrefix is where the watch workload puts and watches; idle watchers
// watch under idleKeyPrefix, which no workload writes.
const (
	watchKeyPrefix = "bench/watch/"
	idleKeyPrefix  = "bench/idle/"
)

// stampSize is the length of the stamp at the start of every value the watch
// workload puts: the put's sequence number and its send time, both big-endian.
const stampSize = 16

func stamp(dst []byte, seq int64, sent time.Duration) {
	binary.BigEndian.PutUint64(dst[0:8], uint64(seq))
	binary.BigEndian.PutUint64(dst[8:16], uint64(sent))
}

// unstamp reads what stamp wrote; ok is false for a value too short to hold it.
func unstamp(v []byte) (seq int64, sent time.Duration, ok bool) {
	if len(v) < stampSize {
		return 0, 0, false
	}
	return int64(binary.BigEndian.Uint64(v[0:8])), time.Duration(binary.BigEndian.Uint64(v[8:16])), true
}

// watchSpec is one watcher's range: a single key when end is nil.
type watchSpec struct {
	key, end []byte
}

func (s watchSpec) matches(k []byte) bool {
	if s.end == nil {
		return string(k) == string(s.key)
	}
	return string(k) >= string(s.key) && (len(s.end) == 1 && s.end[0] == 0 || string(k) < string(s.end))
}

// watcherState is what one watcher received. It is written only by the
// receive loop of the watcher's stream and read after that loop has ended.
type watcherState struct {
	events     int64
	lastRev    int64 // Invariant: the largest mod revision seen so far.
	duplicates int64 // events at or below lastRev: repeated or out of order
	foreign    int64 // events whose key the watcher does not cover
}

// watchStream carries the watchers [first, first+n) of its set.
type watchStream struct {
	stream   pb.Watch_WatchClient
	first, n int
	ids      map[int64]int // server watch id -> watcher index; receive loop only
	rec      recorder
	lastRecv time.Time // receive time of the last event
}

// watchSet is a group of watchers spread over streams, each stream with a
// send loop (the create requests) and a receive loop. Timestamps in values
// are durations since base, so latencies use the monotonic clock.
type watchSet struct {
	base     time.Time
	specs    []watchSpec
	watchers []watcherState
	streams  []*watchStream

	cancel  context.CancelFunc
	wg      sync.WaitGroup
	created atomic.Int64
	// fresh counts the events that were neither duplicates nor out of
	// order, so repeated events cannot make up for missing ones.
	fresh atomic.Int64
	allUp chan struct{} // closed once every watcher is created

	failOnce sync.Once
	failed   chan struct{} // closed with err set on the first stream failure
	err      error
}

// startWatchers opens nstreams watch streams over conns (stream i on
// connection i mod len(conns)), creates one watcher per spec on them, and
// returns once every watcher is created. The caller must close the set.
func startWatchers(ctx context.Context, conns []*grpc.ClientConn, specs []watchSpec, nstreams int, base time.Time) (*watchSet, error) {
	nstreams = max(1, min(nstreams, len(specs)))
	sctx, cancel := context.WithCancel(ctx)
	ws := &watchSet{
		base:     base,
		specs:    specs,
		watchers: make([]watcherState, len(specs)),
		cancel:   cancel,
		allUp:    make(chan struct{}),
		failed:   make(chan struct{}),
	}
	if len(specs) == 0 {
		close(ws.allUp)
		return ws, nil
	}
	for i := range nstreams {
		first, last := i*len(specs)/nstreams, (i+1)*len(specs)/nstreams
		stream, err := pb.NewWatchClient(conns[i%len(conns)]).Watch(sctx)
		if err != nil {
			ws.close()
			return nil, fmt.Errorf("open watch stream %d: %w", i, err)
		}
		st := &watchStream{stream: stream, first: first, n: last - first, ids: make(map[int64]int, last-first)}
		ws.streams = append(ws.streams, st)
		ws.wg.Go(func() { ws.send(sctx, st) })
		ws.wg.Go(func() { ws.receive(sctx, st) })
	}
	select {
	case <-ws.allUp:
		return ws, nil
	case <-ws.failed:
		ws.close()
		return nil, ws.err
	case <-ctx.Done():
		n := ws.created.Load()
		ws.close()
		return nil, fmt.Errorf("create %d watchers: %d created when interrupted: %w", len(specs), n, ctx.Err())
	}
}

func (ws *watchSet) fail(err error) {
	ws.failOnce.Do(func() {
		ws.err = err
		close(ws.failed)
	})
}

// send creates the stream's watchers without waiting for each reply: a
// stream handles its requests in order, so the k-th created response
// answers the k-th create request.
func (ws *watchSet) send(ctx context.Context, st *watchStream) {
	for i := st.first; i < st.first+st.n; i++ {
		req := &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
			Key: ws.specs[i].key, RangeEnd: ws.specs[i].end,
		}}}
		if err := st.stream.Send(req); err != nil {
			if ctx.Err() == nil {
				ws.fail(fmt.Errorf("send create of watcher %d: %w", i, err))
			}
			return
		}
	}
}

func (ws *watchSet) receive(ctx context.Context, st *watchStream) {
	next := 0 // watchers of this stream created so far
	for {
		resp, err := st.stream.Recv()
		if err != nil {
			if ctx.Err() == nil {
				ws.fail(fmt.Errorf("receive on watch stream of watcher %d: %w", st.first, err))
			}
			return
		}
		now := time.Now()
		if resp.Canceled {
			ws.fail(fmt.Errorf("watch %d canceled by the server: %q", resp.WatchId, resp.CancelReason))
			return
		}
		if resp.Created {
			if next == st.n {
				ws.fail(fmt.Errorf("watch stream of watcher %d: created response %d for %d requests", st.first, next+1, st.n))
				return
			}
			st.ids[resp.WatchId] = st.first + next
			next++
			if ws.created.Add(1) == int64(len(ws.specs)) {
				close(ws.allUp)
			}
		}
		if len(resp.Events) == 0 {
			continue
		}
		idx, ok := st.ids[resp.WatchId]
		if !ok {
			ws.fail(fmt.Errorf("events for unknown watch id %d", resp.WatchId))
			return
		}
		w := &ws.watchers[idx]
		before := w.duplicates
		for _, ev := range resp.Events {
			w.events++
			if !ws.specs[idx].matches(ev.Kv.Key) {
				w.foreign++
			}
			if ev.Kv.ModRevision <= w.lastRev {
				w.duplicates++
			} else {
				w.lastRev = ev.Kv.ModRevision
			}
			if _, sent, ok := unstamp(ev.Kv.Value); ok {
				st.rec.record(now.Sub(ws.base) - sent)
			}
		}
		st.lastRecv = now
		ws.fresh.Add(int64(len(resp.Events)) - (w.duplicates - before))
	}
}

// close ends every stream and waits for its loops; after it the watcher
// states and recorders may be read.
func (ws *watchSet) close() {
	ws.cancel()
	ws.wg.Wait()
}

// watchOptions are the flags of the watch command.
type watchOptions struct {
	watchers    int
	streams     int
	shared      bool
	puts        int
	putRate     float64 // puts per second; 0: as fast as the put clients go
	putClients  int
	putConns    int
	valSize     int
	timeout     time.Duration
	watchConns  int
	endpoints   []string
	dialTimeout time.Duration
	reqTimeout  time.Duration
	sec         security
}

func (o watchOptions) validate() error {
	switch {
	case len(o.endpoints) == 0:
		return errors.New("--endpoints is empty")
	case o.watchers < 1 || o.streams < 1 || o.puts < 1:
		return fmt.Errorf("--watchers, --streams and --puts must be at least 1, got %d, %d and %d", o.watchers, o.streams, o.puts)
	case o.putClients < 1 || o.putConns < 1 || o.watchConns < 1:
		return errors.New("--put-clients, --put-conns and --conns must be at least 1")
	case o.putRate < 0 || o.timeout <= 0:
		return errors.New("--put-rate must not be negative and --timeout must be positive")
	case o.valSize < stampSize:
		return fmt.Errorf("--val-size must be at least %d (the timestamp), got %d", stampSize, o.valSize)
	}
	return nil
}

// watchKey names the i-th of n keys under watchKeyPrefix.
func watchKey(i, n int) []byte { return preloadKey(watchKeyPrefix, i, n) }

// watchResult is one watch run.
type watchResult struct {
	Watchers     int
	Streams      int
	Shared       bool
	Puts         int64 // successful puts
	PutErrors    int64
	FirstError   string
	PutSec       float64 // from the first put sent to the last answered
	CreateSec    float64 // creating every watcher
	Expected     int64   // events the watchers should have received
	Events       int64   // events received
	Missing      int64   // watchers that got fewer events than expected
	Extra        int64   // watchers that got more
	Duplicates   int64
	Foreign      int64
	DeliverSec   float64 // from the first put sent to the last event received
	EventsPerSec float64
	latencyStats
	Percentiles []time.Duration // parallel to reportedPercentiles
	// PutPercentiles are the successful puts' own latencies (sent to
	// answered), parallel to reportedPercentiles: what of an event's latency
	// is the write's commit rather than its delivery.
	PutPercentiles []time.Duration
	putStats       latencyStats
}

func (r *watchResult) ok() bool {
	return r.PutErrors == 0 && r.Missing == 0 && r.Extra == 0 && r.Duplicates == 0 && r.Foreign == 0
}

// benchWatch creates the watchers, puts the keys they watch, and measures how
// the events arrive. The put loops use their own connections, so events and
// puts do not share a transport.
func benchWatch(ctx context.Context, o watchOptions) (*watchResult, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	wconns, err := dial(ctx, o.endpoints, o.watchConns, o.dialTimeout, o.sec)
	if err != nil {
		return nil, err
	}
	defer closeConns(wconns)
	pconns, err := dial(ctx, o.endpoints, o.putConns, o.dialTimeout, o.sec)
	if err != nil {
		return nil, err
	}
	defer closeConns(pconns)

	specs := make([]watchSpec, o.watchers)
	for i := range specs {
		if o.shared {
			specs[i] = watchSpec{key: []byte(watchKeyPrefix), end: prefixEnd(watchKeyPrefix)}
		} else {
			specs[i] = watchSpec{key: watchKey(i, o.watchers)}
		}
	}
	base := time.Now()
	ws, err := startWatchers(ctx, wconns, specs, o.streams, base)
	if err != nil {
		return nil, err
	}
	res := &watchResult{Watchers: o.watchers, Streams: len(ws.streams), Shared: o.shared, CreateSec: time.Since(base).Seconds()}

	ok := make([]bool, o.puts) // ok[j]: put j succeeded; written by the loop that sent it
	putStart := time.Now()
	var (
		next     atomic.Int64
		errCount atomic.Int64
		errOnce  sync.Once
		firstErr error
		wg       sync.WaitGroup
	)
	putRecs := make([]recorder, o.putClients)
	for c := range o.putClients {
		kv := client{KVClient: pb.NewKVClient(pconns[c%len(pconns)])}
		rec := &putRecs[c]
		wg.Go(func() {
			value := make([]byte, o.valSize)
			for ctx.Err() == nil {
				j := next.Add(1) - 1
				if j >= int64(o.puts) {
					return
				}
				if o.putRate > 0 {
					at := putStart.Add(time.Duration(float64(j) / o.putRate * float64(time.Second)))
					if d := time.Until(at); d > 0 {
						select {
						case <-time.After(d):
						case <-ctx.Done():
							return
						}
					}
				}
				sent := time.Since(base)
				stamp(value, j, sent)
				err := call(ctx, func(ctx context.Context, kv client, _ int64) error {
					_, err := kv.Put(ctx, &pb.PutRequest{Key: watchKey(int(j)%o.watchers, o.watchers), Value: value})
					return err
				}, kv, j, o.reqTimeout)
				if err != nil {
					errCount.Add(1)
					errOnce.Do(func() { firstErr = err })
					continue
				}
				rec.record(time.Since(base) - sent)
				ok[j] = true
			}
		})
	}
	wg.Wait()
	putEnd := time.Now()
	res.PutSec = putEnd.Sub(putStart).Seconds()
	res.PutErrors = errCount.Load()
	if firstErr != nil {
		res.FirstError = firstErr.Error()
	}

	expect := make([]int64, o.watchers)
	for j, done := range ok {
		if !done {
			continue
		}
		res.Puts++
		if !o.shared {
			expect[j%o.watchers]++
		}
	}
	for i := range expect {
		if o.shared {
			expect[i] = res.Puts
		}
		res.Expected += expect[i]
	}
	// Wait for the events until they are all in, a stream fails, or the run
	// times out; what arrived by then is reported either way.
	tick := time.NewTicker(time.Millisecond)
	for ws.fresh.Load() < res.Expected && ctx.Err() == nil {
		select {
		case <-tick.C:
		case <-ws.failed:
		case <-ctx.Done():
		}
		if isClosed(ws.failed) {
			break
		}
	}
	tick.Stop()
	ws.close()
	if isClosed(ws.failed) {
		return nil, ws.err
	}
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("watch interrupted: %w", err)
	}

	var last time.Time
	recs := make([]recorder, len(ws.streams))
	for i, st := range ws.streams {
		recs[i] = st.rec
		if st.lastRecv.After(last) {
			last = st.lastRecv
		}
	}
	for i, w := range ws.watchers {
		res.Events += w.events
		res.Duplicates += w.duplicates
		res.Foreign += w.foreign
		switch {
		case w.events < expect[i]:
			res.Missing++
		case w.events > expect[i]:
			res.Extra++
		}
	}
	if !last.IsZero() {
		res.DeliverSec = last.Sub(putStart).Seconds()
		if res.DeliverSec > 0 {
			res.EventsPerSec = float64(res.Events) / res.DeliverSec
		}
	}
	lats := mergeSorted(recs)
	res.latencyStats, res.Percentiles = statsOf(lats), percentiles(lats)
	putLats := mergeSorted(putRecs)
	res.putStats, res.PutPercentiles = statsOf(putLats), percentiles(putLats)
	return res, nil
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func closeConns(conns []*grpc.ClientConn) {
	for _, cc := range conns {
		_ = cc.Close()
	}
}

// idleSpecs are n single-key watchers on keys no workload writes.
func idleSpecs(n int) []watchSpec {
	specs := make([]watchSpec, n)
	for i := range specs {
		specs[i] = watchSpec{key: preloadKey(idleKeyPrefix, i, n)}
	}
	return specs
}

func (r *watchResult) writeText(w io.Writer) error {
	var b strings.Builder
	mode := "distinct keys"
	if r.Shared {
		mode = "one shared prefix"
	}
	fmt.Fprintf(&b, "\nSummary (watch, %d watchers on %s over %d streams):\n", r.Watchers, mode, r.Streams)
	fmt.Fprintf(&b, "  Create:\t%s\n", secs(time.Duration(r.CreateSec*float64(time.Second))))
	fmt.Fprintf(&b, "  Puts:\t%d in %.4f secs. (%.1f/s)\n", r.Puts, r.PutSec, float64(r.Puts)/max(r.PutSec, 1e-9))
	fmt.Fprintf(&b, "  Put errors:\t%d\n", r.PutErrors)
	if r.FirstError != "" {
		fmt.Fprintf(&b, "  First error:\t%s\n", r.FirstError)
	}
	fmt.Fprintf(&b, "  Events:\t%d of %d expected\n", r.Events, r.Expected)
	fmt.Fprintf(&b, "  Watchers short / over:\t%d / %d\n", r.Missing, r.Extra)
	fmt.Fprintf(&b, "  Duplicates:\t%d\n", r.Duplicates)
	fmt.Fprintf(&b, "  Foreign keys:\t%d\n", r.Foreign)
	fmt.Fprintf(&b, "  Events/sec:\t%.4f\n", r.EventsPerSec)
	fmt.Fprintf(&b, "  Slowest:\t%s\n", secs(r.slowest))
	fmt.Fprintf(&b, "  Fastest:\t%s\n", secs(r.fastest))
	fmt.Fprintf(&b, "  Average:\t%s\n", secs(r.average))
	fmt.Fprintf(&b, "  Stddev:\t%s\n", secs(r.stddev))
	b.WriteString("\nEvent latency (put sent to event received):\n")
	writePercentiles(&b, r.Percentiles)
	b.WriteString("\nPut latency (put sent to put answered):\n")
	writePercentiles(&b, r.PutPercentiles)
	_, err := io.WriteString(w, b.String())
	return err
}

// jsonWatch is the --json form of a watch run; latencies in milliseconds.
type jsonWatch struct {
	Workload     string      `json:"workload"`
	Watchers     int         `json:"watchers"`
	Streams      int         `json:"streams"`
	SharedPrefix bool        `json:"shared_prefix"`
	CreateSec    float64     `json:"create_sec"`
	Puts         int64       `json:"puts"`
	PutErrors    int64       `json:"put_errors"`
	FirstError   string      `json:"first_error"`
	PutSec       float64     `json:"put_sec"`
	Expected     int64       `json:"events_expected"`
	Events       int64       `json:"events"`
	Missing      int64       `json:"watchers_short"`
	Extra        int64       `json:"watchers_over"`
	Duplicates   int64       `json:"duplicates"`
	Foreign      int64       `json:"foreign"`
	DeliverSec   float64     `json:"deliver_sec"`
	EventsPerSec float64     `json:"events_per_sec"`
	LatencyMs    jsonLatency `json:"latency_ms"`
	PutLatencyMs jsonLatency `json:"put_latency_ms"`
}

func (r *watchResult) writeJSON(w io.Writer) error {
	return json.NewEncoder(w).Encode(jsonWatch{
		Workload: "watch", Watchers: r.Watchers, Streams: r.Streams, SharedPrefix: r.Shared,
		CreateSec: r.CreateSec, Puts: r.Puts, PutErrors: r.PutErrors, FirstError: r.FirstError, PutSec: r.PutSec,
		Expected: r.Expected, Events: r.Events, Missing: r.Missing, Extra: r.Extra,
		Duplicates: r.Duplicates, Foreign: r.Foreign, DeliverSec: r.DeliverSec, EventsPerSec: r.EventsPerSec,
		LatencyMs:    r.latencyStats.toJSON(r.Percentiles),
		PutLatencyMs: r.putStats.toJSON(r.PutPercentiles),
	})
}
