package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
)

// keepaliveTime is how often an idle peer connection is pinged, so that a
// peer lost behind a partition is noticed without traffic.
const keepaliveTime = 10 * time.Second

// ProbeInterval is how often an open stream's peer is probed for the round
// trip time (etcd probes every 4s, after its 5s read timeout less one).
const ProbeInterval = 4 * time.Second

// probeTimeout bounds one probe; a probe that times out is not observed.
const probeTimeout = 5 * time.Second

// errURLsChanged ends a stream whose peer moved.
var errURLsChanged = errors.New("peer URLs changed")

// peer owns the stream to one member. Only run's goroutine writes the stream.
type peer struct {
	t     *Transport
	id    uint64
	queue chan *raftpb.Message

	ctx    context.Context // ends when the peer is removed or the transport stops
	cancel context.CancelFunc
	done   chan struct{} // closed when run returns

	sent, sentBytes, dropped atomic.Uint64
	// recvBytes counts the raft frames the peer's stream to this member
	// delivered (server.go).
	recvBytes atomic.Uint64

	mu           sync.Mutex
	urls         []string
	targets      []target // urls, same order
	next         int      // index in targets of the next attempt
	gen          uint64   // bumped when urls change
	streamCancel context.CancelCauseFunc
	active       bool
	features     string // the open stream's ack: what the peer's build reads
	since        time.Time
	lastErr      error
	lastErrAt    time.Time
}

func newPeer(t *Transport, id uint64, urls []string, targets []target) *peer {
	ctx, cancel := context.WithCancel(t.ctx)
	return &peer{
		t:       t,
		id:      id,
		queue:   make(chan *raftpb.Message, t.cfg.QueueSize),
		ctx:     ctx,
		cancel:  cancel,
		done:    make(chan struct{}),
		urls:    urls,
		targets: targets,
	}
}

func (p *peer) stop() {
	p.cancel()
	<-p.done
}

func (p *peer) setURLs(urls []string, targets []target) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if slices.Equal(p.urls, urls) {
		return
	}
	p.urls, p.targets, p.next = urls, targets, 0
	p.gen++
	if p.streamCancel != nil {
		p.streamCancel(errURLsChanged)
	}
}

func (p *peer) status() PeerStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	return PeerStatus{
		ID:          p.id,
		URLs:        append([]string(nil), p.urls...),
		Active:      p.active,
		Since:       p.since,
		LastError:   p.lastErr,
		LastErrorAt: p.lastErrAt,
		SentMsgs:    p.sent.Load(),
		SentBytes:   p.sentBytes.Load(),
		Dropped:     p.dropped.Load(),

		ReceivedBytes: p.recvBytes.Load(),
	}
}

// run keeps a stream open to the peer until the peer is removed or the
// transport stops, backing off exponentially between failed attempts.
func (p *peer) run() {
	defer close(p.done)
	backoff := minBackoff
	for {
		p.mu.Lock()
		target, gen := p.targets[p.next%len(p.targets)], p.gen
		p.mu.Unlock()
		opened, err := p.session(target)
		if p.ctx.Err() != nil {
			return
		}
		p.t.noteRefusal(err)
		now := time.Now()
		p.mu.Lock()
		if p.active || p.since.IsZero() {
			p.since = now
		}
		p.active, p.features = false, ""
		p.lastErr, p.lastErrAt = err, now
		if !opened && gen == p.gen {
			p.next++ // try the peer's next URL
		}
		p.mu.Unlock()
		if opened {
			backoff = minBackoff
			p.t.lg.Warn("peer stream broke", zap.String("peer", fmt.Sprintf("%x", p.id)), zap.Error(err))
		} else {
			p.t.lg.Debug("open peer stream", zap.String("peer", fmt.Sprintf("%x", p.id)), zap.Error(err))
		}
		// What waited for a dead stream is stale by the time one opens;
		// raft retransmits what matters.
		if n := p.dropQueued(); n > 0 || opened {
			p.t.cfg.Unreachable(p.id)
		}
		timer := time.NewTimer(backoff)
		select {
		case <-p.ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

func (p *peer) dropQueued() int {
	n := 0
	for {
		select {
		case <-p.queue:
			n++
		default:
			p.dropped.Add(uint64(n))
			return n
		}
	}
}

// session opens a stream to target and writes frames to it until it breaks.
// opened reports whether the peer accepted the stream.
func (p *peer) session(target target) (opened bool, err error) {
	t := p.t
	cc, err := target.dial(t.dialOptions())
	if err != nil {
		return false, fmt.Errorf("dial peer %x at %s: %w", p.id, target, err)
	}
	defer cc.Close()

	ctx, cancel := context.WithCancelCause(p.ctx)
	defer cancel(nil)
	p.mu.Lock()
	p.streamCancel = cancel
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.streamCancel = nil
		p.mu.Unlock()
	}()

	ctx = metadata.NewOutgoingContext(ctx, t.streamMD(p.id))
	timer := time.AfterFunc(t.cfg.DialTimeout, func() {
		cancel(fmt.Errorf("no answer within %v", t.cfg.DialTimeout))
	})
	stream, err := cc.NewStream(ctx, &raftStreamDesc, raftMethod, grpc.CallContentSubtype(codecName))
	var ack []byte
	if err == nil {
		err = stream.RecvMsg(&ack)
	}
	if !timer.Stop() || err != nil {
		return false, fmt.Errorf("open raft stream to %x at %s: %w", p.id, target, causeOr(ctx, err))
	}

	p.mu.Lock()
	p.active, p.features, p.since, p.lastErr = true, string(ack), time.Now(), nil
	p.mu.Unlock()

	// The peer never writes after the ack; RecvMsg returns when the stream
	// ends, which wakes the writer even while it has nothing to send.
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		var b []byte
		err := stream.RecvMsg(&b)
		if err == nil || errors.Is(err, io.EOF) {
			err = errors.New("peer closed the stream")
		}
		cancel(err)
	}()
	probeDone := make(chan struct{})
	go func() {
		defer close(probeDone)
		p.probe(ctx, cc)
	}()
	err = p.write(ctx, stream)
	cancel(err)
	<-recvDone
	<-probeDone
	return true, fmt.Errorf("raft stream to %x at %s: %w", p.id, target, err)
}

// write sends the queue in frames until the stream fails.
func (p *peer) write(ctx context.Context, stream grpc.ClientStream) error {
	limit := p.t.cfg.MaxFrameBytes
	var batch []*raftpb.Message
	var sizes []int
	for {
		var m *raftpb.Message
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case m = <-p.queue:
		}
		ms, size := frameSize(m)
		batch, sizes = append(batch[:0], m), append(sizes[:0], ms)
	drain:
		for size < limit {
			select {
			case m = <-p.queue:
				ms, fs := frameSize(m)
				batch, sizes = append(batch, m), append(sizes, ms)
				size += fs
			default:
				break drain
			}
		}
		frame := make([]byte, 0, size)
		n := 0
		for i, m := range batch {
			var err error
			if frame, err = appendMessage(frame, m, sizes[i]); err != nil {
				// Cannot happen for messages raft built; skip rather than wedge.
				p.t.lg.Error("encode raft message", zap.Stringer("type", m.GetType()), zap.Error(err))
				p.dropped.Add(1)
				continue
			}
			n++
		}
		clear(batch)
		if n == 0 {
			continue
		}
		if err := stream.SendMsg(&frame); err != nil {
			p.dropped.Add(uint64(n))
			if errors.Is(err, io.EOF) {
				// The stream ended; its status arrives through the receiver.
				<-ctx.Done()
				err = context.Cause(ctx)
			}
			return err
		}
		p.sent.Add(uint64(n))
		p.sentBytes.Add(uint64(len(frame)))
	}
}

// probe times a Probe call over cc at once and then every ProbeInterval
// until ctx ends, and reports each answered one to Config.RTT. A peer of a
// version without Probe answers Unimplemented, which is not reported.
func (p *peer) probe(ctx context.Context, cc *grpc.ClientConn) {
	rtt := p.t.cfg.RTT
	if rtt == nil {
		return
	}
	tick := time.NewTimer(0)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		req, resp := []byte{}, []byte{}
		start := time.Now()
		err := cc.Invoke(pctx, probeMethod, &req, &resp, grpc.CallContentSubtype(codecName))
		d := time.Since(start)
		cancel()
		if err == nil {
			rtt(p.id, d)
		}
		tick.Reset(ProbeInterval)
	}
}

func causeOr(ctx context.Context, err error) error {
	if c := context.Cause(ctx); c != nil && ctx.Err() != nil {
		return c
	}
	return err
}

func (t *Transport) dialOptions() dialOptions {
	return dialOptions{tls: t.cfg.TLS, opts: append([]grpc.DialOption{
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: keepaliveTime / 2, PermitWithoutStream: true}),
		grpc.WithInitialWindowSize(windowSize),
		grpc.WithInitialConnWindowSize(windowSize),
	}, t.cfg.DialOptions...)}
}

// dialOptions are the options of a dial to any peer, and the credentials
// of https peer URLs.
type dialOptions struct {
	tls  credentials.TransportCredentials
	opts []grpc.DialOption
}

// target is one peer URL: the address, and whether it is https.
type target struct {
	addr   string
	secure bool
}

func (t target) String() string {
	if t.secure {
		return "https://" + t.addr
	}
	return "http://" + t.addr
}

// dial returns a client for the target: TLS with o.tls for https (the
// system roots when the member has no peer TLS configuration), plaintext
// otherwise.
func (t target) dial(o dialOptions) (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if t.secure {
		creds = o.tls
		if creds == nil {
			creds = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
		}
	}
	return grpc.NewClient("passthrough:///"+t.addr, append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, o.opts...)...)
}

func (t *Transport) streamMD(to uint64) metadata.MD {
	return metadata.Pairs(
		mdClusterID, strconv.FormatUint(t.cfg.ClusterID, 16),
		mdFrom, strconv.FormatUint(t.cfg.ID, 16),
		mdTo, strconv.FormatUint(to, 16),
	)
}

// parseURLs turns peer URLs (http://host:port or https://host:port) into
// targets.
func parseURLs(urls []string) ([]target, error) {
	if len(urls) == 0 {
		return nil, errors.New("no peer URLs")
	}
	targets := make([]target, 0, len(urls))
	for _, s := range urls {
		u, err := url.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("parse peer URL %q: %w", s, err)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Port() == "" {
			return nil, fmt.Errorf("peer URL %q: want http(s)://host:port", s)
		}
		targets = append(targets, target{addr: u.Host, secure: u.Scheme == "https"})
	}
	return targets, nil
}
