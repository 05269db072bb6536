package apply

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/alarms"
	"github.com/kvd-dev/kvd/pkg/membership"
	"github.com/kvd-dev/kvd/pkg/mvcc"
)

// Alarms are applied like any replicated state (etcd's applierV3backend
// Alarm): ACTIVATE and DEACTIVATE change the set and stage its record in
// the batch; GET lists it as of the entry.
func (a *Applier) applyAlarm(b *mvcc.Batch, r *pb.AlarmRequest) Result {
	resp := &pb.AlarmResponse{Header: &pb.ResponseHeader{Revision: b.Rev()}}
	as := a.cfg.Alarms
	if as == nil {
		return Result{Resp: resp}
	}
	switch r.Action {
	case pb.AlarmRequest_GET:
		resp.Alarms = as.Get(r.Alarm)
	case pb.AlarmRequest_ACTIVATE:
		if m := as.Activate(b, r.MemberID, r.Alarm); m != nil {
			resp.Alarms = append(resp.Alarms, m)
			a.lg.Warn("alarm raised", zap.Stringer("alarm", m.Alarm), zap.String("member", membership.HexID(m.MemberID)))
		}
	case pb.AlarmRequest_DEACTIVATE:
		if m := as.Deactivate(b, r.MemberID, r.Alarm); m != nil {
			resp.Alarms = append(resp.Alarms, m)
			a.lg.Info("alarm cleared", zap.Stringer("alarm", m.Alarm), zap.String("member", membership.HexID(m.MemberID)))
		}
	}
	return Result{Resp: resp}
}

// alarmRefusal is what the raised alarms refuse of req, before any other
// check, on every member (etcd's applierV3Corrupt around applierV3Capped):
// CORRUPT refuses puts, deletes, txns, compactions, lease grants and revokes
// with "etcdserver: corrupt cluster"; NOSPACE refuses puts, txns with a put in
// either branch (nested txns included) and lease grants with "etcdserver:
// mvcc: database space exceeded". Reads, deletes, compaction and the alarm
// requests themselves pass under NOSPACE.
func (a *Applier) alarmRefusal(req *pb.InternalRaftRequest) error {
	as := a.cfg.Alarms
	if as.Corrupt() {
		switch {
		case req.Put != nil, req.DeleteRange != nil, req.Txn != nil, req.Compaction != nil,
			req.LeaseGrant != nil, req.LeaseRevoke != nil:
			return rpctypes.ErrGRPCCorrupt
		}
	}
	if as.NoSpace() {
		switch {
		case req.Put != nil, req.LeaseGrant != nil:
			return rpctypes.ErrGRPCNoSpace
		case req.Txn != nil && alarms.Cost(req.Txn) > 0:
			return rpctypes.ErrGRPCNoSpace
		}
	}
	return nil
}

// overQuota is etcd's quotaApplierV3: a put, txn or lease grant that did
// not fit the quota when applied still applies (every member applies the
// same entries), but its caller gets "database space exceeded" and the
// member raises NOSPACE for itself unless one is raised.
func (a *Applier) overQuota(req *pb.InternalRaftRequest) bool {
	q := a.cfg.Quota
	if q == nil {
		return false
	}
	switch {
	case req.Put != nil:
		return !q.Available(req.Put)
	case req.Txn != nil:
		return !q.Available(req.Txn)
	case req.LeaseGrant != nil:
		return !q.Available(req.LeaseGrant)
	}
	return false
}

func (a *Applier) quotaExceeded(res Result) Result {
	if res.Err != nil {
		return res
	}
	if !a.cfg.Alarms.NoSpace() && a.cfg.RaiseNoSpace != nil {
		a.lg.Warn("request exceeded the backend quota; raising the NOSPACE alarm", zap.Int64("quota-size-bytes", a.cfg.Quota.Limit))
		a.cfg.RaiseNoSpace()
	}
	return Result{Err: rpctypes.ErrGRPCNoSpace}
}
