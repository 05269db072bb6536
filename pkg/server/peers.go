package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"

	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/fx"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/config"
	"github.com/kvd-dev/kvd/pkg/engine"
	"github.com/kvd-dev/kvd/pkg/entrybatch"
	"github.com/kvd-dev/kvd/pkg/membership"
	"github.com/kvd-dev/kvd/pkg/mvcc"
	"github.com/kvd-dev/kvd/pkg/raftnode"
	"github.com/kvd-dev/kvd/pkg/snapship"
	"github.com/kvd-dev/kvd/pkg/tlsconf"
	"github.com/kvd-dev/kvd/pkg/transport"
)

// peerLink carries raft's messages to the peer transport. The raft node is
// built before the transport (whose callbacks need the node), so the link
// starts without one and drops messages until the transport is set: raft
// retransmits. Snapshots go to the sender, received ones to the stager
// (pkg/snapship).
type peerLink struct {
	tr     atomic.Pointer[transport.Transport]
	sender *snapship.Sender // Point and Report are set before raft runs
	stager *snapship.Stager
}

func newPeerLink(c *config.Config, st *mvcc.Store, disk earlyMetrics, lg *zap.Logger) (*peerLink, error) {
	// Older versions wrote a dump file here before sending it; what a
	// crash left is useless.
	if err := os.RemoveAll(filepath.Join(c.MemberDir(), "snap-outgoing")); err != nil {
		return nil, fmt.Errorf("clear snap-outgoing: %w", err)
	}
	stager, err := snapship.NewStager(filepath.Join(c.MemberDir(), "snap-incoming"), func(dir string) (backend.Backend, error) {
		return engine.Open(c, c.Backend.Engine, dir, lg)
	}, lg.Named("snapshot"))
	if err != nil {
		return nil, err
	}
	return &peerLink{
		sender: &snapship.Sender{Store: st, Duration: disk.backendSnapshot, Logger: lg.Named("peers")},
		stager: stager,
	}, nil
}

// Send is raftnode.Config.Send: snapshots get a goroutine each, the rest go
// to the transport's queues.
func (p *peerLink) Send(msgs []*raftpb.Message) {
	tr := p.tr.Load()
	if tr == nil {
		return
	}
	rest := msgs[:0:0]
	for _, m := range msgs {
		if m.GetType() == raftpb.MsgSnap {
			go p.sender.Send(tr, m)
			continue
		}
		rest = append(rest, m)
	}
	if len(rest) > 0 {
		tr.Send(rest)
	}
}

// newTransport starts the peer transport on listen-peer-urls and keeps its
// peers in step with the member list.
func newTransport(lc fx.Lifecycle, sd fx.Shutdowner, c *config.Config, cl *membership.Cluster, boot *bootstrap, n *raftnode.Node, link *peerLink, st *mvcc.Store, mt *Metrics, lg *zap.Logger) (*transport.Transport, error) {
	urls, err := c.PeerURLs()
	if err != nil {
		return nil, fmt.Errorf("listen-peer-urls: %w", err)
	}
	link.sender.Report = n.ReportSnapshot
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
		ReceiveSnapshot: func(m *raftpb.Message, data io.Reader) error {
			if err := link.stager.Receive(m, data); err != nil {
				return err
			}
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
		Members: func() ([]byte, error) {
			return json.Marshal(joinInfo{ClusterID: cl.ID(), Members: cl.Members()})
		},
		HashKV: func(req []byte) ([]byte, error) { return peerHashKVAnswer(st, cl, req) },
		RTT:    mt.PeerRTT,
		// Peers learn from this what this build reads (entrybatch.Gate).
		Features:      entrybatch.Feature,
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
