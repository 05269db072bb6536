package server

import (
	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"net/url"
	"sort"
	"strings"

	"github.com/kvd-dev/kvd/pkg/api"
	"github.com/kvd-dev/kvd/pkg/config"
)

// Membership is the cluster as the initial configuration describes it. IDs
// are derived exactly as etcd derives them, so the same initial-cluster and
// token give the same member and cluster IDs as etcd.
type Membership struct {
	clusterID uint64
	self      uint64
	members   []api.Member
}

// ID is the cluster ID.
func (m *Membership) ID() uint64 { return m.clusterID }

// Self is this member's ID.
func (m *Membership) Self() uint64 { return m.self }

// Members lists the members, sorted by ID.
func (m *Membership) Members() []api.Member { return m.members }

// MemberID is etcd's member ID: the first 8 bytes of sha1(sorted peer URLs
// joined, then the cluster token).
func MemberID(peerURLs []string, token string) uint64 {
	urls := append([]string(nil), peerURLs...)
	sort.Strings(urls)
	b := []byte(strings.Join(urls, ""))
	b = append(b, token...)
	h := sha1.Sum(b)
	return binary.BigEndian.Uint64(h[:8])
}

// ClusterID is etcd's cluster ID: sha1 over the sorted member IDs.
func ClusterID(memberIDs []uint64) uint64 {
	ids := append([]uint64(nil), memberIDs...)
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	b := make([]byte, 8*len(ids))
	for i, id := range ids {
		binary.BigEndian.PutUint64(b[8*i:], id)
	}
	h := sha1.Sum(b)
	return binary.BigEndian.Uint64(h[:8])
}

// NewMembership derives the membership from the configuration.
func NewMembership(c *config.Config) (*Membership, error) {
	cluster, err := c.InitialClusterMap()
	if err != nil {
		return nil, fmt.Errorf("initial-cluster: %w", err)
	}
	clientURLs, err := c.AdvertiseClientURLsList()
	if err != nil {
		return nil, fmt.Errorf("advertise-client-urls: %w", err)
	}
	m := &Membership{}
	var ids []uint64
	for name, urls := range cluster {
		peers := urlStrings(urls)
		id := MemberID(peers, c.InitialClusterToken)
		mem := api.Member{ID: id, Name: name, PeerURLs: peers}
		if name == c.Name {
			m.self = id
			mem.ClientURLs = urlStrings(clientURLs)
		}
		m.members = append(m.members, mem)
		ids = append(ids, id)
	}
	if m.self == 0 {
		return nil, fmt.Errorf("initial-cluster: member %q is not in it", c.Name)
	}
	sort.Slice(m.members, func(i, j int) bool { return m.members[i].ID < m.members[j].ID })
	m.clusterID = ClusterID(ids)
	return m, nil
}

func urlStrings(us []url.URL) []string {
	out := make([]string, len(us))
	for i := range us {
		out[i] = us[i].String()
	}
	return out
}
