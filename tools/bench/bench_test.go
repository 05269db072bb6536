package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// fakeKV answers Put, Range and Txn from a map and records what it was sent.
type fakeKV struct {
	pb.UnimplementedKVServer
	pb.UnimplementedWatchServer

	// failEvery > 0 fails every failEvery-th request (counted over all kinds).
	failEvery int64

	calls  atomic.Int64
	puts   atomic.Int64
	ranges atomic.Int64
	txns   atomic.Int64

	mu       sync.Mutex
	data     map[string][]byte
	peers    map[string]bool
	lastRng  *pb.RangeRequest
	badTxn   string // first malformed txn seen
	keySizes map[int]bool
	rev      int64
	watchers []*fakeWatcher // live watchers of every stream
	created  int            // watchers ever created
	// dupEvery > 0 sends every dupEvery-th event (counted over all
	// watchers) twice, like a server that breaks uniqueness.
	dupEvery  int
	published int
}

// fakeWatcher is one watcher of a fake Watch stream; out is its stream's
// send queue.
type fakeWatcher struct {
	id       int64
	key, end []byte
	out      chan *pb.WatchResponse
}

// publish queues the event of a put to every watcher covering key. f.mu is held.
func (f *fakeKV) publish(key, value []byte) {
	for _, w := range f.watchers {
		in := string(key) == string(w.key)
		if len(w.end) > 0 {
			in = string(key) >= string(w.key) && string(key) < string(w.end)
		}
		if !in {
			continue
		}
		ev := &mvccpb.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: key, Value: value, ModRevision: f.rev}}
		resp := &pb.WatchResponse{Header: &pb.ResponseHeader{Revision: f.rev}, WatchId: w.id, Events: []*mvccpb.Event{ev}}
		f.published++
		if f.dupEvery > 0 && f.published%f.dupEvery == 0 {
			resp.Events = append(resp.Events, ev)
		}
		w.out <- resp
	}
}

// Watch serves one stream: creates are answered in order with ids from 0,
// events come from Put. The queue is large enough for every test's events,
// so publish never blocks.
func (f *fakeKV) Watch(stream pb.Watch_WatchServer) error {
	out := make(chan *pb.WatchResponse, 1<<16)
	var mine []*fakeWatcher
	defer func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.watchers = slices.DeleteFunc(f.watchers, func(w *fakeWatcher) bool { return slices.Contains(mine, w) })
	}()
	sendErr := make(chan error, 1)
	go func() {
		for {
			select {
			case r := <-out:
				if err := stream.Send(r); err != nil {
					sendErr <- err
					return
				}
			case <-stream.Context().Done():
				return
			}
		}
	}()
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil
		}
		c := req.GetCreateRequest()
		if c == nil {
			continue
		}
		f.mu.Lock()
		w := &fakeWatcher{id: int64(len(mine)), key: c.Key, end: c.RangeEnd, out: out}
		mine = append(mine, w)
		f.watchers = append(f.watchers, w)
		f.created++
		out <- &pb.WatchResponse{Header: &pb.ResponseHeader{Revision: f.rev}, WatchId: w.id, Created: true}
		f.mu.Unlock()
		select {
		case err := <-sendErr:
			return err
		default:
		}
	}
}

func (f *fakeKV) createdWatchers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.created
}

func (f *fakeKV) liveWatchers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.watchers)
}

func newFakeKV() *fakeKV {
	return &fakeKV{data: map[string][]byte{}, peers: map[string]bool{}, keySizes: map[int]bool{}}
}

func (f *fakeKV) begin(ctx context.Context) error {
	n := f.calls.Add(1)
	if p, ok := peer.FromContext(ctx); ok {
		f.mu.Lock()
		f.peers[p.Addr.String()] = true
		f.mu.Unlock()
	}
	if f.failEvery > 0 && n%f.failEvery == 0 {
		return status.Errorf(codes.Unavailable, "fake failure %d", n)
	}
	return nil
}

func (f *fakeKV) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	if err := f.begin(ctx); err != nil {
		return nil, err
	}
	f.puts.Add(1)
	f.mu.Lock()
	f.data[string(r.Key)] = r.Value
	f.keySizes[len(r.Key)] = true
	f.rev++
	rev := f.rev
	f.publish(r.Key, r.Value)
	f.mu.Unlock()
	return &pb.PutResponse{Header: &pb.ResponseHeader{Revision: rev}}, nil
}

func (f *fakeKV) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	if err := f.begin(ctx); err != nil {
		return nil, err
	}
	f.ranges.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastRng = r
	resp := &pb.RangeResponse{Header: &pb.ResponseHeader{}}
	for k, v := range f.data {
		in := k == string(r.Key)
		if len(r.RangeEnd) > 0 {
			in = k >= string(r.Key) && k < string(r.RangeEnd)
		}
		if in {
			resp.Count++
			if !r.CountOnly && (r.Limit == 0 || int64(len(resp.Kvs)) < r.Limit) {
				resp.Kvs = append(resp.Kvs, &mvccpb.KeyValue{Key: []byte(k), Value: v})
			}
		}
	}
	return resp, nil
}

func (f *fakeKV) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	if err := f.begin(ctx); err != nil {
		return nil, err
	}
	f.txns.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	seen := map[string]bool{}
	for i, op := range r.Success {
		put := op.GetRequestPut()
		switch {
		case put == nil:
			f.noteBadTxn("success op %d is not a put", i)
		case seen[string(put.Key)]:
			f.noteBadTxn("duplicate key %q", put.Key)
		case len(r.Compare) != len(r.Success) || !bytes.Equal(r.Compare[i].Key, put.Key):
			f.noteBadTxn("compare %d does not guard put %q", i, put.Key)
		default:
			seen[string(put.Key)] = true
			f.data[string(put.Key)] = put.Value
		}
	}
	return &pb.TxnResponse{Header: &pb.ResponseHeader{}, Succeeded: true}, nil
}

func (f *fakeKV) noteBadTxn(format string, args ...any) {
	if f.badTxn == "" {
		f.badTxn = fmt.Sprintf(format, args...)
	}
}

func startFake(t *testing.T, f *fakeKV) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	srv := grpc.NewServer()
	pb.RegisterKVServer(srv, f)
	pb.RegisterWatchServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// runJSON runs the tool with --json and decodes its summary.
func runJSON(t *testing.T, addr string, args ...string) (jsonSummary, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	full := append([]string{"--endpoints", addr, "--json", "--dial-timeout", "10s"}, args...)
	code := run(context.Background(), full, &out, &errOut)
	var s jsonSummary
	if code != 1 {
		if err := json.Unmarshal(out.Bytes(), &s); err != nil {
			t.Fatalf("bench %v: decode %q: %v", args, out.String(), err)
		}
	}
	if code == 1 {
		t.Fatalf("bench %v: exit 1: %s", args, errOut.String())
	}
	return s, code
}

func TestPutSequentialCoversKeySpace(t *testing.T) {
	f := newFakeKV()
	addr := startFake(t, f)
	s, code := runJSON(t, addr, "--clients", "7", "--conns", "3", "--total", "200",
		"put", "--key-size", "6", "--val-size", "10", "--key-space-size", "50", "--sequential-keys")
	if code != 0 || s.Requests != 200 || s.Errors != 0 {
		t.Fatalf("exit %d, summary %+v; want 200 requests, no errors", code, s)
	}
	if got := f.puts.Load(); got != 200 {
		t.Errorf("server saw %d puts, want 200", got)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.data) != 50 {
		t.Errorf("sequential keys wrote %d distinct keys, want the whole space of 50", len(f.data))
	}
	for i := range 50 {
		k := fmt.Sprintf("%06d", i)
		if v, ok := f.data[k]; !ok || len(v) != 10 {
			t.Errorf("key %q: present %v, value length %d; want present with 10 bytes", k, ok, len(v))
		}
	}
	if len(f.peers) != 3 {
		t.Errorf("server saw %d connections, want --conns 3", len(f.peers))
	}
	if s.RPS <= 0 || s.LatencyMs.P50 <= 0 || s.LatencyMs.P50 > s.LatencyMs.P99 || s.LatencyMs.P99 > s.LatencyMs.Slowest {
		t.Errorf("latencies out of order: %+v", s.LatencyMs)
	}
}

func TestPutRandomStaysInKeySpace(t *testing.T) {
	f := newFakeKV()
	addr := startFake(t, f)
	s, _ := runJSON(t, addr, "--clients", "4", "--conns", "2", "--total", "300",
		"put", "--key-size", "8", "--key-space-size", "20")
	if s.Requests != 300 {
		t.Fatalf("requests %d, want 300", s.Requests)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for k := range f.data {
		if len(k) != 8 || k < "00000000" || k > "00000019" {
			t.Errorf("key %q outside the 8-byte space of 20", k)
		}
	}
}

func TestRangePrefixPreloads(t *testing.T) {
	for _, tc := range []struct {
		consistency  string
		serializable bool
	}{{"s", true}, {"l", false}} {
		t.Run(tc.consistency, func(t *testing.T) {
			f := newFakeKV()
			addr := startFake(t, f)
			s, code := runJSON(t, addr, "--clients", "5", "--conns", "2", "--total", "40",
				"range", "--prefix", "/p/", "--preload", "30", "--consistency", tc.consistency, "--limit", "7")
			if code != 0 || s.Requests != 40 {
				t.Fatalf("exit %d, %d requests; want 0, 40", code, s.Requests)
			}
			if got := f.puts.Load(); got != 30 {
				t.Errorf("preload sent %d puts, want 30", got)
			}
			// 40 measured plus the preload check.
			if got := f.ranges.Load(); got != 41 {
				t.Errorf("server saw %d ranges, want 41", got)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			r := f.lastRng
			if string(r.Key) != "/p/" || string(r.RangeEnd) != "/p0" || r.Limit != 7 || r.Serializable != tc.serializable {
				t.Errorf("range request %+v; want [/p/, /p0) limit 7 serializable %v", r, tc.serializable)
			}
			if _, ok := f.data["/p/29"]; !ok || len(f.data) != 30 {
				t.Errorf("preloaded %d keys (has /p/29: %v), want /p/00../p/29", len(f.data), ok)
			}
		})
	}
}

func TestRangeSingleKey(t *testing.T) {
	f := newFakeKV()
	addr := startFake(t, f)
	s, _ := runJSON(t, addr, "--clients", "3", "--conns", "1", "--total", "25",
		"range", "--key", "k1", "--preload", "1", "--consistency", "s")
	if s.Requests != 25 || f.puts.Load() != 1 {
		t.Fatalf("requests %d, puts %d; want 25, 1", s.Requests, f.puts.Load())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if r := f.lastRng; string(r.Key) != "k1" || len(r.RangeEnd) != 0 || !r.Serializable {
		t.Errorf("range request %+v; want the single key k1, serializable", r)
	}
}

func TestRangePreloadCheckCatchesLostWrites(t *testing.T) {
	f := &lossyKV{fakeKV: newFakeKV()}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterKVServer(srv, f)
	pb.RegisterWatchServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"--endpoints", lis.Addr().String(), "--total", "5",
		"range", "--prefix", "x", "--preload", "4"}, &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "range found 0 keys, want at least 4") {
		t.Fatalf("exit %d, stderr %q; want exit 1 naming the missing keys", code, errOut.String())
	}
}

// lossyKV acknowledges puts and keeps nothing.
type lossyKV struct{ *fakeKV }

func (l *lossyKV) Put(context.Context, *pb.PutRequest) (*pb.PutResponse, error) {
	return &pb.PutResponse{}, nil
}

func TestTxnComparesAndPutsDistinctKeys(t *testing.T) {
	f := newFakeKV()
	addr := startFake(t, f)
	s, code := runJSON(t, addr, "--clients", "6", "--conns", "2", "--total", "120",
		"txn", "--txn-ops", "3", "--key-space-size", "10")
	if code != 0 || s.Requests != 120 || f.txns.Load() != 120 {
		t.Fatalf("exit %d, requests %d, server txns %d; want 0, 120, 120", code, s.Requests, f.txns.Load())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.badTxn != "" {
		t.Errorf("malformed txn: %s", f.badTxn)
	}
}

func TestErrorsCountedNotTimed(t *testing.T) {
	f := newFakeKV()
	f.failEvery = 4
	addr := startFake(t, f)
	s, code := runJSON(t, addr, "--clients", "4", "--conns", "2", "--total", "100", "put")
	if code != 2 {
		t.Errorf("exit %d, want 2 for failed requests", code)
	}
	if s.Errors != 25 || s.Requests != 75 {
		t.Errorf("errors %d, requests %d; want 25 failed of 100", s.Errors, s.Requests)
	}
	if !strings.Contains(s.FirstError, "fake failure") {
		t.Errorf("first error %q does not carry the server's message", s.FirstError)
	}
}

func TestWarmupIsNotRecorded(t *testing.T) {
	f := newFakeKV()
	addr := startFake(t, f)
	s, _ := runJSON(t, addr, "--clients", "2", "--conns", "1", "--total", "50", "--warmup", "30ms", "put")
	if s.Requests != 50 {
		t.Errorf("recorded %d requests, want only the 50 measured", s.Requests)
	}
	if got := f.puts.Load(); got <= 50 {
		t.Errorf("server saw %d puts; the warm-up should have sent some beyond the 50 measured", got)
	}
}

func TestDurationBoundsTheRunAndReleasesEverything(t *testing.T) {
	f := newFakeKV()
	addr := startFake(t, f)
	base := runtime.NumGoroutine()
	s, code := runJSON(t, addr, "--clients", "20", "--conns", "4", "--duration", "100ms", "put")
	if code != 0 || s.Requests == 0 || s.Requests != f.puts.Load() {
		t.Fatalf("exit %d, requests %d, server puts %d; want every put recorded", code, s.Requests, f.puts.Load())
	}
	if s.TotalSec < 0.1 {
		t.Errorf("ran %.3fs, want at least --duration", s.TotalSec)
	}
	// Loops and connections are gone once run returns; gRPC's own
	// goroutines (client transports, server handlers) wind down
	// asynchronously after Close.
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines left, %d before the run", runtime.NumGoroutine(), base)
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
}

func TestConnectFailureIsASetupError(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"--endpoints", addr, "--dial-timeout", "200ms", "--total", "1", "put"}, &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "connect to "+addr) {
		t.Fatalf("exit %d, stderr %q; want exit 1 naming the endpoint", code, errOut.String())
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"delete"},
		{"put", "--key-size", "2", "--key-space-size", "1000"},
		{"txn", "--txn-ops", "0"},
		{"txn", "--txn-ops", "11", "--key-space-size", "10"},
		{"range"},
		{"range", "--key", "a", "--prefix", "b"},
		{"range", "--key", "a", "--consistency", "x"},
		{"--clients", "0", "put"},
		{"auth"},                                   // needs --user
		{"--user", "nocolon", "put"},               // not name:password
		{"--user", ":pw", "put"},                   // empty name
		{"--cert", "c.pem", "put"},                 // cert without key
		{"--key", "k.pem", "put"},                  // key without cert
		{"--cacert", "/nonexistent/ca.pem", "put"}, // unreadable CA
	} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), args, &out, &errOut); code != 1 {
			t.Errorf("bench %q: exit %d, want 1", args, code)
		}
	}
}

func TestPercentile(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = ms(i + 1)
	}
	thousand := make([]time.Duration, 1000)
	for i := range thousand {
		thousand[i] = ms(i + 1)
	}
	for _, tc := range []struct {
		name string
		data []time.Duration
		p    float64
		want time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one sample", []time.Duration{ms(7)}, 99.9, ms(7)},
		{"1..100 p50", hundred, 50, ms(50)},
		{"1..100 p90", hundred, 90, ms(90)},
		{"1..100 p99", hundred, 99, ms(99)},
		{"1..100 p99.9", hundred, 99.9, ms(100)},
		{"1..100 p100", hundred, 100, ms(100)},
		{"1..1000 p99.9 exact rank", thousand, 99.9, ms(999)},
		{"1..1000 p99", thousand, 99, ms(990)},
		{"four samples p50", []time.Duration{ms(1), ms(2), ms(3), ms(4)}, 50, ms(2)},
		{"four samples p51", []time.Duration{ms(1), ms(2), ms(3), ms(4)}, 51, ms(3)},
		{"tiny p", hundred, 0.001, ms(1)},
	} {
		if got := percentile(tc.data, tc.p); got != tc.want {
			t.Errorf("%s: percentile(%v) = %v, want %v", tc.name, tc.p, got, tc.want)
		}
	}
}

func TestMergeAndStats(t *testing.T) {
	recs := []recorder{
		{lats: []time.Duration{4, 8}},
		{},
		{lats: []time.Duration{2, 6, 10}},
	}
	all := mergeSorted(recs)
	want := []time.Duration{2, 4, 6, 8, 10}
	if fmt.Sprint(all) != fmt.Sprint(want) {
		t.Fatalf("merged %v, want %v", all, want)
	}
	st := statsOf(all)
	// mean 6, squared deviations 16+4+0+4+16 = 40, variance 8.
	if st.fastest != 2 || st.slowest != 10 || st.average != 6 || st.stddev != 3 {
		t.Errorf("stats %+v; want fastest 2, slowest 10, average 6, stddev round(sqrt 8) = 3", st)
	}
	h := histogram(all, 4)
	counts := make([]int, len(h))
	for i, b := range h {
		counts[i] = b.count
	}
	// Buckets (2,4], (4,6], (6,8], (8,10]; 2 lands in the first.
	if fmt.Sprint(counts) != "[2 1 1 1]" || h[3].mark != 10 {
		t.Errorf("histogram %+v; want counts [2 1 1 1], last mark 10", h)
	}
}

func TestKeys(t *testing.T) {
	k := make([]byte, 6)
	fillKey(k, 42)
	if string(k) != "000042" {
		t.Errorf("fillKey(42) = %q, want 000042", k)
	}
	if got := string(preloadKey("/p/", 7, 1000)); got != "/p/007" {
		t.Errorf("preloadKey = %q, want /p/007", got)
	}
	for prefix, want := range map[string]string{"a": "b", "a\xff": "b", "\xff\xff": "\x00", "/p/": "/p0"} {
		if got := string(prefixEnd(prefix)); got != want {
			t.Errorf("prefixEnd(%q) = %q, want %q", prefix, got, want)
		}
	}
}

// runWatchJSON runs the watch command with --json and decodes its summary.
func runWatchJSON(t *testing.T, addr string, args ...string) (jsonWatch, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	full := append([]string{"--endpoints", addr, "--json", "--conns", "2", "--dial-timeout", "10s"}, args...)
	code := run(context.Background(), full, &out, &errOut)
	if code == 1 {
		t.Fatalf("bench %v: exit 1: %s", args, errOut.String())
	}
	var s jsonWatch
	if err := json.Unmarshal(out.Bytes(), &s); err != nil {
		t.Fatalf("bench %v: decode %q: %v", args, out.String(), err)
	}
	return s, code
}

func TestWatchCountsEveryEvent(t *testing.T) {
	for _, tc := range []struct {
		name           string
		args           []string
		watchers, puts int
		wantEvents     int64
	}{
		{"distinct keys", nil, 20, 70, 70},
		{"shared prefix", []string{"--shared-prefix"}, 10, 30, 300},
		{"one watcher", nil, 1, 15, 15},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeKV()
			addr := startFake(t, f)
			args := append([]string{"watch", "--watchers", fmt.Sprint(tc.watchers), "--streams", "3",
				"--puts", fmt.Sprint(tc.puts), "--put-rate", "0", "--put-clients", "4"}, tc.args...)
			s, code := runWatchJSON(t, addr, args...)
			if code != 0 {
				t.Fatalf("exit %d, summary %+v; want 0", code, s)
			}
			if s.Puts != int64(tc.puts) || f.puts.Load() != int64(tc.puts) {
				t.Errorf("puts %d, server saw %d; want %d", s.Puts, f.puts.Load(), tc.puts)
			}
			if s.Events != tc.wantEvents || s.Expected != tc.wantEvents {
				t.Errorf("events %d of %d expected, want %d", s.Events, s.Expected, tc.wantEvents)
			}
			if s.Missing != 0 || s.Extra != 0 || s.Duplicates != 0 || s.Foreign != 0 {
				t.Errorf("short %d, over %d, duplicates %d, foreign %d; want none", s.Missing, s.Extra, s.Duplicates, s.Foreign)
			}
			if s.Streams != min(3, tc.watchers) {
				t.Errorf("streams %d, want %d", s.Streams, min(3, tc.watchers))
			}
			l := s.LatencyMs
			if l.Fastest <= 0 || l.Fastest > l.P50 || l.P50 > l.P99 || l.P99 > l.P999 || l.P999 > l.Slowest || s.EventsPerSec <= 0 {
				t.Errorf("latencies out of order or missing: %+v, events/s %v", l, s.EventsPerSec)
			}
			if pl := s.PutLatencyMs; pl.Fastest <= 0 || pl.Fastest > pl.P50 || pl.P50 > pl.P99 || pl.P99 > pl.P999 || pl.P999 > pl.Slowest {
				t.Errorf("put latencies out of order or missing: %+v", pl)
			}
			if f.createdWatchers() != tc.watchers {
				t.Errorf("server created %d watchers, want %d", f.createdWatchers(), tc.watchers)
			}
			waitFor(t, "watchers released", func() bool { return f.liveWatchers() == 0 })
		})
	}
}

func TestWatchReportsDuplicates(t *testing.T) {
	f := newFakeKV()
	f.dupEvery = 5
	addr := startFake(t, f)
	s, code := runWatchJSON(t, addr, "watch", "--watchers", "4", "--streams", "2", "--puts", "20", "--put-rate", "0")
	if code != 2 {
		t.Fatalf("exit %d, want 2 for a run with duplicate events", code)
	}
	if s.Duplicates != 4 || s.Events != 24 || s.Expected != 20 || s.Extra == 0 {
		t.Errorf("duplicates %d, events %d of %d, over %d; want 4 duplicates, 24 of 20 events", s.Duplicates, s.Events, s.Expected, s.Extra)
	}
}

func TestWatchPutRateBoundsThePuts(t *testing.T) {
	f := newFakeKV()
	addr := startFake(t, f)
	s, code := runWatchJSON(t, addr, "watch", "--watchers", "2", "--puts", "11", "--put-rate", "100")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	// Put j is not sent before j/rate seconds after the first: 10 gaps of 10ms.
	if s.PutSec < 0.1 {
		t.Errorf("11 puts at 100/s took %.3fs, want at least 0.1s", s.PutSec)
	}
}

func TestIdleWatchersHeldDuringPut(t *testing.T) {
	f := newFakeKV()
	addr := startFake(t, f)
	s, code := runJSON(t, addr, "--clients", "4", "--conns", "2", "--total", "100",
		"--idle-watchers", "50", "--idle-streams", "3", "put", "--key-space-size", "10")
	if code != 0 || s.Requests != 100 || s.IdleWatchers != 50 {
		t.Fatalf("exit %d, requests %d, idle watchers %d; want 0, 100, 50", code, s.Requests, s.IdleWatchers)
	}
	if f.createdWatchers() != 50 {
		t.Errorf("server created %d watchers, want 50", f.createdWatchers())
	}
	waitFor(t, "idle watchers released", func() bool { return f.liveWatchers() == 0 })
}

func TestStamp(t *testing.T) {
	v := make([]byte, 20)
	stamp(v, 12345, 987*time.Millisecond)
	seq, sent, ok := unstamp(v)
	if !ok || seq != 12345 || sent != 987*time.Millisecond {
		t.Errorf("unstamp = %d, %v, %v; want 12345, 987ms, true", seq, sent, ok)
	}
	if _, _, ok := unstamp(v[:15]); ok {
		t.Error("unstamp of a 15-byte value succeeded")
	}
}

func TestWatchSpecMatches(t *testing.T) {
	one := watchSpec{key: []byte("a/1")}
	pre := watchSpec{key: []byte("a/"), end: prefixEnd("a/")}
	for _, tc := range []struct {
		s    watchSpec
		k    string
		want bool
	}{
		{one, "a/1", true}, {one, "a/10", false}, {pre, "a/10", true}, {pre, "a/", true}, {pre, "b", false}, {pre, "a", false},
	} {
		if got := tc.s.matches([]byte(tc.k)); got != tc.want {
			t.Errorf("%q matches %q = %v, want %v", tc.s.key, tc.k, got, tc.want)
		}
	}
}

// waitFor polls cond until it holds or 10 seconds pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 10s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestPutKeyPrefix(t *testing.T) {
	f := newFakeKV()
	addr := startFake(t, f)
	s, _ := runJSON(t, addr, "--clients", "2", "--conns", "1", "--total", "50",
		"put", "--key-prefix", "/tenants/alice/", "--key-size", "4", "--key-space-size", "10")
	if s.Requests != 50 {
		t.Fatalf("requests %d, want 50", s.Requests)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for k := range f.data {
		if !strings.HasPrefix(k, "/tenants/alice/") || len(k) != len("/tenants/alice/")+4 || k[len("/tenants/alice/"):] > "0009" {
			t.Errorf("key %q: want /tenants/alice/ and 4 digits below 10", k)
		}
	}
}
