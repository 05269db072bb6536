package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvd-dev/kvd/e2e/harness"
	lz "github.com/kvd-dev/kvd/e2e/linearizability"
)

const (
	lzClients  = 8
	lzKeys     = 5
	lzDuration = 12 * time.Second
	// lzOpTimeout bounds one request; a write that runs out of it has an
	// unknown outcome.
	lzOpTimeout = 2 * time.Second
	// lzCheckTimeout bounds porcupine's search.
	lzCheckTimeout = 2 * time.Minute
)

// TestLinearizability records a history of gets, puts, deletes and
// compare-and-puts on a handful of keys from 8 clients spread over a
// 3-member cluster (plus a writer of two-key txns), while a seeded schedule
// of faults runs: kill -9 and restart of a member, partition of the leader,
// SIGSTOP/SIGCONT of a member, compactions (also while a member is down, so
// that its watcher resumes below the compacted revision). The history is
// checked with porcupine against a model of a key-value map with
// revisions; three watchers, one per member, record their streams, which
// are checked for etcd's watch guarantees (lz.CheckWatch). The seed
// (KVD_E2E_ROBUSTNESS_SEED, random by default, always logged) drives the
// operation mix, every client's choices and the fault schedule; timing
// still varies from run to run. make robustness runs it over many seeds.
func TestLinearizability(t *testing.T) {
	t.Parallel()
	seed := robustnessSeed(t)
	forEachClusterEngine(t, func(t *testing.T, engine string) {
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("replay: KVD_E2E_ROBUSTNESS_SEED=%d go test -run 'TestLinearizability/%s'", seed, engine)
			}
		})
		runRobustness(t, engine, seed)
	})
}

// robustnessSeed is KVD_E2E_ROBUSTNESS_SEED or a random seed, logged.
func robustnessSeed(t *testing.T) uint64 {
	t.Helper()
	seed := rand.Uint64() % 1_000_000_000
	if v := os.Getenv("KVD_E2E_ROBUSTNESS_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("KVD_E2E_ROBUSTNESS_SEED=%q: %v", v, err)
		}
		seed = n
	}
	t.Logf("robustness seed %d (KVD_E2E_ROBUSTNESS_SEED=%d replays it)", seed, seed)
	return seed
}

func runRobustness(t *testing.T, engine string, seed uint64) {
	opts := faultOptions(engine)
	opts.PeerProxy = true
	c := harness.StartCluster(t, 3, opts)
	rec := &recorder{start: time.Now()}
	members := c.Members()
	mix := newOpMix(rand.New(rand.NewPCG(seed, 0)))
	schedule := newFaultSchedule(rand.New(rand.NewPCG(seed, 1)), lzDuration)
	t.Logf("op mix %v; fault schedule %v", mix, schedule)

	cli := c.Client(t)
	r0, err := cli.Get(testCtx(t), "lz/")
	mustOK(t, "get start revision", err)
	startRev := r0.Header.Revision + 1

	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	var wwg sync.WaitGroup
	watchers := make([]*watcher, len(members))
	for i, m := range members {
		w := &watcher{stream: lz.WatchStream{Name: m.Name(), Start: startRev}}
		watchers[i] = w
		wc := pb.NewWatchClient(c.ClientFor(t, m.Endpoint()).ActiveConnection())
		wwg.Add(1)
		go func() {
			defer wwg.Done()
			w.run(wctx, wc, startRev)
		}()
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for i := range lzClients {
		// Each client prefers one member but can fail over to the
		// others, as real clients do.
		eps := []string{members[i%3].Endpoint(), members[(i+1)%3].Endpoint(), members[(i+2)%3].Endpoint()}
		cli := c.ClientFor(t, eps...)
		rng := rand.New(rand.NewPCG(seed, uint64(i)+2))
		wg.Add(1)
		go func() {
			defer wg.Done()
			runClient(ctx, rec, cli, i, rng, mix)
		}()
	}
	txns := &txnWriter{writes: lz.NewWrites()}
	wg.Add(1)
	go func() {
		defer wg.Done()
		txns.run(ctx, c.ClientFor(t, c.Endpoints()...))
	}()

	end := time.Now().Add(lzDuration)
	fr := &faultRun{t: t, c: c, ctx: ctx, cli: cli}
	fr.run(schedule)
	<-time.After(time.Until(end))
	cancel()
	wg.Wait()
	if t.Failed() {
		return
	}

	// A last write every watcher must reach.
	endRev := putEndMarker(t, cli)
	deadline := time.Now().Add(20 * time.Second)
	for _, w := range watchers {
		for !w.compacted.Load() && w.lastRev.Load() < endRev && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
	}
	wcancel()
	wwg.Wait()

	history := rec.history()
	unknown := 0
	for _, op := range history {
		if op.Output.(lz.Output).Unknown {
			unknown++
		}
	}
	t.Logf("faults: %v; compactions at %v; %d operations, %d writes of unknown outcome, %d txns (%d unknown); end revision %d",
		fr.did, fr.compactions, len(history), unknown, txns.acked, txns.unknown, endRev)
	if len(history) < 200 {
		t.Fatalf("only %d operations recorded; the workload did not run", len(history))
	}

	checkWatches(t, watchers, history, txns.writes, endRev, fr.compactions)
	checkHistory(t, history)
}

// checkWatches checks every watcher's stream and that they agree.
func checkWatches(t *testing.T, watchers []*watcher, history []porcupine.Operation, txns *lz.Writes, endRev int64, compactions []int64) {
	t.Helper()
	writes := lz.WritesFromHistory(history)
	writes.Merge(txns)
	writes.AddAcked(endRev, lz.WatchEvent{Type: lz.EventPut, Key: lzEndKey, Value: "end"})
	check := lz.WatchCheck{End: endRev, Contiguous: true, Compactions: compactions, FreshKeys: true}
	var streams []lz.WatchStream
	for _, w := range watchers {
		s := w.stream
		streams = append(streams, s)
		opens, events := 0, 0
		how := "to the end"
		for _, e := range s.Entries {
			switch {
			case e.Kind == lz.EntryOpen:
				opens++
			case e.CompactRevision > 0:
				how = fmt.Sprintf("ended by compaction at %d", e.CompactRevision)
			}
			events += len(e.Events)
		}
		t.Logf("watch %s: %d events, %d opens, %s (last event %d)", s.Name, events, opens, how, w.lastRev.Load())
		errs := lz.CheckWatch(s, writes, check)
		for i, err := range errs {
			if i == 20 {
				t.Errorf("... and %d more", len(errs)-20)
				break
			}
			t.Error(err)
		}
	}
	for i, err := range lz.CheckWatchesAgree(streams) {
		if i == 20 {
			t.Error("... and more")
			break
		}
		t.Error(err)
	}
}

// checkHistory checks the history with porcupine.
func checkHistory(t *testing.T, history []porcupine.Operation) {
	t.Helper()
	switch res := porcupine.CheckOperationsTimeout(lz.Model, history, lzCheckTimeout); res {
	case porcupine.Ok:
	case porcupine.Illegal:
		// Checked again with the bookkeeping the visualization needs,
		// which the passing case need not pay for.
		_, info := porcupine.CheckOperationsVerbose(lz.Model, history, lzCheckTimeout)
		// Not t.TempDir: that is removed when the test ends, and the
		// file is for reading afterwards.
		dir, err := os.MkdirTemp("", "kvd-linearizability-")
		if err != nil {
			t.Fatalf("create visualization dir: %v", err)
		}
		path := filepath.Join(dir, t.Name()[strings.LastIndexByte(t.Name(), '/')+1:]+".html")
		if err := porcupine.VisualizePath(lz.Model, info, path); err != nil {
			t.Errorf("write visualization %s: %v", path, err)
		}
		t.Errorf("history is not linearizable; visualization at %s", path)
	default:
		t.Errorf("linearizability check gave %s within %v", res, lzCheckTimeout)
	}
}

const lzEndKey = "lz/end"

// putEndMarker writes lzEndKey, retrying while the cluster settles, and
// returns its revision.
func putEndMarker(t *testing.T, cli *clientv3.Client) int64 {
	t.Helper()
	var last error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), lzOpTimeout)
		r, err := cli.Put(ctx, lzEndKey, "end")
		cancel()
		if err == nil {
			return r.Header.Revision
		}
		last = err
	}
	t.Fatalf("end marker put: %v", last)
	return 0
}

// watcher keeps a watch on the lz/ prefix open on one member with prev_kv,
// reopening it at the last event's revision + 1 whenever it breaks or is
// canceled, until it is canceled for compaction or ctx ends, and records
// every step. It reads the stream through the raw stub so that every
// response is seen as sent (clientv3 resumes on its own).
type watcher struct {
	stream    lz.WatchStream
	lastRev   atomic.Int64
	compacted atomic.Bool
}

func (w *watcher) run(ctx context.Context, wc pb.WatchClient, start int64) {
	next := start
	w.lastRev.Store(start - 1)
	for ctx.Err() == nil {
		if w.session(ctx, wc, &next) {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// session runs one watch stream; true when the watch ended for good.
func (w *watcher) session(ctx context.Context, wc pb.WatchClient, next *int64) bool {
	sctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	stream, err := wc.Watch(sctx)
	if err != nil {
		return false
	}
	w.stream.Entries = append(w.stream.Entries, lz.WatchEntry{Kind: lz.EntryOpen, StartRev: *next})
	err = stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
		Key: []byte("lz/"), RangeEnd: []byte("lz0"), StartRevision: *next, PrevKv: true,
	}}})
	for err == nil {
		var r *pb.WatchResponse
		r, err = stream.Recv()
		if err != nil {
			break
		}
		en := lz.WatchEntry{Kind: lz.EntryResponse, Created: r.Created, Canceled: r.Canceled, CompactRevision: r.CompactRevision}
		if r.Header != nil {
			en.HeaderRev = r.Header.Revision
		}
		for _, ev := range r.Events {
			e := lz.WatchEvent{Key: string(ev.Kv.Key), Rev: ev.Kv.ModRevision}
			if ev.Type == mvccpb.DELETE {
				e.Type = lz.EventDelete
			} else {
				e.Value = string(ev.Kv.Value)
			}
			if ev.PrevKv != nil {
				e.PrevExists, e.PrevValue = true, string(ev.PrevKv.Value)
			}
			en.Events = append(en.Events, e)
			if e.Rev >= *next {
				*next = e.Rev + 1
				w.lastRev.Store(e.Rev)
			}
		}
		w.stream.Entries = append(w.stream.Entries, en)
		if r.Canceled {
			if r.CompactRevision > 0 {
				w.compacted.Store(true)
				return true
			}
			return false
		}
	}
	w.stream.Entries = append(w.stream.Entries, lz.WatchEntry{Kind: lz.EntryBreak, Err: err.Error()})
	return false
}

// txnWriter puts two keys in one txn, for the watchers' atomicity check
// (the keys are not part of the linearizability history).
type txnWriter struct {
	writes         *lz.Writes
	acked, unknown int
}

func (tw *txnWriter) run(ctx context.Context, cli *clientv3.Client) {
	for seq := 0; ctx.Err() == nil; seq++ {
		evs := []lz.WatchEvent{
			{Type: lz.EventPut, Key: fmt.Sprintf("lz/t/%da", seq%3), Value: fmt.Sprintf("t-%d-a", seq)},
			{Type: lz.EventPut, Key: fmt.Sprintf("lz/t/%db", seq%3), Value: fmt.Sprintf("t-%d-b", seq)},
		}
		octx, cancel := context.WithTimeout(ctx, lzOpTimeout)
		r, err := cli.Txn(octx).Then(clientv3.OpPut(evs[0].Key, evs[0].Value), clientv3.OpPut(evs[1].Key, evs[1].Value)).Commit()
		cancel()
		if err != nil {
			tw.writes.AddUnknown(evs...)
			tw.unknown++
		} else {
			tw.writes.AddAcked(r.Header.Revision, evs...)
			tw.acked++
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// recorder collects operations from every client.
type recorder struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
}

func (r *recorder) now() int64 { return time.Since(r.start).Nanoseconds() }

func (r *recorder) add(client int, call int64, in lz.Input, out lz.Output) {
	ret := r.now()
	if out.Unknown {
		ret = lz.Infinity
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, porcupine.Operation{ClientId: client, Call: call, Return: ret, Input: in, Output: out})
}

func (r *recorder) history() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]porcupine.Operation(nil), r.ops...)
}

// opMix is the share of each operation in percent, drawn from the seed.
type opMix struct{ Get, Put, Delete, CAS int }

func newOpMix(rng *rand.Rand) opMix {
	m := opMix{Get: 30 + rng.IntN(30), Put: 20 + rng.IntN(20), Delete: 5 + rng.IntN(10)}
	m.CAS = 100 - m.Get - m.Put - m.Delete
	return m
}

func (m opMix) pick(rng *rand.Rand) lz.Kind {
	switch p := rng.IntN(100); {
	case p < m.Get:
		return lz.Get
	case p < m.Get+m.Put:
		return lz.Put
	case p < m.Get+m.Put+m.Delete:
		return lz.Delete
	}
	return lz.CompareAndPut
}

// runClient issues random operations until ctx ends. Every put writes a
// value no other put writes, so a read names the write it saw.
func runClient(ctx context.Context, rec *recorder, cli *clientv3.Client, id int, rng *rand.Rand, mix opMix) {
	lastSeen := map[string]string{}
	for seq := 0; ctx.Err() == nil; seq++ {
		key := fmt.Sprintf("lz/%d", rng.IntN(lzKeys))
		val := fmt.Sprintf("c%d-%d", id, seq)
		in := lz.Input{Kind: mix.pick(rng), Key: key}
		switch in.Kind {
		case lz.Put:
			in.Value = val
		case lz.CompareAndPut:
			in.Value, in.Expect = val, lastSeen[key]
		}
		call := rec.now()
		octx, cancel := context.WithTimeout(ctx, lzOpTimeout)
		out, err := do(octx, cli, in)
		cancel()
		if err != nil {
			if in.Kind == lz.Get {
				// A failed read changed nothing and showed nothing.
				continue
			}
			out = lz.Output{Unknown: true}
		} else if in.Kind == lz.Get && out.Exists {
			lastSeen[key] = out.Value
		}
		rec.add(id, call, in, out)
	}
}

func do(ctx context.Context, cli *clientv3.Client, in lz.Input) (lz.Output, error) {
	switch in.Kind {
	case lz.Get:
		r, err := cli.Get(ctx, in.Key)
		if err != nil {
			return lz.Output{}, err
		}
		out := lz.Output{Rev: r.Header.Revision}
		if len(r.Kvs) > 0 {
			out.Exists, out.Value, out.ModRev = true, string(r.Kvs[0].Value), r.Kvs[0].ModRevision
		}
		return out, nil
	case lz.Put:
		r, err := cli.Put(ctx, in.Key, in.Value)
		if err != nil {
			return lz.Output{}, err
		}
		return lz.Output{Rev: r.Header.Revision}, nil
	case lz.Delete:
		r, err := cli.Delete(ctx, in.Key)
		if err != nil {
			return lz.Output{}, err
		}
		return lz.Output{Rev: r.Header.Revision, Deleted: r.Deleted}, nil
	case lz.CompareAndPut:
		r, err := cli.Txn(ctx).
			If(clientv3.Compare(clientv3.Value(in.Key), "=", in.Expect)).
			Then(clientv3.OpPut(in.Key, in.Value)).
			Commit()
		if err != nil {
			return lz.Output{}, err
		}
		return lz.Output{Rev: r.Header.Revision, Succeeded: r.Succeeded}, nil
	}
	return lz.Output{}, fmt.Errorf("unknown operation %v", in.Kind)
}

// fault is one step of a fault schedule.
type fault struct {
	Kind string // kill, partition, pause, compact
	// Leader: the fault hits the leader at that moment, else Member.
	Leader bool
	Member int
	// Gap is the wait before the fault, Dur how long it lasts.
	Gap, Dur time.Duration
	// CompactDown (kill): compact while the member is down.
	CompactDown bool
}

func (f fault) String() string {
	who := fmt.Sprintf("m%d", f.Member)
	if f.Leader {
		who = "leader"
	}
	switch f.Kind {
	case "compact":
		return fmt.Sprintf("+%v compact", f.Gap.Round(time.Millisecond))
	case "kill":
		c := ""
		if f.CompactDown {
			c = "+compact"
		}
		return fmt.Sprintf("+%v kill%s %s %v", f.Gap.Round(time.Millisecond), c, who, f.Dur.Round(time.Millisecond))
	}
	return fmt.Sprintf("+%v %s %s %v", f.Gap.Round(time.Millisecond), f.Kind, who, f.Dur.Round(time.Millisecond))
}

func randDur(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

// newFaultSchedule draws a schedule that fits in d: one of each kind of
// fault in a random order, a compaction between them, sometimes one more
// fault.
func newFaultSchedule(rng *rand.Rand, d time.Duration) []fault {
	kinds := []string{"kill", "partition", "pause"}
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	if rng.IntN(2) == 0 {
		kinds = append(kinds, []string{"kill", "partition", "pause"}[rng.IntN(3)])
	}
	at := rng.IntN(len(kinds) + 1)
	kinds = append(kinds[:at], append([]string{"compact"}, kinds[at:]...)...)
	var out []fault
	var total time.Duration
	for i, k := range kinds {
		f := fault{Kind: k, Member: rng.IntN(3), Leader: rng.IntN(2) == 0}
		if i == 0 {
			f.Gap = randDur(rng, time.Second, 2*time.Second)
		} else {
			f.Gap = randDur(rng, 300*time.Millisecond, 1200*time.Millisecond)
		}
		switch k {
		case "kill":
			f.Dur = randDur(rng, 500*time.Millisecond, 2*time.Second)
			f.CompactDown = rng.IntN(2) == 0
		case "partition":
			f.Leader = true
			f.Dur = randDur(rng, time.Second, 3*time.Second)
		case "pause":
			f.Dur = randDur(rng, 500*time.Millisecond, 3*time.Second)
		case "compact":
			f.Leader = false
		}
		if total+f.Gap+f.Dur > d-time.Second {
			break
		}
		total += f.Gap + f.Dur
		out = append(out, f)
	}
	return out
}

// faultRun carries out a fault schedule from the test goroutine. Every
// fault is undone before the next (and before run returns), even when the
// workload ends first.
type faultRun struct {
	t           *testing.T
	c           *harness.Cluster
	ctx         context.Context
	cli         *clientv3.Client
	did         []string
	compactions []int64
}

func (fr *faultRun) wait(d time.Duration) bool {
	select {
	case <-time.After(d):
		return true
	case <-fr.ctx.Done():
		return false
	}
}

func (fr *faultRun) target(f fault) *harness.Process {
	if f.Leader {
		return fr.c.Members()[fr.c.WaitLeader(fr.t, leaderBound)]
	}
	return fr.c.Members()[f.Member]
}

// compact compacts at the current revision. The revision is recorded even
// when the call fails: it may have been applied.
func (fr *faultRun) compact() {
	ctx, cancel := context.WithTimeout(context.Background(), lzOpTimeout)
	defer cancel()
	r, err := fr.cli.Get(ctx, "lz/")
	if err != nil {
		fr.did = append(fr.did, "compact: get revision: "+err.Error())
		return
	}
	rev := r.Header.Revision
	fr.compactions = append(fr.compactions, rev)
	if _, err := fr.cli.Compact(ctx, rev); err != nil {
		fr.did = append(fr.did, fmt.Sprintf("compact %d: %v", rev, err))
		return
	}
	fr.did = append(fr.did, fmt.Sprintf("compact %d", rev))
}

func (fr *faultRun) run(schedule []fault) {
	t := fr.t
	for _, f := range schedule {
		if !fr.wait(f.Gap) {
			return
		}
		switch f.Kind {
		case "compact":
			fr.compact()
		case "kill":
			m := fr.target(f)
			m.Kill()
			fr.did = append(fr.did, "kill "+m.Name())
			if f.CompactDown && fr.wait(f.Dur/2) {
				fr.compact()
				fr.wait(f.Dur / 2)
			} else {
				fr.wait(f.Dur)
			}
			m.Restart()
			fr.did = append(fr.did, "restart "+m.Name())
		case "partition":
			m := fr.target(f)
			fr.c.Isolate(t, m)
			fr.did = append(fr.did, "isolate "+m.Name())
			fr.wait(f.Dur)
			fr.c.Heal(t)
			fr.did = append(fr.did, "heal")
		case "pause":
			m := fr.target(f)
			m.Pause()
			fr.did = append(fr.did, "pause "+m.Name())
			fr.wait(f.Dur)
			m.Resume()
			fr.did = append(fr.did, "resume "+m.Name())
		}
	}
}
