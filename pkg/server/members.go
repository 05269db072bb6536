package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/config"
	"github.com/kvd-dev/kvd/pkg/datadir"
	"github.com/kvd-dev/kvd/pkg/membership"
	"github.com/kvd-dev/kvd/pkg/mvcc"
	"github.com/kvd-dev/kvd/pkg/raftlog"
	"github.com/kvd-dev/kvd/pkg/tlsconf"
	"github.com/kvd-dev/kvd/pkg/transport"
)

// bootstrap is how this member starts: from the configuration (a new
// cluster), from its data dir (a restart) or from its peers (joining).
type bootstrap struct {
	// peers bootstraps raft for a new cluster.
	peers []raft.Peer
	// initial are the members to connect to before the member list is
	// applied from the log.
	initial []membership.Member
}

func identityPath(c *config.Config) string { return filepath.Join(c.MemberDir(), datadir.IdentityFile) }

func readIdentity(path string) (*datadir.Identity, uint64, uint64, error) {
	id, err := datadir.ReadIdentity(path)
	if err != nil || id == nil {
		return nil, 0, 0, err
	}
	cid, mid, err := id.IDs()
	return id, cid, mid, err
}

// configuredMembers derives the members and cluster ID of a new cluster from
// initial-cluster and the token, exactly as etcd does.
func configuredMembers(c *config.Config) (members []membership.Member, clusterID, self uint64, err error) {
	cluster, err := c.InitialClusterMap()
	if err != nil {
		return nil, 0, 0, fmt.Errorf("initial-cluster: %w", err)
	}
	urls := make(map[string][]string, len(cluster))
	for name, us := range cluster {
		urls[name] = urlStrings(us)
	}
	members, clusterID = membership.Initial(urls, c.InitialClusterToken)
	for _, m := range members {
		if m.Name == c.Name {
			self = m.ID
		}
	}
	if self == 0 {
		return nil, 0, 0, fmt.Errorf("initial-cluster: member %q is not in it", c.Name)
	}
	return members, clusterID, self, nil
}

// joinInfo is what a member answers a joining member (transport Members).
type joinInfo struct {
	ClusterID uint64              `json:"cluster_id"`
	Members   []membership.Member `json:"members"`
}

// memberIdentity is who this member is, found before any storage opens.
type memberIdentity struct {
	clusterID, self uint64
	boot            *bootstrap
	// fromConfig is the configured member list of a new cluster.
	fromConfig []membership.Member
}

// newIdentity finds out who this member is: from its identity file, from
// the configuration (a new cluster) or from its peers (joining). It runs
// before the storage opens, so a refusal leaves nothing open.
func newIdentity(c *config.Config) (*memberIdentity, error) {
	walExists, err := raftlog.Exists(c.WALPath())
	if err != nil {
		return nil, err
	}
	walNew := !walExists
	idPath := identityPath(c)
	id, clusterID, self, err := readIdentity(idPath)
	if err != nil {
		return nil, err
	}
	boot := &bootstrap{}
	var fromConfig []membership.Member
	switch {
	case id != nil:
		if id.Name != c.Name {
			return nil, fmt.Errorf("data-dir %s belongs to member %q (%s) of cluster %s, not to %q: use that member's configuration or another data-dir",
				c.DataDir, id.Name, id.MemberID, id.ClusterID, c.Name)
		}
		if id.Bootstrap == "new" && c.InitialClusterState == "new" && id.Token != c.InitialClusterToken {
			// The initial-* settings are otherwise ignored on restart, as
			// etcd does; another token is another cluster.
			return nil, fmt.Errorf("data-dir %s holds member %s of cluster %s started with initial-cluster-token %q, not %q: refusing to start with a mismatched cluster ID",
				c.DataDir, id.MemberID, id.ClusterID, id.Token, c.InitialClusterToken)
		}
	case !walNew || c.InitialClusterState == "new":
		// A new cluster, or a data dir from before identity files.
		fromConfig, clusterID, self, err = configuredMembers(c)
		if err != nil {
			return nil, err
		}
		if walNew {
			for _, m := range fromConfig {
				boot.peers = append(boot.peers, raft.Peer{ID: m.ID, Context: m.Marshal()})
			}
		}
		id = &datadir.Identity{Bootstrap: "new", Token: c.InitialClusterToken}
	default:
		info, err := fetchCluster(c)
		if err != nil {
			return nil, err
		}
		own, err := c.AdvertisePeerURLs()
		if err != nil {
			return nil, fmt.Errorf("initial-advertise-peer-urls: %w", err)
		}
		ownURLs := urlStrings(own)
		slices.Sort(ownURLs)
		for _, m := range info.Members {
			urls := slices.Clone(m.PeerURLs)
			slices.Sort(urls)
			if slices.Equal(urls, ownURLs) {
				self = m.ID
			}
		}
		if self == 0 {
			return nil, fmt.Errorf("cluster %x has no member with peer URLs %v: add this member first (etcdctl member add %s --peer-urls=...)",
				info.ClusterID, ownURLs, c.Name)
		}
		clusterID = info.ClusterID
		boot.initial = info.Members
		id = &datadir.Identity{Bootstrap: "existing"}
	}
	if id.ClusterID == "" {
		id.ClusterID = fmt.Sprintf("%x", clusterID)
		id.MemberID = fmt.Sprintf("%x", self)
		id.Name = c.Name
		if err := datadir.WriteIdentity(idPath, *id); err != nil {
			return nil, err
		}
	}
	return &memberIdentity{clusterID: clusterID, self: self, boot: boot, fromConfig: fromConfig}, nil
}

// newMembers loads the member list this member applied.
func newMembers(ident *memberIdentity, st *mvcc.Store, lg *zap.Logger) (*membership.Cluster, *bootstrap, error) {
	clusterID, self, boot, fromConfig := ident.clusterID, ident.self, ident.boot, ident.fromConfig
	cl := membership.New(clusterID, self)
	var ld membership.Loader
	if err := st.Members(ld.Add); err != nil {
		return nil, nil, err
	}
	switch {
	case !ld.Empty():
		ld.RestoreInto(cl)
		boot.initial = cl.Members()
	case len(boot.peers) == 0 && len(fromConfig) > 0:
		// Applied before member records existed: the configuration is
		// the best knowledge there is.
		cl.Restore(fromConfig, nil)
		boot.initial = fromConfig
	case len(boot.initial) == 0:
		boot.initial = fromConfig
	}
	lg.Info("member identity", zap.String("member-id", fmt.Sprintf("%x", self)),
		zap.String("cluster-id", fmt.Sprintf("%x", clusterID)), zap.Int("members", len(boot.initial)))
	return cl, boot, nil
}

// fetchCluster asks the peers named in initial-cluster for the member list,
// as a member joining an existing cluster.
func fetchCluster(c *config.Config) (*joinInfo, error) {
	cluster, err := c.InitialClusterMap()
	if err != nil {
		return nil, fmt.Errorf("initial-cluster: %w", err)
	}
	var urls []string
	for name, us := range cluster {
		if name != c.Name {
			urls = append(urls, urlStrings(us)...)
		}
	}
	if len(urls) == 0 {
		return nil, errors.New("initial-cluster-state is existing but initial-cluster names no other member to join")
	}
	peerTLS, err := tlsconf.ForPeer(c, zap.NewNop())
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := transport.FetchMembers(ctx, urls, peerTLS.ClientCredentials())
	if err != nil {
		return nil, fmt.Errorf("join existing cluster: %w", err)
	}
	var info joinInfo
	if err := json.Unmarshal(b, &info); err != nil {
		return nil, fmt.Errorf("join existing cluster: decode member list: %w", err)
	}
	return &info, nil
}

func urlStrings(us []url.URL) []string {
	out := make([]string, len(us))
	for i := range us {
		out[i] = us[i].String()
	}
	return out
}
