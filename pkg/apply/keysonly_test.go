package apply

import (
	"errors"

	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-dev/kvd/pkg/mvcc"
)

// etcd v3.7.3 serves a keys_only range from its index (no leases there)
// unless it sorts by value: then it reads the values and the keys keep their
// lease. Limit, revision, filters and count_only change nothing of that; the
// same holds for ranges inside a txn, read-only or not.
func TestKeysOnlyRangeLease(t *testing.T) {
	eachLeaseEnv(t, func(t *testing.T, e *leaseEnv) {
		e.mustDo(grant(7, 60))
		e.mustDo(putLease("k1", 7))
		e.mustDo(putLease("k2", 7))
		rev := e.st.Rev()
		e.mustDo(putLease("k3", 0))
		var reqs []*pb.RangeRequest
		for target := range int32(5) {
			for order := range int32(3) {
				base := &pb.RangeRequest{Key: []byte("k"), RangeEnd: []byte("l"), KeysOnly: true,
					SortTarget: pb.RangeRequest_SortTarget(target), SortOrder: pb.RangeRequest_SortOrder(order)}
				variants := []func(r *pb.RangeRequest){
					func(*pb.RangeRequest) {},
					func(r *pb.RangeRequest) { r.Limit = 1 },
					func(r *pb.RangeRequest) { r.Limit = 5 },
					func(r *pb.RangeRequest) { r.Revision = rev },
					func(r *pb.RangeRequest) { r.MinModRevision = 2 },
					func(r *pb.RangeRequest) { r.MaxCreateRevision = rev },
					func(r *pb.RangeRequest) { r.Key, r.RangeEnd = []byte("k1"), nil },
					func(r *pb.RangeRequest) { r.RangeEnd = []byte{0} },
				}
				for _, v := range variants {
					r := proto.Clone(base).(*pb.RangeRequest)
					v(r)
					reqs = append(reqs, r)
				}
			}
		}
		check := func(where string, req *pb.RangeRequest, resp *pb.RangeResponse) {
			t.Helper()
			if len(resp.Kvs) == 0 {
				t.Errorf("%s %v: no keys", where, req)
			}
			for _, kv := range resp.Kvs {
				want := int64(0)
				if req.SortTarget == pb.RangeRequest_VALUE && string(kv.Key) != "k3" {
					want = 7
				}
				if kv.Lease != want || kv.Value != nil || kv.ModRevision == 0 || kv.CreateRevision == 0 || kv.Version == 0 {
					t.Errorf("%s %v: %v, want lease %d, no value, revisions and version", where, req, kv, want)
				}
			}
		}
		for _, req := range reqs {
			rv := e.st.Read()
			resp, err := Range(rv, req)
			rv.End()
			if err != nil {
				t.Fatalf("range %v: %v", req, err)
			}
			check("range", req, resp)

			op := &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: req}}
			rv = e.st.Read()
			tr, err := ReadOnlyTxn(rv, e.st.CompactRev(), &pb.TxnRequest{Success: []*pb.RequestOp{op}})
			rv.End()
			if err != nil {
				t.Fatalf("read-only txn %v: %v", req, err)
			}
			check("read-only txn", req, tr.Responses[0].GetResponseRange())

			// In a txn that writes, the range sees the txn's own put.
			wt := &pb.TxnRequest{Success: []*pb.RequestOp{
				{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("k2"), IgnoreValue: true, IgnoreLease: true}}},
				{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: []*pb.RequestOp{op}}}},
			}}
			wr := e.mustDo(&pb.InternalRaftRequest{Txn: wt}).Resp.(*pb.TxnResponse)
			check("write txn", req, wr.Responses[1].GetResponseTxn().Responses[0].GetResponseRange())
		}
		// Without keys_only, the lease is there.
		rv := e.st.Read()
		defer rv.End()
		resp, err := Range(rv, &pb.RangeRequest{Key: []byte("k1")})
		if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease != 7 {
			t.Fatalf("range k1: %v, %v; want lease 7", resp, err)
		}
	})
}

// A put with ignore_value (or ignore_lease) of a missing key with a missing
// lease: etcd checks the lease first.
func TestPutIgnoreMissingKeyMissingLease(t *testing.T) {
	eachLeaseEnv(t, func(t *testing.T, e *leaseEnv) {
		e.mustDo(grant(1, 60))
		e.mustDo(putLease("exists", 0))
		rev := e.st.Rev()
		putOp := func(p *pb.PutRequest) *pb.RequestOp {
			return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: p}}
		}
		for _, p := range []*pb.PutRequest{
			{Key: []byte("missing"), IgnoreValue: true, Lease: 99},
			{Key: []byte("missing"), IgnoreLease: true, Lease: 99},
			{Key: []byte("missing"), IgnoreValue: true, IgnoreLease: true, Lease: 99, PrevKv: true},
		} {
			reqs := []*pb.InternalRaftRequest{
				{Put: p},
				{Txn: &pb.TxnRequest{Success: []*pb.RequestOp{putOp(p)}}},
				{Txn: &pb.TxnRequest{Compare: []*pb.Compare{{Key: []byte("exists"), Target: pb.Compare_VERSION,
					Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Version{Version: 5}}},
					Failure: []*pb.RequestOp{putReq("exists", "x"), {Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{
						Success: []*pb.RequestOp{putOp(p)}}}}}}},
			}
			for _, req := range reqs {
				if res := e.do(req); !errors.Is(res.Err, rpctypes.ErrGRPCLeaseNotFound) {
					t.Errorf("%v: %v, want %v", req, res.Err, rpctypes.ErrGRPCLeaseNotFound)
				}
			}
			// With the lease there, the missing key is the error.
			q := proto.Clone(p).(*pb.PutRequest)
			q.Lease = 1
			if res := e.do(&pb.InternalRaftRequest{Txn: &pb.TxnRequest{Success: []*pb.RequestOp{putOp(q)}}}); !errors.Is(res.Err, rpctypes.ErrGRPCKeyNotFound) {
				t.Errorf("%v: %v, want %v", q, res.Err, rpctypes.ErrGRPCKeyNotFound)
			}
		}
		if e.st.Rev() != rev {
			t.Fatalf("failed puts moved the revision from %d to %d", rev, e.st.Rev())
		}
	})
}

// etcd checks a txn's ignore_value/ignore_lease puts against the store before
// the txn: a key the txn puts first is still "not found" for them.
func TestTxnPutThenIgnorePutOfNewKey(t *testing.T) {
	eachEngine(t, func(t *testing.T, a *Applier, st *mvcc.Store) {
		do(t, a, st, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("old"), Value: []byte("v")}})
		rev := st.Rev()
		for _, flags := range []func(*pb.PutRequest){
			func(p *pb.PutRequest) { p.IgnoreValue = true },
			func(p *pb.PutRequest) { p.IgnoreLease = true },
		} {
			ign := &pb.PutRequest{Key: []byte("new"), Value: []byte("w")}
			flags(ign)
			txn := &pb.TxnRequest{Success: []*pb.RequestOp{
				putReq("new", "v"),
				{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: []*pb.RequestOp{
					{Request: &pb.RequestOp_RequestPut{RequestPut: ign}}}}}},
			}}
			res := do(t, a, st, &pb.InternalRaftRequest{Txn: txn})
			if !errors.Is(res.Err, rpctypes.ErrGRPCKeyNotFound) {
				t.Errorf("txn %v: %v, %v; want key not found", txn, res.Resp, res.Err)
			}
		}
		if st.Rev() != rev || len(get(t, st, "new").Kvs) != 0 {
			t.Fatalf("refused txns changed the store")
		}
		// A key that existed before the txn, deleted and put again by it,
		// passes.
		txn := &pb.TxnRequest{Success: []*pb.RequestOp{
			{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("old")}}},
			putReq("old", "again"),
			{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("old"), IgnoreValue: true, PrevKv: true}}},
		}}
		res := do(t, a, st, &pb.InternalRaftRequest{Txn: txn})
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		if got := get(t, st, "old").Kvs; len(got) != 1 || string(got[0].Value) != "again" {
			t.Fatalf("old after delete, put, ignore_value put: %v", got)
		}
		if pk := res.Resp.(*pb.TxnResponse).Responses[2].GetResponsePut().PrevKv; pk == nil || string(pk.Value) != "again" {
			t.Fatalf("prev kv of the ignore_value put: %v", pk)
		}
	})
}
