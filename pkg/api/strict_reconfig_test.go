package api

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"

	"github.com/kvd-dev/kvd/pkg/apply"
	"github.com/kvd-dev/kvd/pkg/membership"
)

var errProposed = errors.New("proposed")

// reconfRaft is member 1's raft as far as member changes go: it is the
// leader, every log is as long as its own, and it records that a conf
// change was proposed and refuses it.
type reconfRaft struct {
	Raft
	proposed int
}

func (r *reconfRaft) ID() uint64     { return 1 }
func (r *reconfRaft) Leader() uint64 { return 1 }
func (r *reconfRaft) ProposeConfChange(context.Context, raftpb.ConfChangeI) error {
	r.proposed++
	return errProposed
}

func (r *reconfRaft) Status(context.Context) (raft.Status, error) {
	st := raft.Status{Progress: map[uint64]tracker.Progress{}}
	st.ID = 1
	for id := uint64(1); id <= 9; id++ {
		st.Progress[id] = tracker.Progress{Match: 100}
	}
	return st, nil
}

// now is the fake clock of the strict reconfiguration tests.
var now = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

const (
	long  = -time.Minute     // connected well over HealthInterval ago
	fresh = -time.Second     // connected, but under HealthInterval ago
	edge  = -HealthInterval  // connected exactly HealthInterval ago: not before now-HealthInterval
	down  = time.Duration(0) // no stream
)

// voter and learner are members; a voter without a name has not started.
func voter(id uint64, name string) membership.Member {
	return membership.Member{ID: id, Name: name, PeerURLs: []string{"http://127.0.0.1:" + string(rune('0'+id))}}
}

func learner(id uint64) membership.Member {
	m := voter(id, "l")
	m.IsLearner = true
	return m
}

var (
	threeStarted = []membership.Member{voter(1, "a"), voter(2, "b"), voter(3, "c")}
	// Member 3 was added but never started.
	threeOneUnstarted = []membership.Member{voter(1, "a"), voter(2, "b"), voter(3, "")}
)

// strict-reconfig-check, case by case as etcd v3.7.3's mayAddMember,
// mayRemoveMember and mayPromoteMember: "not enough started members" counts
// voters that published their name, "unhealthy cluster" counts voters member
// 1 has been connected to for HealthInterval. Member 1 is the local member
// (and the leader); peers maps a peer to how long ago its stream came up.
func TestStrictReconfigCheck(t *testing.T) {
	add := func(learner bool) func(*clusterServer) error {
		return func(c *clusterServer) error {
			_, err := c.MemberAdd(context.Background(), &etcdserverpb.MemberAddRequest{PeerURLs: []string{"http://127.0.0.1:9"}, IsLearner: learner})
			return err
		}
	}
	remove := func(id uint64) func(*clusterServer) error {
		return func(c *clusterServer) error {
			_, err := c.MemberRemove(context.Background(), &etcdserverpb.MemberRemoveRequest{ID: id})
			return err
		}
	}
	promote := func(id uint64) func(*clusterServer) error {
		return func(c *clusterServer) error {
			_, err := c.MemberPromote(context.Background(), &etcdserverpb.MemberPromoteRequest{ID: id})
			return err
		}
	}
	all := func(d time.Duration) map[uint64]time.Duration {
		return map[uint64]time.Duration{2: d, 3: d, 4: d}
	}
	tests := []struct {
		name    string
		members []membership.Member
		peers   map[uint64]time.Duration
		op      func(*clusterServer) error
		want    error // errProposed: passed the check
	}{
		// Member add.
		{"add voter, all connected long", threeStarted, all(long), add(false), errProposed},
		{"add voter, peers connected just now", threeStarted, all(fresh), add(false), rpctypes.ErrGRPCUnhealthy},
		{"add voter, peers connected exactly HealthInterval ago", threeStarted, all(edge), add(false), rpctypes.ErrGRPCUnhealthy},
		{"add voter, one peer down", threeStarted, map[uint64]time.Duration{2: long}, add(false), rpctypes.ErrGRPCUnhealthy},
		{"add voter, one peer fresh", threeStarted, map[uint64]time.Duration{2: long, 3: fresh}, add(false), rpctypes.ErrGRPCUnhealthy},
		{"add voter, a voter not started", threeOneUnstarted, all(long), add(false), rpctypes.ErrGRPCMemberNotEnoughStarted},
		{"add voter, a voter not started and peers down", threeOneUnstarted, nil, add(false), rpctypes.ErrGRPCMemberNotEnoughStarted},
		{"add learner, one peer down", threeStarted, map[uint64]time.Duration{2: long}, add(true), rpctypes.ErrGRPCUnhealthy},
		{"add learner, a voter not started", threeOneUnstarted, all(long), add(true), errProposed},
		{"add learner, all connected long", threeStarted, all(long), add(true), errProposed},
		{"add voter to one voter", []membership.Member{voter(1, "a")}, nil, add(false), errProposed},
		{"add voter to one voter and a learner", []membership.Member{voter(1, "a"), learner(4)}, nil, add(false), errProposed},
		{"add voter to two voters, one not started", []membership.Member{voter(1, "a"), voter(2, "")}, all(long), add(false), rpctypes.ErrGRPCMemberNotEnoughStarted},
		{"add voter to two voters, peer fresh", []membership.Member{voter(1, "a"), voter(2, "b")}, all(fresh), add(false), rpctypes.ErrGRPCUnhealthy},
		{"add voter to two voters, peer long", []membership.Member{voter(1, "a"), voter(2, "b")}, all(long), add(false), errProposed},

		// Member remove.
		{"remove learner, peers down", append([]membership.Member{learner(4)}, threeOneUnstarted...), nil, remove(4), errProposed},
		{"remove voter, all connected long", threeStarted, all(long), remove(2), errProposed},
		{"remove voter, peers connected just now", threeStarted, all(fresh), remove(2), rpctypes.ErrGRPCUnhealthy},
		{"remove connected voter, other peer down", threeStarted, map[uint64]time.Duration{2: long}, remove(2), rpctypes.ErrGRPCUnhealthy},
		{"remove down voter", threeStarted, map[uint64]time.Duration{2: long}, remove(3), errProposed},
		{"remove down voter, other peer fresh", threeStarted, map[uint64]time.Duration{2: fresh}, remove(3), errProposed},
		{"remove freshly connected voter, other long", threeStarted, map[uint64]time.Duration{2: long, 3: fresh}, remove(3), rpctypes.ErrGRPCUnhealthy},
		{"remove self, all connected long", threeStarted, all(long), remove(1), errProposed},
		{"remove self, peers connected just now", threeStarted, all(fresh), remove(1), rpctypes.ErrGRPCUnhealthy},
		{"remove voter, the other not started", threeOneUnstarted, all(long), remove(2), rpctypes.ErrGRPCMemberNotEnoughStarted},
		{"remove the voter not started", threeOneUnstarted, all(long), remove(3), errProposed},
		{"remove voter of four, one fresh", append([]membership.Member{voter(4, "d")}, threeStarted...), map[uint64]time.Duration{2: long, 3: long, 4: fresh}, remove(2), errProposed},
		{"remove voter of four, two fresh", append([]membership.Member{voter(4, "d")}, threeStarted...), map[uint64]time.Duration{2: long, 3: fresh, 4: fresh}, remove(2), rpctypes.ErrGRPCUnhealthy},

		// Member promote: started members only, connections not checked.
		{"promote, peers down", append([]membership.Member{learner(4)}, threeStarted...), nil, promote(4), errProposed},
		{"promote, a voter not started", append([]membership.Member{learner(4)}, threeOneUnstarted...), nil, promote(4), errProposed},
		{"promote, two voters not started", []membership.Member{voter(1, "a"), voter(2, ""), voter(3, ""), learner(4)}, all(long), promote(4), rpctypes.ErrGRPCMemberNotEnoughStarted},
	}
	for _, strict := range []bool{true, false} {
		for _, tc := range tests {
			cl := membership.New(7, 1)
			cl.Restore(tc.members, nil)
			r := &reconfRaft{}
			s := New(Config{StrictReconfigCheck: strict}, Deps{Raft: r, Cluster: cl, Registry: apply.NewRegistry(),
				Now: func() time.Time { return now },
				PeerActiveSince: func(id uint64) time.Time {
					if d := tc.peers[id]; d != down {
						return now.Add(d)
					}
					return time.Time{}
				}})
			err := tc.op(&clusterServer{s: s})
			want := tc.want
			if !strict {
				want = errProposed
			}
			if !errors.Is(err, want) {
				t.Errorf("strict %v: %s: %v, want %v", strict, tc.name, err, want)
			}
			if proposed := errors.Is(err, errProposed); proposed != (r.proposed == 1) {
				t.Errorf("strict %v: %s: %d conf changes proposed, answer %v", strict, tc.name, r.proposed, err)
			}
		}
	}
}

// Config.HealthInterval replaces etcd's 5s: a peer connected a second ago
// counts with half a second, not with the default.
func TestStrictReconfigHealthInterval(t *testing.T) {
	for _, tc := range []struct {
		interval time.Duration
		want     error
	}{{0, rpctypes.ErrGRPCUnhealthy}, {500 * time.Millisecond, errProposed}, {-1, errProposed}} {
		cl := membership.New(7, 1)
		cl.Restore(threeStarted, nil)
		s := New(Config{StrictReconfigCheck: true, HealthInterval: tc.interval}, Deps{Raft: &reconfRaft{}, Cluster: cl, Registry: apply.NewRegistry(),
			Now:             func() time.Time { return now },
			PeerActiveSince: func(uint64) time.Time { return now.Add(fresh) }})
		_, err := (&clusterServer{s: s}).MemberAdd(context.Background(), &etcdserverpb.MemberAddRequest{PeerURLs: []string{"http://127.0.0.1:9"}})
		if !errors.Is(err, tc.want) {
			t.Errorf("interval %v: %v, want %v", tc.interval, err, tc.want)
		}
	}
}
