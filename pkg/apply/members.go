package apply

import (
	"encoding/json"
	"errors"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/membershippb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/kvd-dev/kvd/pkg/membership"
	"github.com/kvd-dev/kvd/pkg/mvcc"
)

// ConfChangeContext is the context of a conf change kvd proposes: the member
// (etcd's JSON) and, for a promotion, isPromote, as in etcd's
// ConfigChangeContext.
type ConfChangeContext struct {
	membership.Member
	IsPromote bool `json:"isPromote,omitempty"`
}

// Marshal encodes the context.
func (c ConfChangeContext) Marshal() []byte {
	b, err := json.Marshal(c)
	if err != nil {
		panic(fmt.Sprintf("apply: marshal conf change context: %v", err))
	}
	return b
}

// confChangeKind maps a conf change to a membership change; ok is false for
// one that changes no member (raft-only, e.g. an emptied invalid change).
func confChangeKind(cc *raftpb.ConfChange) (membership.ChangeKind, membership.Member, error) {
	var ctx ConfChangeContext
	if len(cc.GetContext()) > 0 {
		if err := json.Unmarshal(cc.GetContext(), &ctx); err != nil {
			return 0, membership.Member{}, fmt.Errorf("decode conf change context: %w", err)
		}
	}
	m := ctx.Member
	m.ID = cc.GetNodeId()
	switch cc.GetType() {
	case raftpb.ConfChangeAddNode:
		if ctx.IsPromote {
			return membership.Promote, m, nil
		}
		return membership.AddMember, m, nil
	case raftpb.ConfChangeAddLearnerNode:
		return membership.AddLearner, m, nil
	case raftpb.ConfChangeRemoveNode:
		return membership.RemoveMember, m, nil
	case raftpb.ConfChangeUpdateNode:
		return membership.UpdateMember, m, nil
	}
	return 0, m, fmt.Errorf("unknown conf change type %v", cc.GetType())
}

// applyMemberChange validates a conf change against the member list and,
// when valid, applies and records it. An invalid change is emptied (NodeID
// none) before raft sees it, as etcd does, and its proposer gets the error.
func (a *Applier) applyMemberChange(b *mvcc.Batch, cc *raftpb.ConfChange) error {
	kind, m, err := confChangeKind(cc)
	if err == nil {
		err = a.cfg.Members.Validate(kind, m)
	}
	if err != nil {
		cc.NodeId = new(uint64(0))
		return err
	}
	rec := a.cfg.Members.Apply(kind, m)
	if kind == membership.RemoveMember {
		b.DeleteMember(membership.MemberKey(m.ID))
		b.PutMember(membership.RemovedKey(m.ID), []byte{})
	} else {
		b.PutMember(membership.MemberKey(rec.ID), rec.Marshal())
	}
	return nil
}

// applyAttrSet records the name and client URLs a member published.
func (a *Applier) applyAttrSet(b *mvcc.Batch, r *membershippb.ClusterMemberAttrSetRequest) Result {
	if a.cfg.Members == nil {
		return Result{Resp: &pb.MemberListResponse{}}
	}
	attrs := r.GetMemberAttributes()
	rec, ok := a.cfg.Members.SetAttributes(r.GetMember_ID(), attrs.GetName(), attrs.GetClientUrls())
	if ok {
		b.PutMember(membership.MemberKey(rec.ID), rec.Marshal())
	}
	return Result{Resp: &pb.MemberListResponse{}}
}

// MemberErrToGRPC maps a membership error to etcd's wire error.
func MemberErrToGRPC(err error) error {
	switch {
	case errors.Is(err, membership.ErrIDRemoved), errors.Is(err, membership.ErrIDNotFound):
		return rpctypes.ErrGRPCMemberNotFound
	case errors.Is(err, membership.ErrIDExists):
		return rpctypes.ErrGRPCMemberExist
	case errors.Is(err, membership.ErrPeerURLExists):
		return rpctypes.ErrGRPCPeerURLExist
	case errors.Is(err, membership.ErrMemberNotLearner):
		return rpctypes.ErrGRPCMemberNotLearner
	case errors.Is(err, membership.ErrTooManyLearners):
		return rpctypes.ErrGRPCTooManyLearners
	case errors.Is(err, membership.ErrLearnerNotReady):
		return rpctypes.ErrGRPCLearnerNotReady
	}
	return err
}
