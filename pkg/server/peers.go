package server

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/fx"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/config"
	"github.com/kvd-dev/kvd/pkg/fsutil"
	"github.com/kvd-dev/kvd/pkg/membership"
	"github.com/kvd-dev/kvd/pkg/mvcc"
	"github.com/kvd-dev/kvd/pkg/raftnode"
	"github.com/kvd-dev/kvd/pkg/tlsconf"
	"github.com/kvd-dev/kvd/pkg/transport"
)

// peerLink carries raft's messages to the peer transport. The raft node is
// built before the transport (whose callbacks need the node), so the link
// starts without one and drops messages until the transport is set: raft
// retransmits.
type peerLink struct {
	tr     atomic.Pointer[transport.Transport]
	st     *mvcc.Store
	outDir string
	lg     *zap.Logger
	// report tells raft how a snapshot send ended (set with the transport).
	report func(id uint64, ok bool)
	// snapshotPoint is the applier's SnapshotPoint (set with the actors,
	// before raft runs).
	snapshotPoint func(context.Context, func(*raftpb.ConfState) error) error
	// snapshotDuration observes each snapshot send, from the read view to
	// the transport closing the dump (etcd_disk_backend_snapshot_duration_seconds).
	snapshotDuration prometheus.Histogram

	mu       sync.Mutex
	incoming map[uint64]string // snapshot index -> received dump file
}

func newPeerLink(c *config.Config, st *mvcc.Store, disk earlyMetrics, lg *zap.Logger) (*peerLink, error) {
	out := filepath.Join(c.MemberDir(), "snap-outgoing")
	// Leftovers of a crash mid-send are useless.
	if err := os.RemoveAll(out); err != nil {
		return nil, fmt.Errorf("clear %s: %w", out, err)
	}
	if err := fsutil.MkdirAll(out, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", out, err)
	}
	return &peerLink{st: st, outDir: out, lg: lg.Named("peers"), incoming: map[uint64]string{}, snapshotDuration: disk.backendSnapshot}, nil
}

// Send is raftnode.Config.Send: snapshots get a goroutine each (the dump
// is written to a file first, its size goes ahead of it), the rest go to
// the transport's queues.
func (p *peerLink) Send(msgs []*raftpb.Message) {
	tr := p.tr.Load()
	if tr == nil {
		return
	}
	rest := msgs[:0:0]
	for _, m := range msgs {
		if m.GetType() == raftpb.MsgSnap {
			go p.sendSnapshot(tr, m)
			continue
		}
		rest = append(rest, m)
	}
	if len(rest) > 0 {
		tr.Send(rest)
	}
}

// sendSnapshot sends the backend as the applier has it now, and rewrites
// the raft snapshot's metadata to match it: its applied index and term and
// the configuration as of that index (a member added after raft's last
// snapshot must find itself in it), as etcd does. The receiver skips the
// entries it then gets again.
func (p *peerLink) sendSnapshot(tr *transport.Transport, m *raftpb.Message) {
	to := m.GetTo()
	fail := func(err error) {
		p.lg.Warn("send snapshot", zap.String("to", fmt.Sprintf("%x", to)), zap.Error(err))
		p.report(to, false)
	}
	var (
		tx backend.ReadTx
		md *raftpb.SnapshotMetadata
	)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := p.snapshotPoint(ctx, func(cs *raftpb.ConfState) error {
		// Everything applied goes to the backend, so the view below
		// holds exactly the applied state.
		if err := p.st.Flush(); err != nil {
			return err
		}
		var err error
		if tx, err = p.st.Backend().ReadTx(); err != nil {
			return err
		}
		md = &raftpb.SnapshotMetadata{Index: new(p.st.ConsistentIndex()), Term: new(p.st.ConsistentTerm()), ConfState: cs}
		return nil
	})
	start := time.Now()
	if err != nil {
		fail(fmt.Errorf("snapshot point: %w", err))
		return
	}
	f, err := os.CreateTemp(p.outDir, "dump-*")
	if err != nil {
		tx.Release()
		fail(err)
		return
	}
	// The open file outlives its name: the transport reads and closes it.
	defer os.Remove(f.Name())
	n, err := backend.DumpTx(tx, f)
	tx.Release()
	if err == nil {
		_, err = f.Seek(0, 0)
	}
	if err != nil {
		f.Close()
		fail(fmt.Errorf("dump backend: %w", err))
		return
	}
	m = proto.Clone(m).(*raftpb.Message)
	m.Snapshot = &raftpb.Snapshot{Metadata: md}
	p.lg.Info("sending snapshot", zap.String("to", fmt.Sprintf("%x", to)),
		zap.Uint64("index", md.GetIndex()), zap.Int64("bytes", n))
	// SendSnapshot closes f and reports the outcome to raft.
	tr.SendSnapshot(m, &timedDump{File: f, start: start, observe: p.snapshotDuration}, n)
}

// timedDump is a snapshot dump being sent; closing it, which the transport
// does once the send ended, observes the time since the read view opened.
type timedDump struct {
	*os.File
	start   time.Time
	observe prometheus.Observer
}

func (d *timedDump) Close() error {
	if d.observe != nil {
		d.observe.Observe(time.Since(d.start).Seconds())
	}
	return d.File.Close()
}

func (p *peerLink) received(index uint64, path string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if old, ok := p.incoming[index]; ok && old != path {
		os.Remove(old)
	}
	p.incoming[index] = path
}

// take returns the dump received for the snapshot at index, and removes
// older ones raft passed over.
func (p *peerLink) take(index uint64) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	path, ok := p.incoming[index]
	for i, f := range p.incoming {
		if i <= index {
			if i != index {
				os.Remove(f)
			}
			delete(p.incoming, i)
		}
	}
	return path, ok
}

// newTransport starts the peer transport on listen-peer-urls and keeps its
// peers in step with the member list.
func newTransport(lc fx.Lifecycle, sd fx.Shutdowner, c *config.Config, cl *membership.Cluster, boot *bootstrap, n *raftnode.Node, link *peerLink, st *mvcc.Store, mt *Metrics, lg *zap.Logger) (*transport.Transport, error) {
	urls, err := c.PeerURLs()
	if err != nil {
		return nil, fmt.Errorf("listen-peer-urls: %w", err)
	}
	inDir := filepath.Join(c.MemberDir(), "snap-incoming")
	if err := os.RemoveAll(inDir); err != nil {
		return nil, fmt.Errorf("clear %s: %w", inDir, err)
	}
	if err := fsutil.MkdirAll(inDir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", inDir, err)
	}
	link.report = n.ReportSnapshot
	// Peer TLS: https peer URLs are dialed with the peer certificate and CA
	// (read at each handshake), https listen-peer-urls serve it, mutual
	// when peer-client-cert-auth (or peer-trusted-ca-file) asks for client
	// certificates. The files are checked now.
	peerTLS, err := tlsconf.ForPeer(c, lg)
	if err != nil {
		return nil, err
	}
	warnPlainWithTLS(lg, "listen-peer-urls", "peer-transport-security", c.PeerTLS, urls)
	var serverOpts []grpc.ServerOption
	if anyHTTPS(urls) {
		serverOpts = append(serverOpts, grpc.Creds(tlsconf.ServerCredentials(tlsconf.NewFailureLog(lg, "listen-peer-urls"))))
	}
	tr, err := transport.New(transport.Config{
		ID:        cl.Self(),
		ClusterID: cl.ID(),
		Logger:    lg.Named("transport"),
		Receive:   func(msgs []*raftpb.Message) { n.Step(msgs...) },
		ReceiveSnapshot: func(m *raftpb.Message, path string) error {
			link.received(m.GetSnapshot().GetMetadata().GetIndex(), path)
			mt.SnapshotReceived(m.GetFrom())
			n.Step(m)
			return nil
		},
		Unreachable: n.ReportUnreachable,
		// Cut off while its removal committed, this member never applies
		// it; the peers' refusal tells it instead, and it stops as etcd's
		// does.
		Removed: func() {
			lg.Warn("the member has been permanently removed from the cluster; stopping",
				zap.String("data-dir", c.DataDir), zap.String("hint", "the data-dir used by this member must be removed"))
			_ = sd.Shutdown(fx.ExitCode(0))
		},
		SnapshotStatus: func(id uint64, ok bool) {
			mt.SnapshotSent(id, ok)
			n.ReportSnapshot(id, ok)
		},
		SnapshotDir: inDir,
		Members: func() ([]byte, error) {
			return json.Marshal(joinInfo{ClusterID: cl.ID(), Members: cl.Members()})
		},
		HashKV:        func(req []byte) ([]byte, error) { return peerHashKVAnswer(st, cl, req) },
		RTT:           mt.PeerRTT,
		TLS:           peerTLS.ClientCredentials(),
		ServerOptions: serverOpts,
	})
	if err != nil {
		return nil, err
	}
	cl.OnChange(func(ch membership.Change) {
		id := ch.Member.ID
		switch {
		case ch.Removed && id == cl.Self():
			lg.Warn("this member was removed from the cluster; stopping")
			_ = sd.Shutdown(fx.ExitCode(0))
		case ch.Removed:
			tr.RemovePeer(id)
		case id != cl.Self():
			if err := tr.AddPeer(id, ch.Member.PeerURLs); err != nil {
				lg.Warn("add peer", zap.String("id", fmt.Sprintf("%x", id)), zap.Error(err))
			}
		}
	})
	for _, m := range boot.initial {
		if m.ID == cl.Self() {
			continue
		}
		if err := tr.AddPeer(m.ID, m.PeerURLs); err != nil {
			return nil, fmt.Errorf("peer %s (%x): %w", m.Name, m.ID, err)
		}
	}
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			lns, err := listenAll("listen-peer-urls", urls)
			if err != nil {
				return err
			}
			for i, ln := range lns {
				lg.Info("serving peer traffic", zap.String("address", ln.Addr().String()), zap.Bool("tls", urls[i].Scheme == "https"))
				tr.Start(tlsListener(ln, urls[i], peerTLS, peerProtos))
			}
			link.tr.Store(tr)
			return nil
		},
		OnStop: func(context.Context) error {
			link.tr.Store(nil)
			tr.Stop()
			return nil
		},
	})
	return tr, nil
}
