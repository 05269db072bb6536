package server

import (
	"context"
	"fmt"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/config"
	"github.com/kvd-dev/kvd/pkg/membership"
	"github.com/kvd-dev/kvd/pkg/mvcc"
	"github.com/kvd-dev/kvd/pkg/tlsconf"
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
		// The peers' client URLs may be https: dial them as a client with
		// the client block (client-cert-file or cert-file, trusted-ca-file).
		info, err := tlsconf.ForClient(c, lg)
		if err != nil {
			return err
		}
		return checkPeersHash(ctx, st, cl, info, lg)
	}})
}

func checkPeersHash(ctx context.Context, st *mvcc.Store, cl *membership.Cluster, info *tlsconf.Info, lg *zap.Logger) error {
	hash, rev, compactRev, err := st.HashByRev(0)
	if err != nil {
		return fmt.Errorf("initial corruption check: local hash: %w", err)
	}
	lg.Info("initial corruption check", zap.Int64("revision", rev), zap.Uint32("hash", hash))
	for _, m := range cl.Members() {
		if m.ID == cl.Self() || len(m.ClientURLs) == 0 {
			continue
		}
		resp, err := peerHashKV(ctx, m.ClientURLs[0], info, rev)
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

func peerHashKV(ctx context.Context, clientURL string, info *tlsconf.Info, rev int64) (*pb.HashKVResponse, error) {
	conn, err := dialMember(clientURL, info)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return pb.NewMaintenanceClient(conn).HashKV(ctx, &pb.HashKVRequest{Revision: rev})
}
