package apply

import (
	"bytes"
	"sort"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kvd-dev/kvd/pkg/mvcc"
)

// RangeEnd turns a request's range_end into mvcc's form: nil for a single
// key, []byte{0} for "from key on", otherwise [key, end).
func RangeEnd(end []byte) []byte {
	if len(end) == 0 {
		return nil
	}
	if len(end) == 1 && end[0] == 0 {
		return []byte{0}
	}
	return end
}

// Range answers a RangeRequest from r with etcd's semantics: filters and sort
// orders other than by key fetch everything, then sort, then cut at limit.
func Range(r mvcc.Reader, req *pb.RangeRequest) (*pb.RangeResponse, error) {
	limit := req.Limit
	if req.SortOrder != pb.RangeRequest_NONE ||
		req.MinModRevision != 0 || req.MaxModRevision != 0 ||
		req.MinCreateRevision != 0 || req.MaxCreateRevision != 0 {
		limit = 0
	}
	if limit > 0 {
		// One extra tells whether there is more.
		limit++
	}
	rr, err := r.Range(req.Key, RangeEnd(req.RangeEnd), mvcc.RangeOptions{Limit: limit, Rev: req.Revision, Count: req.CountOnly})
	if err != nil {
		return nil, err
	}
	a := new(rangeAnswer)
	kvs := kvPointers(rr, &a.one)
	if req.MaxModRevision != 0 {
		kvs = prune(kvs, func(kv *mvccpb.KeyValue) bool { return kv.ModRevision > req.MaxModRevision })
	}
	if req.MinModRevision != 0 {
		kvs = prune(kvs, func(kv *mvccpb.KeyValue) bool { return kv.ModRevision < req.MinModRevision })
	}
	if req.MaxCreateRevision != 0 {
		kvs = prune(kvs, func(kv *mvccpb.KeyValue) bool { return kv.CreateRevision > req.MaxCreateRevision })
	}
	if req.MinCreateRevision != 0 {
		kvs = prune(kvs, func(kv *mvccpb.KeyValue) bool { return kv.CreateRevision < req.MinCreateRevision })
	}

	order := req.SortOrder
	switch {
	case req.SortTarget != pb.RangeRequest_KEY && order == pb.RangeRequest_NONE:
		// mvcc returns keys ascending; any other target sorts ascending by default.
		order = pb.RangeRequest_ASCEND
	case req.SortTarget == pb.RangeRequest_KEY && order == pb.RangeRequest_ASCEND:
		order = pb.RangeRequest_NONE
	}
	if order != pb.RangeRequest_NONE {
		// sort.Sort (not a stable sort), as etcd does, so that ties come out
		// in the same order as etcd's.
		var s sort.Interface = kvSort{kvs, lessFunc(req.SortTarget)}
		if order == pb.RangeRequest_DESCEND {
			s = sort.Reverse(s)
		}
		sort.Sort(s)
	}

	resp := &a.resp
	a.hdr.Revision = rr.Rev
	resp.Header, resp.Count = &a.hdr, int64(rr.Count)
	if req.Limit > 0 && int64(len(kvs)) > req.Limit {
		kvs = kvs[:req.Limit]
		resp.More = true
	}
	if req.KeysOnly {
		// etcd v3.7 answers keys_only from its index unless it sorts by
		// value: the keys then carry no lease either.
		fromIndex := req.SortTarget != pb.RangeRequest_VALUE
		for _, kv := range kvs {
			kv.Value = nil
			if fromIndex {
				kv.Lease = 0
			}
		}
	}
	resp.Kvs = kvs
	return resp, nil
}

func prune(kvs []*mvccpb.KeyValue, drop func(*mvccpb.KeyValue) bool) []*mvccpb.KeyValue {
	out := kvs[:0]
	for _, kv := range kvs {
		if !drop(kv) {
			out = append(out, kv)
		}
	}
	return out
}

func lessFunc(t pb.RangeRequest_SortTarget) func(a, b *mvccpb.KeyValue) bool {
	switch t {
	case pb.RangeRequest_VERSION:
		return func(a, b *mvccpb.KeyValue) bool { return a.Version < b.Version }
	case pb.RangeRequest_CREATE:
		return func(a, b *mvccpb.KeyValue) bool { return a.CreateRevision < b.CreateRevision }
	case pb.RangeRequest_MOD:
		return func(a, b *mvccpb.KeyValue) bool { return a.ModRevision < b.ModRevision }
	case pb.RangeRequest_VALUE:
		return func(a, b *mvccpb.KeyValue) bool { return bytes.Compare(a.Value, b.Value) < 0 }
	default:
		return func(a, b *mvccpb.KeyValue) bool { return bytes.Compare(a.Key, b.Key) < 0 }
	}
}

type kvSort struct {
	kvs  []*mvccpb.KeyValue
	less func(a, b *mvccpb.KeyValue) bool
}

func (s kvSort) Len() int           { return len(s.kvs) }
func (s kvSort) Swap(i, j int)      { s.kvs[i], s.kvs[j] = s.kvs[j], s.kvs[i] }
func (s kvSort) Less(i, j int) bool { return s.less(s.kvs[i], s.kvs[j]) }

// rangeAnswer is a response, its header and a 1-key answer's KeyValue
// pointer in one allocation instead of three.
type rangeAnswer struct {
	resp pb.RangeResponse
	hdr  pb.ResponseHeader
	one  [1]*mvccpb.KeyValue
}

// kvPointers points at rr's KeyValues, in one (one KeyValue) or a new slice.
func kvPointers(rr *mvcc.RangeResult, one *[1]*mvccpb.KeyValue) []*mvccpb.KeyValue {
	if len(rr.KVs) == 0 {
		return nil
	}
	var kvs []*mvccpb.KeyValue
	if len(rr.KVs) == 1 {
		kvs = one[:]
	} else {
		kvs = make([]*mvccpb.KeyValue, len(rr.KVs))
	}
	for i := range rr.KVs {
		kvs[i] = &rr.KVs[i]
	}
	return kvs
}
