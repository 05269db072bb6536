package apply

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/kvd-dev/kvd/pkg/mvcc"
)

// applyLeaseGrant adds the lease and stages its record in the batch, so the
// record commits with the batch's consistent index.
func (a *Applier) applyLeaseGrant(b *mvcc.Batch, r *pb.LeaseGrantRequest) Result {
	rec, err := a.cfg.Leases.Grant(r.ID, r.TTL)
	if err != nil {
		return Result{Err: ToGRPC(err)}
	}
	b.PutLease(rec.ID, rec.Marshal())
	return Result{Resp: &pb.LeaseGrantResponse{Header: &pb.ResponseHeader{Revision: b.Rev()}, ID: rec.ID, TTL: rec.TTL}}
}

// applyLeaseRevoke removes the lease and deletes its keys in one write
// transaction (one revision; watchers get the DELETE events together), in
// key order as etcd, with the removal of its record in the same batch.
func (a *Applier) applyLeaseRevoke(b *mvcc.Batch, r *pb.LeaseRevokeRequest) Result {
	keys, err := a.cfg.Leases.Revoke(r.ID)
	if err != nil {
		return Result{Err: ToGRPC(err)}
	}
	t := b.Write()
	for _, k := range keys {
		t.DeleteRange([]byte(k), nil)
	}
	if a.cfg.Events != nil {
		a.events = append(a.events, t.Events()...)
	}
	t.End()
	b.DeleteLease(r.ID)
	return Result{Resp: &pb.LeaseRevokeResponse{Header: &pb.ResponseHeader{Revision: b.Rev()}}}
}

// applyLeaseCheckpoint records the remaining TTLs of leases that exist, in
// their backend records too (etcd persists checkpoints from v3.6 on).
func (a *Applier) applyLeaseCheckpoint(b *mvcc.Batch, r *pb.LeaseCheckpointRequest) Result {
	for _, c := range r.Checkpoints {
		if rec, ok := a.cfg.Leases.Checkpoint(c.ID, c.Remaining_TTL); ok {
			b.PutLease(rec.ID, rec.Marshal())
		}
	}
	return Result{Resp: &pb.LeaseCheckpointResponse{Header: &pb.ResponseHeader{Revision: b.Rev()}}}
}
