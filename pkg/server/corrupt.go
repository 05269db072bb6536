package server

import (
	"context"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.uber.org/fx"
	"go.uber.org/zap"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-dev/kvd/pkg/config"
	"github.com/kvd-dev/kvd/pkg/membership"
	"github.com/kvd-dev/kvd/pkg/mvcc"
	"github.com/kvd-dev/kvd/pkg/tlsconf"
	"github.com/kvd-dev/kvd/pkg/transport"
)

// initialCorruptCheck compares, before clients are served, this member's
// HashKV with each reachable peer's at the same revision (etcd's
// --initial-corrupt-check). A mismatch at the same compaction revision
// means the data diverged: the member refuses to start.
func initialCorruptCheck(lc fx.Lifecycle, c *config.Config, st *mvcc.Store, cl *membership.Cluster, lg *zap.Logger) {
	if !c.InitialCorruptCheck {
		return
	}
	lc.Append(fx.Hook{OnStart: func(ctx context.Context) error {
		// The peers are asked over the peer transport, as etcd asks their
		// /members/hashkv on the peer URLs (https ones with the peer TLS).
		peerTLS, err := tlsconf.ForPeer(c, lg)
		if err != nil {
			return err
		}
		return checkPeersHash(ctx, st, cl, peerTLS.ClientCredentials(), lg)
	}})
}

func checkPeersHash(ctx context.Context, st *mvcc.Store, cl *membership.Cluster, creds credentials.TransportCredentials, lg *zap.Logger) error {
	hash, rev, compactRev, err := st.HashByRev(0)
	if err != nil {
		return fmt.Errorf("initial corruption check: local hash: %w", err)
	}
	lg.Info("initial corruption check", zap.Int64("revision", rev), zap.Uint32("hash", hash))
	for _, m := range cl.Members() {
		if m.ID == cl.Self() || len(m.PeerURLs) == 0 {
			continue
		}
		resp, err := peerHashKV(ctx, m.PeerURLs, cl.ID(), creds, rev)
		if err != nil {
			lg.Warn("initial corruption check: peer hash unavailable, skipped", zap.String("peer", m.Name), zap.Error(err))
			continue
		}
		if resp.CompactRevision != compactRev {
			lg.Warn("initial corruption check: peer compacted differently, skipped", zap.String("peer", m.Name),
				zap.Int64("peer-compact-revision", resp.CompactRevision), zap.Int64("compact-revision", compactRev))
			continue
		}
		if resp.Hash != hash {
			return fmt.Errorf("initial corruption check: found data inconsistency with peer %s (%x): hash %d at revision %d, local %d",
				m.Name, m.ID, resp.Hash, rev, hash)
		}
	}
	return nil
}

// peerHashKV asks a member's peer URLs in turn for its HashKV at rev over
// the peer transport; the last error when none answers.
func peerHashKV(ctx context.Context, peerURLs []string, clusterID uint64, creds credentials.TransportCredentials, rev int64) (*pb.HashKVResponse, error) {
	req, err := proto.Marshal(&pb.HashKVRequest{Revision: rev})
	if err != nil {
		return nil, err
	}
	for _, u := range peerURLs {
		actx, cancel := context.WithTimeout(ctx, peerHashTimeout)
		var b []byte
		b, err = transport.FetchHashKV(actx, u, clusterID, creds, req)
		cancel()
		if err == nil {
			resp := &pb.HashKVResponse{}
			if err = proto.Unmarshal(b, resp); err == nil {
				return resp, nil
			}
		}
	}
	return nil, err
}
