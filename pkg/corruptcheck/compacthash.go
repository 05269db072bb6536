package corruptcheck

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/membership"
)

// CompactHasher is what the compaction hash check needs besides Hasher: the
// hashes the local compactions stored (newest compactions last or first:
// they are sorted here).
type CompactHasher interface {
	Hasher
	Hashes() []KeyValueHash
}

// CompactChecker runs etcd's CompactHashCheck on the leader: it remembers
// the newest revision checked on the whole cluster.
type CompactChecker struct {
	lg *zap.Logger
	h  CompactHasher

	mu                    sync.Mutex
	latestRevisionChecked int64
}

// NewCompactChecker returns a compaction hash checker logging to lg.
func NewCompactChecker(lg *zap.Logger, h CompactHasher) *CompactChecker {
	return &CompactChecker{lg: lg, h: h}
}

// CompactHashCheck is etcd's: compactions happen at the same revision on
// every member, each storing the hash of its key space at that revision.
// From the newest stored hash not yet checked, the peers are asked for
// their hash at its revision; members at the same compaction revision are
// grouped by hash. If they all agree on one (and every peer answered), the
// revision is checked; if some peer was skipped, the next older hash is
// tried. A minority with another hash than the quorum's is alarmed member by
// member; with no quorum, CORRUPT is raised for member 0 (the whole
// cluster). It returns the members alarmed.
func (c *CompactChecker) CompactHashCheck(ctx context.Context) []uint64 {
	c.lg.Info("starting compact hash check", zap.String("local-member-id", membership.HexID(c.h.MemberID())))
	hashes := c.uncheckedRevisions()
	for i, hash := range hashes {
		peers := c.h.PeerHashByRev(ctx, hash.Revision)
		if len(peers) == 0 {
			continue
		}
		if done, alarmed := c.checkPeerHashes(ctx, hash, peers); done {
			c.lg.Info("finished compaction hash check", zap.Int("number-of-hashes-checked", i+1))
			return alarmed
		}
	}
	c.lg.Info("finished compaction hash check", zap.Int("number-of-hashes-checked", len(hashes)))
	return nil
}

// checkPeerHashes groups the leader and the peers at its compaction
// revision by hash and raises the alarms. It tells whether the check is
// done (checked on the whole cluster, or alarms raised) or the next hash is
// to be tried.
func (c *CompactChecker) checkPeerHashes(ctx context.Context, leaderHash KeyValueHash, peers []PeerHash) (bool, []uint64) {
	leaderID := c.h.MemberID()
	hash2members := map[uint32][]uint64{leaderHash.Hash: {leaderID}}

	peersChecked := 0
	for _, p := range peers {
		reason := ""
		switch {
		case p.Resp == nil:
			reason = "no response"
		case p.Resp.CompactRevision != leaderHash.CompactRevision:
			reason = fmt.Sprintf("the peer's CompactRevision %d doesn't match leader's CompactRevision %d",
				p.Resp.CompactRevision, leaderHash.CompactRevision)
		}
		if reason != "" {
			c.lg.Warn("Skipped peer's hash", zap.Int("number-of-peers", len(peers)),
				zap.String("leader-id", membership.HexID(leaderID)), zap.String("peer-id", membership.HexID(p.ID)), zap.String("reason", reason))
			continue
		}
		peersChecked++
		hash2members[p.Resp.Hash] = append(hash2members[p.Resp.Hash], p.ID)
	}

	if len(hash2members) == 1 {
		return c.handleConsistentHash(leaderHash, peersChecked, len(peers)), nil
	}

	// A mismatch: the majority with one hash, if there is one, is right.
	quorum := (len(peers)+1)/2 + 1
	quorumExist := false
	// In hash order, so that which group is logged first does not depend
	// on map order.
	keys := make([]uint32, 0, len(hash2members))
	for k := range hash2members {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	for _, k := range keys {
		if len(hash2members[k]) >= quorum {
			quorumExist = true
			delete(hash2members, k)
			break
		}
	}

	var alarmed []uint64
	if !quorumExist {
		// Which members diverged is unknown: member 0, the whole cluster.
		c.lg.Error("Detected compaction hash mismatch but cannot identify the corrupted members, so intentionally set the memberID as 0",
			zap.String("leader-id", membership.HexID(leaderID)),
			zap.Int64("leader-revision", leaderHash.Revision),
			zap.Int64("leader-compact-revision", leaderHash.CompactRevision),
			zap.Uint32("leader-hash", leaderHash.Hash),
		)
		c.h.TriggerCorruptAlarm(ctx, 0)
		alarmed = append(alarmed, 0)
	}
	for _, k := range keys {
		ids, ok := hash2members[k]
		if !ok {
			continue
		}
		if quorumExist {
			for _, id := range ids {
				c.h.TriggerCorruptAlarm(ctx, id)
				alarmed = append(alarmed, id)
			}
		}
		c.lg.Error("Detected compaction hash mismatch",
			zap.String("leader-id", membership.HexID(leaderID)),
			zap.Int64("leader-revision", leaderHash.Revision),
			zap.Int64("leader-compact-revision", leaderHash.CompactRevision),
			zap.Uint32("leader-hash", leaderHash.Hash),
			zap.Uint32("peer-hash", k),
			zap.String("peer-ids", idList(ids)),
			zap.Bool("quorum-exist", quorumExist),
		)
	}
	return true, alarmed
}

func (c *CompactChecker) handleConsistentHash(hash KeyValueHash, peersChecked, peerCnt int) bool {
	if peersChecked == peerCnt {
		c.lg.Info("successfully checked hash on whole cluster",
			zap.Int("number-of-peers-checked", peersChecked),
			zap.Int64("revision", hash.Revision),
			zap.Int64("compactRevision", hash.CompactRevision),
		)
		c.mu.Lock()
		if hash.Revision > c.latestRevisionChecked {
			c.latestRevisionChecked = hash.Revision
		}
		c.mu.Unlock()
		return true
	}
	c.lg.Warn("skipped revision in compaction hash check; was not able to check all peers",
		zap.Int("number-of-peers-checked", peersChecked),
		zap.Int("number-of-peers", peerCnt),
		zap.Int64("revision", hash.Revision),
		zap.Int64("compactRevision", hash.CompactRevision),
	)
	return false
}

// uncheckedRevisions are the stored hashes newer than the last revision
// checked, newest first.
func (c *CompactChecker) uncheckedRevisions() []KeyValueHash {
	c.mu.Lock()
	last := c.latestRevisionChecked
	c.mu.Unlock()
	hashes := c.h.Hashes()
	sort.Slice(hashes, func(i, j int) bool { return hashes[i].Revision > hashes[j].Revision })
	for i, h := range hashes {
		if h.Revision <= last {
			return hashes[:i]
		}
	}
	return hashes
}

// idList formats member IDs as etcd's types.IDSlice.String: hex, comma
// separated.
func idList(ids []uint64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = membership.HexID(id)
	}
	return strings.Join(s, ",")
}
