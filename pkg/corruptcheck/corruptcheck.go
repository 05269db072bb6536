// Package corruptcheck is etcd v3.7.3's periodic corruption check (its
// corruptionChecker.PeriodicCheck, run every corrupt-check-time on the
// leader): the leader hashes its key space (HashKV) at its current revision,
// asks every peer for its hash at that revision, and raises the CORRUPT alarm
// (through raft) for the first member found diverged. The package decides;
// the server supplies the hashes, the read index and the alarm (Hasher).
package corruptcheck

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/membership"
)

// KeyValueHash is a member's HashKV: the hash of its key space at Revision,
// with the compaction revision it was taken under.
type KeyValueHash struct {
	Hash            uint32
	Revision        int64
	CompactRevision int64
}

// PeerHash is one peer's answer to HashKV at the leader's revision: Resp,
// or Err when no endpoint of the peer answered.
type PeerHash struct {
	ID        uint64
	Endpoints []string
	Resp      *pb.HashKVResponse
	Err       error
}

// Hasher is what the check needs of the member.
type Hasher interface {
	// MemberID is this member's ID.
	MemberID() uint64
	// HashByRev hashes the local key space at rev (0: the current revision)
	// and returns the current revision too.
	HashByRev(rev int64) (KeyValueHash, int64, error)
	// PeerHashByRev asks every other member for its hash at rev.
	PeerHashByRev(ctx context.Context, rev int64) []PeerHash
	// LinearizableReadNotify waits until this member applied everything
	// committed before the call.
	LinearizableReadNotify(ctx context.Context) error
	// TriggerCorruptAlarm raises CORRUPT for member id through raft.
	TriggerCorruptAlarm(ctx context.Context, id uint64)
}

// Checker runs the checks against a Hasher.
type Checker struct {
	lg *zap.Logger
	h  Hasher
}

// New returns a checker logging to lg.
func New(lg *zap.Logger, h Hasher) *Checker {
	return &Checker{lg: lg, h: h}
}

// PeriodicCheck is etcd's PeriodicCheck, run by the leader. It hashes the
// local key space (h), gathers the peers' hashes at h's revision, waits for
// a linearizable read point and hashes again (h2), then:
//   - h and h2 at the same revision and compaction with different hashes:
//     the leader itself is corrupt;
//   - a follower ahead of the leader's revision, or compacted past the
//     leader's compaction revision: that follower is corrupt;
//   - a follower at the leader's (first) compaction revision with another
//     hash at the leader's revision: that follower is corrupt.
//
// Only the first member found is alarmed in one pass, as in etcd. Peers
// that did not answer are skipped. It returns the member alarmed (0: none).
func (c *Checker) PeriodicCheck(ctx context.Context) (uint64, error) {
	h, _, err := c.h.HashByRev(0)
	if err != nil {
		return 0, err
	}
	peers := c.h.PeerHashByRev(ctx, h.Revision)

	if err := c.h.LinearizableReadNotify(ctx); err != nil {
		return 0, err
	}

	h2, rev2, err := c.h.HashByRev(0)
	if err != nil {
		return 0, err
	}

	var alarmed uint64
	mismatch := func(id uint64) {
		if alarmed != 0 {
			return
		}
		alarmed = id
		c.h.TriggerCorruptAlarm(ctx, id)
	}
	self := c.h.MemberID()

	if h2.Hash != h.Hash && h2.Revision == h.Revision && h.CompactRevision == h2.CompactRevision {
		c.lg.Warn(
			"found hash mismatch",
			zap.String("local-member-id", membership.HexID(self)),
			zap.Int64("revision-1", h.Revision),
			zap.Int64("compact-revision-1", h.CompactRevision),
			zap.Uint32("hash-1", h.Hash),
			zap.Int64("revision-2", h2.Revision),
			zap.Int64("compact-revision-2", h2.CompactRevision),
			zap.Uint32("hash-2", h2.Hash),
		)
		mismatch(self)
	}

	checked := 0
	for _, p := range peers {
		if p.Resp == nil {
			continue
		}
		checked++
		peerRev := int64(0)
		if p.Resp.Header != nil {
			peerRev = p.Resp.Header.Revision
		}

		// The leader expects a follower's revision at or below its own.
		if peerRev > rev2 {
			c.lg.Warn(
				"revision from follower must be less than or equal to leader's",
				zap.String("leader-member-id", membership.HexID(self)),
				zap.Int64("leader-revision", rev2),
				zap.Int64("follower-revision", peerRev),
				zap.String("follower-peer-id", membership.HexID(p.ID)),
			)
			mismatch(p.ID)
		}

		// The leader expects a follower's compaction revision at or below
		// its own.
		if p.Resp.CompactRevision > h2.CompactRevision {
			c.lg.Warn(
				"compact revision from follower must be less than or equal to leader's",
				zap.String("leader-member-id", membership.HexID(self)),
				zap.Int64("leader-compact-revision", h2.CompactRevision),
				zap.Int64("follower-compact-revision", p.Resp.CompactRevision),
				zap.String("follower-peer-id", membership.HexID(p.ID)),
			)
			mismatch(p.ID)
		}

		// A follower at the leader's (first) compaction revision must hash
		// the same at the leader's revision.
		if p.Resp.CompactRevision == h.CompactRevision && p.Resp.Hash != h.Hash {
			c.lg.Warn(
				"same compact revision then hashes must match",
				zap.String("leader-member-id", membership.HexID(self)),
				zap.Int64("leader-revision", h.Revision),
				zap.Int64("leader-compact-revision", h2.CompactRevision),
				zap.Uint32("leader-hash", h.Hash),
				zap.Int64("follower-revision", peerRev),
				zap.Int64("follower-compact-revision", p.Resp.CompactRevision),
				zap.Uint32("follower-hash", p.Resp.Hash),
				zap.String("follower-peer-id", membership.HexID(p.ID)),
			)
			mismatch(p.ID)
		}
	}
	c.lg.Info("finished peer corruption check", zap.Int("number-of-peers-checked", checked))
	return alarmed, nil
}
