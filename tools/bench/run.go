package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// runOptions are the global flags: how much load, from how many loops.
type runOptions struct {
	endpoints      []string
	clients        int
	conns          int
	total          int64         // requests to measure; 0 means no bound
	duration       time.Duration // measuring time; 0 means no bound
	warmup         time.Duration
	dialTimeout    time.Duration
	requestTimeout time.Duration
	idleWatchers   int // watchers held on never-written keys while measuring
	idleStreams    int
	sec            security
	cpuPID         int // > 0: report this process's CPU time while measuring
}

func (o runOptions) validate() error {
	switch {
	case len(o.endpoints) == 0:
		return errors.New("--endpoints is empty")
	case o.clients < 1 || o.conns < 1:
		return fmt.Errorf("--clients and --conns must be at least 1, got %d and %d", o.clients, o.conns)
	case o.total < 0 || o.duration < 0 || o.warmup < 0:
		return errors.New("--total, --duration and --warmup must not be negative")
	case o.idleWatchers < 0 || o.idleStreams < 1:
		return errors.New("--idle-watchers must not be negative and --idle-streams must be at least 1")
	case o.total == 0 && o.duration == 0:
		return errors.New("one of --total and --duration must bound the run")
	}
	return nil
}

// dial opens n connections spread round-robin over the endpoints and waits
// until each is ready and, with --user, has authenticated, so neither
// connection setup nor the first login is measured.
func dial(ctx context.Context, endpoints []string, n int, timeout time.Duration, sec security) ([]*grpc.ClientConn, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conns := make([]*grpc.ClientConn, 0, n)
	tokens := make([]*tokenSource, 0, n)
	closeAll := func() {
		for _, cc := range conns {
			_ = cc.Close()
		}
	}
	for i := range n {
		ep := endpoints[i%len(endpoints)]
		target, useTLS, err := grpcTarget(ep, sec.tls != nil)
		if err != nil {
			closeAll()
			return nil, err
		}
		creds := insecure.NewCredentials()
		if useTLS {
			cfg := sec.tls
			if cfg == nil {
				cfg = &tls.Config{MinVersion: tls.VersionTLS12}
			}
			creds = credentials.NewTLS(cfg)
		}
		opts := []grpc.DialOption{
			grpc.WithTransportCredentials(creds),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32)),
		}
		var ts *tokenSource
		if sec.user != nil {
			ts = &tokenSource{user: sec.user, reauths: sec.reauths}
			opts = append(opts, grpc.WithUnaryInterceptor(ts.unary), grpc.WithStreamInterceptor(ts.stream))
		} else if sec.token != "" {
			t := staticToken(sec.token)
			opts = append(opts, grpc.WithUnaryInterceptor(t.unary), grpc.WithStreamInterceptor(t.stream))
		}
		cc, err := grpc.NewClient(target, opts...)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("connect to %s: %w", ep, err)
		}
		if ts != nil {
			ts.auth = pb.NewAuthClient(cc)
			tokens = append(tokens, ts)
		}
		conns = append(conns, cc)
		cc.Connect()
	}
	for i, cc := range conns {
		for s := cc.GetState(); s != connectivity.Ready; s = cc.GetState() {
			if !cc.WaitForStateChange(ctx, s) {
				closeAll()
				return nil, fmt.Errorf("connect to %s: not ready after %v (state %s)", endpoints[i%len(endpoints)], timeout, s)
			}
		}
	}
	// One login per connection, all at once: a server that checks one
	// password at a time makes this take n bcrypt checks.
	errs := make([]error, len(tokens))
	var wg sync.WaitGroup
	for i, ts := range tokens {
		wg.Go(func() { errs[i] = ts.refresh(ctx, "") })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("connect to %s: %w", endpoints[i%len(endpoints)], err)
		}
	}
	return conns, nil
}

// phaseResult is what the client loops of one phase saw.
type phaseResult struct {
	elapsed  time.Duration
	recs     []recorder
	errors   int64
	firstErr error
}

// runPhase runs one loop per entry of loops until limit requests were issued
// (limit > 0), d has passed (d > 0), or ctx is done, and returns once every
// loop has ended. A request in flight when the time is up is let finish.
// With record false the latencies are not kept (warm-up).
func runPhase(ctx context.Context, kvs []client, loops []requestFunc, limit int64, d, reqTimeout time.Duration, record bool) phaseResult {
	var (
		issued   atomic.Int64
		stopped  atomic.Bool
		errCount atomic.Int64
		errOnce  sync.Once
		firstErr error
		wg       sync.WaitGroup
	)
	recs := make([]recorder, len(loops))
	if record && limit > 0 {
		per := int(limit/int64(len(loops))) + 1
		for i := range recs {
			recs[i].lats = make([]time.Duration, 0, per)
		}
	}
	start := time.Now()
	if d > 0 {
		timer := time.AfterFunc(d, func() { stopped.Store(true) })
		defer timer.Stop()
	}
	for i, do := range loops {
		kv := kvs[i%len(kvs)]
		rec := &recs[i]
		wg.Go(func() {
			for !stopped.Load() && ctx.Err() == nil {
				seq := issued.Add(1) - 1
				if limit > 0 && seq >= limit {
					return
				}
				t0 := time.Now()
				err := call(ctx, do, kv, seq, reqTimeout)
				lat := time.Since(t0)
				if err != nil {
					if ctx.Err() != nil {
						return // interrupted: not the server's error
					}
					errCount.Add(1)
					errOnce.Do(func() { firstErr = err })
					continue
				}
				if record {
					rec.record(lat)
				}
			}
		})
	}
	wg.Wait()
	return phaseResult{elapsed: time.Since(start), recs: recs, errors: errCount.Load(), firstErr: firstErr}
}

func call(ctx context.Context, do requestFunc, kv client, seq int64, timeout time.Duration) error {
	if timeout <= 0 {
		return do(ctx, kv, seq)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return do(ctx, kv, seq)
}

// bench connects, prepares the workload, warms up, measures and closes the
// connections again.
func bench(ctx context.Context, o runOptions, name string, w workload) (*summary, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	conns, err := dial(ctx, o.endpoints, o.conns, o.dialTimeout, o.sec)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, cc := range conns {
			_ = cc.Close()
		}
	}()
	cls := make([]client, len(conns))
	kvs := make([]pb.KVClient, len(conns))
	for i, cc := range conns {
		kvs[i] = pb.NewKVClient(cc)
		cls[i] = client{KVClient: kvs[i], auth: pb.NewAuthClient(cc)}
	}
	if o.idleWatchers > 0 {
		wconns, err := dial(ctx, o.endpoints, min(o.idleStreams, o.idleWatchers), o.dialTimeout, o.sec)
		if err != nil {
			return nil, err
		}
		defer closeConns(wconns)
		ws, err := startWatchers(ctx, wconns, idleSpecs(o.idleWatchers), o.idleStreams, time.Now())
		if err != nil {
			return nil, fmt.Errorf("idle watchers: %w", err)
		}
		// Closed before the connections (defers run last-in first-out).
		defer ws.close()
	}
	if err := w.prepare(ctx, kvs, o.clients); err != nil {
		return nil, fmt.Errorf("prepare %s: %w", name, err)
	}
	loops := make([]requestFunc, o.clients)
	for i := range loops {
		loops[i] = w.newLoop()
	}
	if o.warmup > 0 {
		runPhase(ctx, cls, loops, 0, o.warmup, o.requestTimeout, false)
	}
	var cpu0 time.Duration
	if o.cpuPID > 0 {
		if cpu0, err = processCPU(o.cpuPID); err != nil {
			return nil, fmt.Errorf("--cpu-pid: %w", err)
		}
	}
	res := runPhase(ctx, cls, loops, o.total, o.duration, o.requestTimeout, true)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s interrupted: %w", name, err)
	}
	s := summarize(name, res)
	if o.cpuPID > 0 {
		cpu1, err := processCPU(o.cpuPID)
		if err != nil {
			return nil, fmt.Errorf("--cpu-pid: %w", err)
		}
		s.CPU = cpu1 - cpu0
	}
	s.Endpoints, s.Clients, s.Conns, s.IdleWatchers = o.endpoints, o.clients, o.conns, o.idleWatchers
	s.TLS, s.User = o.sec.tlsMode(), o.sec.userName()
	if o.sec.reauths != nil {
		s.Reauths = o.sec.reauths.Load()
	}
	return s, nil
}
