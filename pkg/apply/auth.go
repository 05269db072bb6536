package apply

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/kvd-dev/kvd/pkg/authz"
	"github.com/kvd-dev/kvd/pkg/mvcc"
)

// The applier checks permissions at apply time, on every member, against
// the auth store as of the entry (etcd's authApplierV3): a permission
// revoked by an earlier entry can never be used by a later one.

func callerOf(req *pb.InternalRaftRequest) authz.Info {
	h := req.GetHeader()
	return authz.CallerOf(h)
}

// applyAuth applies an Auth service request.
func (a *Applier) applyAuth(b *mvcc.Batch, req *pb.InternalRaftRequest, index uint64) Result {
	resp, err := a.cfg.Auth.Apply(b, req, index, &pb.ResponseHeader{Revision: b.Rev()})
	if err != nil {
		return Result{Err: err}
	}
	return Result{Resp: resp}
}

// checkRequest is the permission check of a KV or lease request; nil when
// auth is off or the caller may.
func (a *Applier) checkRequest(req *pb.InternalRaftRequest) error {
	az := a.cfg.Auth
	if az == nil || !az.Enabled() {
		return nil
	}
	who := callerOf(req)
	switch {
	case req.Put != nil:
		return a.checkPut(who, req.Put)
	case req.DeleteRange != nil:
		return checkDelete(az, who, req.DeleteRange)
	case req.Txn != nil:
		return a.checkTxn(who, req.Txn)
	case req.LeaseRevoke != nil:
		return a.checkLeaseKeys(who, req.LeaseRevoke.ID)
	}
	return nil
}

func (a *Applier) checkPut(who authz.Info, r *pb.PutRequest) error {
	az := a.cfg.Auth
	if err := az.CheckWrite(who, r.Key, nil); err != nil {
		return err
	}
	// A lease whose keys the caller may not write may not take new keys:
	// the caller could not revoke it.
	if err := a.checkLeaseKeys(who, r.Lease); err != nil {
		return err
	}
	if r.PrevKv {
		return az.CheckRead(who, r.Key, nil)
	}
	return nil
}

func checkDelete(az *authz.Store, who authz.Info, r *pb.DeleteRangeRequest) error {
	if err := az.CheckWrite(who, r.Key, r.RangeEnd); err != nil {
		return err
	}
	if r.PrevKv {
		return az.CheckRead(who, r.Key, r.RangeEnd)
	}
	return nil
}

// checkTxn checks every compare and every op of both branches, nested txns
// included, as etcd: what a txn may touch does not depend on its compares.
func (a *Applier) checkTxn(who authz.Info, rt *pb.TxnRequest) error {
	return CheckTxn(a.cfg.Auth, who, rt, a.checkPut)
}

// CheckTxn is the permission check of a txn; the read-only path uses it
// with a put check that is never reached.
func CheckTxn(az *authz.Store, who authz.Info, rt *pb.TxnRequest, put func(authz.Info, *pb.PutRequest) error) error {
	for _, c := range rt.Compare {
		if err := az.CheckRead(who, c.Key, c.RangeEnd); err != nil {
			return err
		}
	}
	for _, ops := range [][]*pb.RequestOp{rt.Success, rt.Failure} {
		for _, op := range ops {
			var err error
			switch {
			case op.GetRequestRange() != nil:
				r := op.GetRequestRange()
				err = az.CheckRead(who, r.Key, r.RangeEnd)
			case op.GetRequestPut() != nil:
				err = put(who, op.GetRequestPut())
			case op.GetRequestDeleteRange() != nil:
				d := op.GetRequestDeleteRange()
				if d.PrevKv {
					if err = az.CheckRead(who, d.Key, d.RangeEnd); err != nil {
						return err
					}
				}
				err = az.CheckWrite(who, d.Key, d.RangeEnd)
			case op.GetRequestTxn() != nil:
				err = CheckTxn(az, who, op.GetRequestTxn(), put)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// checkLeaseKeys requires write permission on every key attached to lease
// id (if it exists), unless the caller is an admin.
func (a *Applier) checkLeaseKeys(who authz.Info, id int64) error {
	if id == 0 || a.cfg.Leases == nil {
		return nil
	}
	keys := a.cfg.Leases.Keys(id)
	if len(keys) == 0 || a.cfg.Auth.IsAdmin(who) {
		return nil
	}
	for _, k := range keys {
		if err := a.cfg.Auth.CheckWrite(who, []byte(k), nil); err != nil {
			return err
		}
	}
	return nil
}
