// Package membership is the replicated member list of a cluster: who the
// members are, their peer and client URLs, which are learners, and which IDs
// were removed for good. It changes only by applying committed raft entries
// (conf changes and attribute updates), so every member holds the same list;
// the applier persists each change with the batch that applied it.
package membership

import (
	"cmp"
	"crypto/sha1"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Errors of configuration changes, as etcd's membership package words them;
// the API maps them to etcd's gRPC errors.
var (
	ErrIDRemoved        = errors.New("membership: ID removed")
	ErrIDExists         = errors.New("membership: ID exists")
	ErrIDNotFound       = errors.New("membership: ID not found")
	ErrPeerURLExists    = errors.New("membership: peerURL exists")
	ErrMemberNotLearner = errors.New("membership: can only promote a learner member")
	ErrTooManyLearners  = errors.New("membership: too many learner members in cluster")
	ErrLearnerNotReady  = errors.New("membership: can only promote a learner member which is in sync with leader")
)

// MaxLearners is how many learners a cluster may have at once (etcd's
// default --max-learners).
const MaxLearners = 1

// Member is one member. The JSON form is etcd's, so a conf change's context
// reads the same as etcd's.
type Member struct {
	ID         uint64   `json:"id"`
	Name       string   `json:"name,omitempty"`
	PeerURLs   []string `json:"peerURLs"`
	ClientURLs []string `json:"clientURLs,omitempty"`
	IsLearner  bool     `json:"isLearner,omitempty"`
}

// Clone returns a deep copy.
func (m Member) Clone() Member {
	m.PeerURLs = slices.Clone(m.PeerURLs)
	m.ClientURLs = slices.Clone(m.ClientURLs)
	return m
}

// Marshal encodes m as the context of a conf change and as its record.
func (m Member) Marshal() []byte {
	b, err := json.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("membership: marshal member: %v", err)) // plain strings and numbers
	}
	return b
}

// Unmarshal decodes a member record or conf change context.
func Unmarshal(b []byte) (Member, error) {
	var m Member
	if err := json.Unmarshal(b, &m); err != nil {
		return Member{}, fmt.Errorf("decode member: %w", err)
	}
	return m, nil
}

// MemberID is etcd's member ID: the first 8 bytes of sha1 over the sorted
// peer URLs joined, the cluster token, and (for members added at runtime)
// the time in Unix seconds.
func MemberID(peerURLs []string, token string, now *time.Time) uint64 {
	urls := slices.Clone(peerURLs)
	sort.Strings(urls)
	b := []byte(strings.Join(urls, ""))
	b = append(b, token...)
	if now != nil {
		b = strconv.AppendInt(b, now.Unix(), 10)
	}
	h := sha1.Sum(b)
	return binary.BigEndian.Uint64(h[:8])
}

// ClusterID is etcd's cluster ID: sha1 over the sorted member IDs.
func ClusterID(memberIDs []uint64) uint64 {
	ids := slices.Clone(memberIDs)
	slices.Sort(ids)
	b := make([]byte, 8*len(ids))
	for i, id := range ids {
		binary.BigEndian.PutUint64(b[8*i:], id)
	}
	h := sha1.Sum(b)
	return binary.BigEndian.Uint64(h[:8])
}

// ValidatePeerURLs checks URLs a member is to be reached at.
func ValidatePeerURLs(urls []string) error {
	if len(urls) == 0 {
		return errors.New("no peer URLs")
	}
	for _, s := range urls {
		u, err := url.Parse(s)
		if err != nil {
			return fmt.Errorf("peer URL %q: %w", s, err)
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return fmt.Errorf("peer URL %q: scheme must be http or https", s)
		}
		if u.Host == "" || u.Port() == "" {
			return fmt.Errorf("peer URL %q: want scheme://host:port", s)
		}
		if u.Path != "" && u.Path != "/" {
			return fmt.Errorf("peer URL %q: must not have a path", s)
		}
	}
	return nil
}

// Change is what a committed change did, for whoever follows the list (the
// peer transport).
type Change struct {
	Member  Member
	Removed bool
}

// Cluster is the member list. Its methods are safe for concurrent use; the
// mutating ones are called by the applier only.
type Cluster struct {
	mu      sync.RWMutex
	id      uint64
	self    uint64
	members map[uint64]*Member
	removed map[uint64]bool
	watch   []func(Change)
}

// New returns an empty member list of cluster id, seen by member self.
func New(id, self uint64) *Cluster {
	return &Cluster{id: id, self: self, members: map[uint64]*Member{}, removed: map[uint64]bool{}}
}

// ID is the cluster ID.
func (c *Cluster) ID() uint64 { return c.id }

// Self is this member's ID.
func (c *Cluster) Self() uint64 { return c.self }

// OnChange registers fn to be called after every applied change (not for
// Restore). fn runs on the applier; it must not block.
func (c *Cluster) OnChange(fn func(Change)) {
	c.mu.Lock()
	c.watch = append(c.watch, fn)
	c.mu.Unlock()
}

// Members lists the members sorted by ID.
func (c *Cluster) Members() []Member {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]Member, 0, len(c.members))
	for _, m := range c.members {
		out = append(out, m.Clone())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// IDs lists the members' IDs, unsorted: Members without the copies.
func (c *Cluster) IDs() []uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	ids := make([]uint64, 0, len(c.members))
	for id := range c.members {
		ids = append(ids, id)
	}
	return ids
}

// Member returns member id.
func (c *Cluster) Member(id uint64) (Member, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	m, ok := c.members[id]
	if !ok {
		return Member{}, false
	}
	return m.Clone(), true
}

// IsRemoved reports whether id was a member and was removed.
func (c *Cluster) IsRemoved(id uint64) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.removed[id]
}

// IsLearner reports whether id is a learner.
func (c *Cluster) IsLearner(id uint64) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	m, ok := c.members[id]
	return ok && m.IsLearner
}

// ChangeKind is the kind of a membership change.
type ChangeKind int

// The kinds of membership change.
const (
	AddMember ChangeKind = iota
	AddLearner
	Promote
	RemoveMember
	UpdateMember
)

// Validate checks a change against the current list, with etcd's rules.
// m carries the ID and, for adds and updates, the peer URLs.
func (c *Cluster) Validate(kind ChangeKind, m Member) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.removed[m.ID] {
		return ErrIDRemoved
	}
	cur, exists := c.members[m.ID]
	switch kind {
	case AddMember, AddLearner:
		if exists {
			return ErrIDExists
		}
		if err := c.peerURLsFreeLocked(m.ID, m.PeerURLs); err != nil {
			return err
		}
		if kind == AddLearner && c.learnersLocked() >= MaxLearners {
			return ErrTooManyLearners
		}
	case Promote:
		if !exists {
			return ErrIDNotFound
		}
		if !cur.IsLearner {
			return ErrMemberNotLearner
		}
	case RemoveMember:
		if !exists {
			return ErrIDNotFound
		}
	case UpdateMember:
		if !exists {
			return ErrIDNotFound
		}
		if err := c.peerURLsFreeLocked(m.ID, m.PeerURLs); err != nil {
			return err
		}
	default:
		return fmt.Errorf("membership: unknown change kind %d", kind)
	}
	return nil
}

func (c *Cluster) peerURLsFreeLocked(id uint64, urls []string) error {
	for _, o := range c.members {
		if o.ID == id {
			continue
		}
		for _, u := range urls {
			if slices.Contains(o.PeerURLs, u) {
				return ErrPeerURLExists
			}
		}
	}
	return nil
}

func (c *Cluster) learnersLocked() int {
	n := 0
	for _, m := range c.members {
		if m.IsLearner {
			n++
		}
	}
	return n
}

// Apply makes a validated change and returns the record to persist: the
// member after the change, or for a removal the member removed.
func (c *Cluster) Apply(kind ChangeKind, m Member) Member {
	c.mu.Lock()
	var out Member
	switch kind {
	case AddMember, AddLearner:
		nm := m.Clone()
		nm.IsLearner = kind == AddLearner
		c.members[nm.ID] = &nm
		out = nm.Clone()
	case Promote:
		c.members[m.ID].IsLearner = false
		out = c.members[m.ID].Clone()
	case RemoveMember:
		out = c.members[m.ID].Clone()
		delete(c.members, m.ID)
		c.removed[m.ID] = true
	case UpdateMember:
		c.members[m.ID].PeerURLs = slices.Clone(m.PeerURLs)
		out = c.members[m.ID].Clone()
	}
	watch := c.watch
	c.mu.Unlock()
	for _, fn := range watch {
		fn(Change{Member: out.Clone(), Removed: kind == RemoveMember})
	}
	return out
}

// SetAttributes records the name and client URLs a member published. It
// reports false when id is not a member (a removed member's late publish).
func (c *Cluster) SetAttributes(id uint64, name string, clientURLs []string) (Member, bool) {
	c.mu.Lock()
	m, ok := c.members[id]
	if !ok {
		c.mu.Unlock()
		return Member{}, false
	}
	m.Name = name
	m.ClientURLs = slices.Clone(clientURLs)
	out := m.Clone()
	watch := c.watch
	c.mu.Unlock()
	for _, fn := range watch {
		fn(Change{Member: out.Clone()})
	}
	return out, true
}

// Restore replaces the list with members and removed IDs read from a
// backend (at start, or after installing a snapshot). Followers of changes
// are told of every member and every removed ID.
func (c *Cluster) Restore(members []Member, removed []uint64) {
	c.mu.Lock()
	c.restoreLocked(members, removed)
	watch := c.watch
	c.mu.Unlock()
	for _, fn := range watch {
		for _, m := range members {
			fn(Change{Member: m.Clone()})
		}
		for _, id := range removed {
			fn(Change{Member: Member{ID: id}, Removed: true})
		}
	}
}

func (c *Cluster) restoreLocked(members []Member, removed []uint64) {
	c.members = make(map[uint64]*Member, len(members))
	for _, m := range members {
		m := m.Clone()
		c.members[m.ID] = &m
	}
	c.removed = make(map[uint64]bool, len(removed))
	for _, id := range removed {
		c.removed[id] = true
	}
}

// HexID is a member or cluster ID as etcd writes it in logs, metrics and
// etcdctl output: lowercase hexadecimal without leading zeros.
func HexID(id uint64) string { return strconv.FormatUint(id, 16) }

// Initial derives the members and cluster ID of a new cluster from
// initial-cluster (member name -> peer URLs) and the cluster token, exactly
// as etcd does. Members have no client URLs yet: every member bootstraps
// the same entries, and each publishes its own attributes later. They are
// sorted by ID.
func Initial(cluster map[string][]string, token string) (members []Member, clusterID uint64) {
	ids := make([]uint64, 0, len(cluster))
	for name, peers := range cluster {
		id := MemberID(peers, token, nil)
		members = append(members, Member{ID: id, Name: name, PeerURLs: peers})
		ids = append(ids, id)
	}
	slices.SortFunc(members, func(a, b Member) int { return cmp.Compare(a.ID, b.ID) })
	return members, ClusterID(ids)
}
