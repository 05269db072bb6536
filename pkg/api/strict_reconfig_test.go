package api

import (
	"context"
	"errors"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/kvd-dev/kvd/pkg/apply"
	"github.com/kvd-dev/kvd/pkg/membership"
)

var errProposed = errors.New("proposed")

// reconfRaft is member 1's raft as far as member changes go: it records
// that a conf change was proposed and refuses it.
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

// strict-reconfig-check: with it, a member add or remove that would leave
// fewer voters up than a quorum is refused before it is proposed; without
// it, it is proposed as asked.
func TestStrictReconfigCheck(t *testing.T) {
	for _, strict := range []bool{true, false} {
		cl := membership.New(7, 1)
		cl.Restore([]membership.Member{
			{ID: 1, Name: "a", PeerURLs: []string{"http://127.0.0.1:1"}},
			{ID: 2, Name: "b", PeerURLs: []string{"http://127.0.0.1:2"}},
			{ID: 3, Name: "c", PeerURLs: []string{"http://127.0.0.1:3"}},
		}, nil)
		r := &reconfRaft{}
		s := New(Config{StrictReconfigCheck: strict}, Deps{Raft: r, Cluster: cl, Registry: apply.NewRegistry(),
			// Member 2 is up, member 3 is down.
			PeerActive: func(id uint64) bool { return id == 2 }})
		c := &clusterServer{s: s}
		ctx := context.Background()

		// Removing 2 leaves voters 1 and 3 with only 1 up; adding a voter
		// makes 4 voters with 2 up.
		_, rmErr := c.MemberRemove(ctx, &etcdserverpb.MemberRemoveRequest{ID: 2})
		_, addErr := c.MemberAdd(ctx, &etcdserverpb.MemberAddRequest{PeerURLs: []string{"http://127.0.0.1:4"}})
		// Removing the member that is down keeps 2 of 2 up.
		_, rmDownErr := c.MemberRemove(ctx, &etcdserverpb.MemberRemoveRequest{ID: 3})
		if strict {
			for what, err := range map[string]error{"remove of an up member": rmErr, "add": addErr} {
				if !errors.Is(err, rpctypes.ErrGRPCMemberNotEnoughStarted) {
					t.Errorf("strict: %s: %v, want %v", what, err, rpctypes.ErrGRPCMemberNotEnoughStarted)
				}
			}
			if !errors.Is(rmDownErr, errProposed) {
				t.Errorf("strict: remove of the down member: %v, want it proposed", rmDownErr)
			}
			if r.proposed != 1 {
				t.Errorf("strict: %d conf changes proposed, want 1", r.proposed)
			}
			continue
		}
		for what, err := range map[string]error{"remove of an up member": rmErr, "add": addErr, "remove of the down member": rmDownErr} {
			if !errors.Is(err, errProposed) {
				t.Errorf("not strict: %s: %v, want it proposed", what, err)
			}
		}
	}
}
