package api

import (
	"bytes"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// The checks below run before a request is proposed, as etcd's gRPC layer
// does, so bad input never reaches the log.

func checkRange(r *pb.RangeRequest) error {
	if len(r.Key) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	if _, ok := pb.RangeRequest_SortOrder_name[int32(r.SortOrder)]; !ok {
		return rpctypes.ErrGRPCInvalidSortOption
	}
	if _, ok := pb.RangeRequest_SortTarget_name[int32(r.SortTarget)]; !ok {
		return rpctypes.ErrGRPCInvalidSortOption
	}
	return nil
}

func checkPut(r *pb.PutRequest) error {
	if len(r.Key) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	if r.IgnoreValue && len(r.Value) != 0 {
		return rpctypes.ErrGRPCValueProvided
	}
	if r.IgnoreLease && r.Lease != 0 {
		return rpctypes.ErrGRPCLeaseProvided
	}
	return nil
}

func checkDelete(r *pb.DeleteRangeRequest) error {
	if len(r.Key) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	return nil
}

func checkTxn(r *pb.TxnRequest, maxTxnOps int) error {
	opc := max(len(r.Compare), len(r.Success), len(r.Failure))
	if opc > maxTxnOps {
		return rpctypes.ErrGRPCTooManyOps
	}
	for _, c := range r.Compare {
		if len(c.Key) == 0 {
			return rpctypes.ErrGRPCEmptyKey
		}
	}
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			if err := checkOp(op, maxTxnOps-opc); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkTxnTop adds etcd's duplicate-key rule, checked once at the top (it
// recurses itself).
func checkTxnTop(r *pb.TxnRequest, maxTxnOps int) error {
	if err := checkTxn(r, maxTxnOps); err != nil {
		return err
	}
	if _, _, err := checkIntervals(r.Success); err != nil {
		return err
	}
	_, _, err := checkIntervals(r.Failure)
	return err
}

func checkOp(op *pb.RequestOp, maxTxnOps int) error {
	switch {
	case op.GetRequestRange() != nil:
		return checkRange(op.GetRequestRange())
	case op.GetRequestPut() != nil:
		return checkPut(op.GetRequestPut())
	case op.GetRequestDeleteRange() != nil:
		return checkDelete(op.GetRequestDeleteRange())
	case op.GetRequestTxn() != nil:
		return checkTxn(op.GetRequestTxn(), maxTxnOps)
	}
	// An empty op, as etcd answers it.
	return rpctypes.ErrGRPCKeyNotFound
}

// interval is [begin, end) over keys where an empty end is +infinity, the
// way etcd's interval tree compares ("affine" strings). A point k is
// [k, k+"\x00").
type interval struct{ begin, end []byte }

func point(k []byte) interval {
	return interval{begin: k, end: append(append([]byte{}, k...), 0)}
}

// lessAffine orders keys with the empty key as +infinity.
func lessAffine(a, b []byte) bool {
	switch {
	case len(a) == 0:
		return false
	case len(b) == 0:
		return true
	}
	return bytes.Compare(a, b) < 0
}

func (i interval) intersects(o interval) bool {
	return lessAffine(i.begin, o.end) && lessAffine(o.begin, i.end)
}

type intervals []interval

func (s intervals) intersects(o interval) bool {
	for _, i := range s {
		if i.intersects(o) {
			return true
		}
	}
	return false
}

// checkIntervals is etcd's duplicate-key rule: within one txn path, a key
// may be put at most once and not also be deleted. Then/else branches of a
// nested txn are exclusive, so they may put the same key.
func checkIntervals(reqs []*pb.RequestOp) (map[string]struct{}, intervals, error) {
	var dels intervals
	for _, req := range reqs {
		d := req.GetRequestDeleteRange()
		if d == nil {
			continue
		}
		if len(d.RangeEnd) != 0 {
			dels = append(dels, interval{begin: d.Key, end: d.RangeEnd})
		} else {
			dels = append(dels, point(d.Key))
		}
	}
	puts := make(map[string]struct{})
	for _, req := range reqs {
		t := req.GetRequestTxn()
		if t == nil {
			continue
		}
		putsThen, delsThen, err := checkIntervals(t.Success)
		if err != nil {
			return nil, dels, err
		}
		putsElse, delsElse, err := checkIntervals(t.Failure)
		if err != nil {
			return nil, dels, err
		}
		for k := range putsThen {
			if _, ok := puts[k]; ok {
				return nil, dels, rpctypes.ErrGRPCDuplicateKey
			}
			if dels.intersects(point([]byte(k))) {
				return nil, dels, rpctypes.ErrGRPCDuplicateKey
			}
			puts[k] = struct{}{}
		}
		for k := range putsElse {
			if _, ok := puts[k]; ok {
				if _, safe := putsThen[k]; !safe {
					return nil, dels, rpctypes.ErrGRPCDuplicateKey
				}
			}
			if dels.intersects(point([]byte(k))) {
				return nil, dels, rpctypes.ErrGRPCDuplicateKey
			}
			puts[k] = struct{}{}
		}
		dels = append(dels, delsThen...)
		dels = append(dels, delsElse...)
	}
	for _, req := range reqs {
		p := req.GetRequestPut()
		if p == nil {
			continue
		}
		k := string(p.Key)
		if _, ok := puts[k]; ok {
			return nil, dels, rpctypes.ErrGRPCDuplicateKey
		}
		if dels.intersects(point(p.Key)) {
			return nil, dels, rpctypes.ErrGRPCDuplicateKey
		}
		puts[k] = struct{}{}
	}
	return puts, dels, nil
}
