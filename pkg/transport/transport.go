// Package transport carries raft messages and snapshots between kvd members
// over gRPC.
//
// Each peer gets one long-lived client stream, written by one goroutine, so
// messages to a peer arrive in the order Send was called for them. The writer
// drains its bounded queue into one frame per write. When the queue is full,
// or the stream breaks, messages are dropped and the peer is reported
// unreachable: raft retransmits, and a send never blocks the raft loop.
//
// Snapshots go on a stream of their own (one connection per snapshot), in
// chunks of at most ChunkSize bytes, read by the receiver's ReceiveSnapshot as
// they arrive; a trailer carries their CRC-32C, checked before the reader
// ends. (It catches a stream damaged or cut on the way; what a stream carries
// checks itself end to end: a backend dump ends with its SHA-256.)
//
// Every stream carries the cluster ID and the sender's and receiver's member
// IDs; a stream from another cluster, to another member, or from a removed
// member is refused.
package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
)

// Defaults for the zero values of Config.
const (
	DefaultQueueSize       = 4096
	DefaultMaxFrameBytes   = 1 << 20
	DefaultChunkSize       = 1 << 20
	DefaultMaxMessageBytes = 64 << 20
	DefaultDialTimeout     = 5 * time.Second
)

// windowSize is the HTTP/2 flow-control window of peer streams and
// connections: a peer link carries few streams that each want a full
// MsgApp or snapshot chunk in flight, which the 64 KiB default stalls.
const windowSize = 4 << 20

// Backoff between attempts to open a peer's stream.
const (
	minBackoff = 20 * time.Millisecond
	maxBackoff = time.Second
)

// Config configures a Transport. Callbacks may run on any goroutine,
// including the one calling Send, and concurrently with each other; they must
// not block for long and must not call Stop.
type Config struct {
	ID        uint64 // this member; required
	ClusterID uint64 // required; streams from other clusters are refused
	Logger    *zap.Logger

	// Receive gets the messages of one frame from one peer, in the order they
	// were sent. Required. The transport does not retain msgs.
	Receive func(msgs []*raftpb.Message)
	// ReceiveSnapshot gets a MsgSnap and its data as it arrives. data ends
	// with io.EOF only once all of it arrived and matched the sender's
	// checksum; any other error means the snapshot is broken. The callee must
	// read data to io.EOF before it accepts the snapshot (returns nil), and
	// must leave nothing of it behind when it fails; on an error the sender
	// is told the snapshot failed. It runs on the stream's goroutine and the
	// sender waits for it. Nil refuses snapshots.
	ReceiveSnapshot func(m *raftpb.Message, data io.Reader) error
	// Unreachable is told of a peer to which messages were dropped; the raft
	// driver forwards it to RawNode.ReportUnreachable. Optional.
	Unreachable func(id uint64)
	// SnapshotStatus reports the outcome of SendSnapshot: ok is true once the
	// receiver accepted the snapshot (raft.SnapshotFinish), false otherwise
	// (raft.SnapshotFailure). Optional.
	SnapshotStatus func(id uint64, ok bool)
	// Removed is called once when a peer refuses this member's stream
	// because the cluster removed this member: a member cut off while its
	// removal was committed never applies that entry itself, and would
	// otherwise campaign in vain forever. Optional.
	Removed func()
	// Members, if set, answers joining members' requests for the member
	// list (FetchMembers). Optional.
	Members func() ([]byte, error)
	// HashKV, if set, answers a peer's HashKV (FetchHashKV) for the
	// leader's corruption checks. Optional.
	HashKV func(req []byte) ([]byte, error)
	// RTT, if set, gets the round trip time of each probe of a peer: one
	// when a stream to it opens, then one every ProbeInterval while it
	// stays open (etcd's peer_round_trip_time_seconds). Optional.
	RTT func(id uint64, d time.Duration)

	// Features is sent to each peer that opens a raft stream to this
	// member (its PeerFeatures): what this build reads, such as entry
	// formats. A build that sends nothing reads none of them.
	Features string

	// QueueSize bounds the messages waiting for each peer.
	QueueSize int
	// MaxFrameBytes is where a writer stops draining its queue into a frame.
	// One message larger than it still goes out, alone.
	MaxFrameBytes int
	// ChunkSize bounds the data bytes of one snapshot gRPC message.
	ChunkSize int
	// MaxMessageBytes is the largest gRPC message the server accepts; it must
	// exceed the largest raft message.
	MaxMessageBytes int
	// DialTimeout bounds opening a stream to a peer.
	DialTimeout time.Duration

	// TLS dials the peer URLs that are https (pkg/tlsconf's
	// ClientCredentials: the peer certificate and CA, read at each
	// handshake); nil verifies https peers against the system roots with no
	// client certificate. http peer URLs are always plaintext.
	TLS credentials.TransportCredentials

	// ServerOptions and DialOptions are appended to the transport's own. A
	// member serving https peer URLs passes grpc.Creds with
	// tlsconf.ServerCredentials and TLS listeners to Start.
	ServerOptions []grpc.ServerOption
	DialOptions   []grpc.DialOption
}

// PeerStatus is the health of the stream to one peer.
type PeerStatus struct {
	ID     uint64
	URLs   []string
	Active bool      // a stream is open
	Since  time.Time // when the stream opened, or when it went down
	// LastError is the last failure to open or write the stream, nil if none.
	LastError   error
	LastErrorAt time.Time
	SentMsgs    uint64
	SentBytes   uint64
	Dropped     uint64 // messages dropped: queue full or stream broken
	// ReceivedBytes are the raft frames' bytes received from the peer.
	ReceivedBytes uint64
}

// Transport is the peer transport of one member. Its methods are safe for
// concurrent use.
type Transport struct {
	cfg    Config
	lg     *zap.Logger
	server *grpc.Server

	// ctx ends at Stop; every stream's context derives from it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine the transport starts

	mu      sync.RWMutex
	stopped bool
	peers   map[uint64]*peer
	removed map[uint64]bool
	// selfRemoved guards Config.Removed.
	selfRemoved sync.Once
}

// New returns a Transport that sends to no peer until AddPeer, and receives
// once Start serves a listener.
func New(cfg Config) (*Transport, error) {
	switch {
	case cfg.ID == 0:
		return nil, errors.New("new transport: member ID is zero")
	case cfg.ClusterID == 0:
		return nil, errors.New("new transport: cluster ID is zero")
	case cfg.Receive == nil:
		return nil, errors.New("new transport: Receive is nil")
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = DefaultQueueSize
	}
	if cfg.MaxFrameBytes <= 0 {
		cfg.MaxFrameBytes = DefaultMaxFrameBytes
	}
	if cfg.ChunkSize <= 0 {
		cfg.ChunkSize = DefaultChunkSize
	}
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.Unreachable == nil {
		cfg.Unreachable = func(uint64) {}
	}
	if cfg.SnapshotStatus == nil {
		cfg.SnapshotStatus = func(uint64, bool) {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &Transport{
		ctx:     ctx,
		cancel:  cancel,
		cfg:     cfg,
		lg:      cfg.Logger.With(zap.String("member", fmt.Sprintf("%x", cfg.ID))),
		peers:   map[uint64]*peer{},
		removed: map[uint64]bool{},
	}
	opts := append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(cfg.MaxMessageBytes),
		grpc.WaitForHandlers(true),
		grpc.InitialWindowSize(windowSize),
		grpc.InitialConnWindowSize(windowSize),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveTime / 2, PermitWithoutStream: true}),
	}, cfg.ServerOptions...)
	t.server = grpc.NewServer(opts...)
	t.server.RegisterService(&serviceDesc, t)
	return t, nil
}

// Start serves the peer service on lis until Stop, on a goroutine of its own.
func (t *Transport) Start(lis net.Listener) {
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		if err := t.server.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.lg.Error("serve peer listener", zap.Stringer("addr", lis.Addr()), zap.Error(err))
		}
	}()
}

// AddPeer starts a stream to member id at urls (http://host:port or
// https://host:port; the first that works is used). Adding a known peer updates its URLs.
func (t *Transport) AddPeer(id uint64, urls []string) error {
	if id == t.cfg.ID {
		return fmt.Errorf("add peer %x: it is this member", id)
	}
	targets, err := parseURLs(urls)
	if err != nil {
		return fmt.Errorf("add peer %x: %w", id, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return fmt.Errorf("add peer %x: transport stopped", id)
	}
	delete(t.removed, id)
	if p, ok := t.peers[id]; ok {
		p.setURLs(urls, targets)
		return nil
	}
	p := newPeer(t, id, urls, targets)
	t.peers[id] = p
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		p.run()
	}()
	return nil
}

// UpdatePeer changes the URLs of a known peer; its stream reopens on them.
func (t *Transport) UpdatePeer(id uint64, urls []string) error {
	targets, err := parseURLs(urls)
	if err != nil {
		return fmt.Errorf("update peer %x: %w", id, err)
	}
	t.mu.RLock()
	p, ok := t.peers[id]
	t.mu.RUnlock()
	if !ok {
		return fmt.Errorf("update peer %x: unknown peer", id)
	}
	p.setURLs(urls, targets)
	return nil
}

// RemovePeer stops sending to member id, drops what is queued for it, and
// refuses its streams from now on (an open one ends at its next frame). It returns once the peer's writer ended.
func (t *Transport) RemovePeer(id uint64) {
	t.mu.Lock()
	p, ok := t.peers[id]
	delete(t.peers, id)
	t.removed[id] = true
	t.mu.Unlock()
	if ok {
		p.stop()
	}
}

// Send queues msgs for their recipients (m.To) and never blocks. Messages to
// unknown peers are dropped. When a peer's queue is full the rest of its
// messages are dropped and Unreachable(id) is called once for this Send.
// MsgSnap must go through SendSnapshot; here it is dropped and reported as a
// failed snapshot.
func (t *Transport) Send(msgs []*raftpb.Message) {
	// Callbacks run after the lock is released: they may call back in.
	var full map[uint64]bool
	var snaps []uint64
	defer func() {
		for id := range full {
			t.cfg.Unreachable(id)
		}
		for _, id := range snaps {
			t.cfg.SnapshotStatus(id, false)
		}
	}()
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.stopped {
		return
	}
	for _, m := range msgs {
		to := m.GetTo()
		if m.GetType() == raftpb.MsgSnap {
			t.lg.Warn("MsgSnap passed to Send; use SendSnapshot", zap.String("to", fmt.Sprintf("%x", to)))
			snaps = append(snaps, to)
			continue
		}
		p, ok := t.peers[to]
		if !ok {
			t.lg.Debug("drop message to unknown peer", zap.String("to", fmt.Sprintf("%x", to)), zap.Stringer("type", m.GetType()))
			continue
		}
		if full[to] {
			p.dropped.Add(1)
			continue
		}
		select {
		case p.queue <- m:
		default:
			p.dropped.Add(1)
			if full == nil {
				full = map[uint64]bool{}
			}
			full[to] = true
		}
	}
}

// PeerHealth returns the status of every peer, ordered by ID.
func (t *Transport) PeerHealth() []PeerStatus {
	t.mu.RLock()
	out := make([]PeerStatus, 0, len(t.peers))
	for _, p := range t.peers {
		out = append(out, p.status())
	}
	t.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// ActiveSince returns when the stream to peer id opened if it is open now,
// and the zero time if it is not or id is not a peer (etcd's
// Transporter.ActiveSince): the strict reconfiguration check counts a peer
// as connected only once it has been so for a while.
func (t *Transport) ActiveSince(id uint64) time.Time {
	since, _, open := t.openStream(id)
	if !open {
		return time.Time{}
	}
	return since
}

// PeerFeatures returns what peer id sent when the stream to it opened
// (its Config.Features), and false if no stream to it is open now or id is
// not a peer. A peer that restarts with another build is seen afresh: its
// stream breaks and reopens.
func (t *Transport) PeerFeatures(id uint64) (string, bool) {
	_, features, open := t.openStream(id)
	return features, open
}

// openStream reads the state of the stream to peer id; open is false if
// there is none or id is not a peer.
func (t *Transport) openStream(id uint64) (since time.Time, features string, open bool) {
	t.mu.RLock()
	p := t.peers[id]
	t.mu.RUnlock()
	if p == nil {
		return time.Time{}, "", false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.since, p.features, p.active
}

// Stop closes the listener and every stream, and returns once every goroutine
// of the transport has ended (including callbacks in progress). Sends after
// Stop are dropped.
func (t *Transport) Stop() {
	t.mu.Lock()
	if t.stopped {
		t.mu.Unlock()
		return
	}
	t.stopped = true
	t.cancel()
	t.peers = map[uint64]*peer{}
	t.mu.Unlock()
	t.server.Stop()
	t.wg.Wait()
}

// noteRefusal calls Config.Removed if err is a peer's refusal of this
// member as removed.
func (t *Transport) noteRefusal(err error) {
	if t.cfg.Removed == nil || err == nil {
		return
	}
	if s, ok := status.FromError(err); ok && s.Code() == codes.PermissionDenied && strings.Contains(s.Message(), removedText) {
		t.selfRemoved.Do(t.cfg.Removed)
	}
}

func (t *Transport) knownRemoved(id uint64) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.removed[id]
}
