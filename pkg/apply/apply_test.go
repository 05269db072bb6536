package apply

import (
	"errors"
	"fmt"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-dev/kvd/pkg/backend/enginetest"
	"github.com/kvd-dev/kvd/pkg/entrybatch"
	"github.com/kvd-dev/kvd/pkg/mvcc"
)

func eachEngine(t *testing.T, fn func(t *testing.T, a *Applier, st *mvcc.Store)) {
	for _, engine := range enginetest.Names {
		t.Run(engine, func(t *testing.T) {
			st, err := mvcc.Open(enginetest.OpenT(t, engine), zap.NewNop())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			a := New(Config{Store: st, Registry: NewRegistry(), Applied: NewApplied(0)})
			fn(t, a, st)
		})
	}
}

// do applies one request in its own batch.
func do(t *testing.T, a *Applier, st *mvcc.Store, req *pb.InternalRaftRequest) Result {
	t.Helper()
	var res Result
	if err := st.Apply(func(b *mvcc.Batch) error {
		res = a.applyRequest(b, req, 0)
		return a.fatal
	}); err != nil {
		t.Fatal(err)
	}
	return res
}

// entries are reqs as raft entries at indexes 1, 2, ..., term 1.
func entries(t *testing.T, reqs ...*pb.InternalRaftRequest) []*raftpb.Entry {
	t.Helper()
	ents := make([]*raftpb.Entry, len(reqs))
	for i, r := range reqs {
		ents[i] = entryAt(uint64(i+1), marshalReq(t, r))
	}
	return ents
}

// entryAt is a normal raft entry of term 1.
func entryAt(index uint64, data []byte) *raftpb.Entry {
	term := uint64(1)
	return &raftpb.Entry{Index: &index, Term: &term, Data: data}
}

func marshalReq(t *testing.T, r *pb.InternalRaftRequest) []byte {
	t.Helper()
	data, err := proto.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func putReq(k, v string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k), Value: []byte(v)}}}
}

func get(t *testing.T, st *mvcc.Store, k string) *pb.RangeResponse {
	t.Helper()
	rv := st.Read()
	defer rv.End()
	resp, err := Range(rv, &pb.RangeRequest{Key: []byte(k)})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// Regression: etcd v3.7.3 panics its apply loop (on every restart) on a txn
// that deletes a from-key range, then puts an existing key with
// ignore_value in the same branch. kvd refuses it and changes nothing.
func TestTxnFromKeyDeleteThenIgnoreValuePut(t *testing.T) {
	eachEngine(t, func(t *testing.T, a *Applier, st *mvcc.Store) {
		do(t, a, st, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("b"), Value: []byte("v")}})
		rev := st.Rev()
		txn := &pb.TxnRequest{Success: []*pb.RequestOp{
			{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("a"), RangeEnd: []byte{0}}}},
			{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("b"), IgnoreValue: true}}},
		}}
		res := do(t, a, st, &pb.InternalRaftRequest{Txn: txn})
		if !errors.Is(res.Err, rpctypes.ErrGRPCKeyNotFound) {
			t.Fatalf("txn result %v, %v; want key not found", res.Resp, res.Err)
		}
		if st.Rev() != rev {
			t.Fatalf("revision moved from %d to %d on a refused txn", rev, st.Rev())
		}
		if got := get(t, st, "b"); len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "v" {
			t.Fatalf("b after refused txn: %v", got.Kvs)
		}
		// The same txn with a plain put (no ignore_value) is fine and atomic.
		txn.Success[1] = putReq("b", "w")
		res = do(t, a, st, &pb.InternalRaftRequest{Txn: txn})
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		tr := res.Resp.(*pb.TxnResponse)
		if tr.Header.Revision != rev+1 {
			t.Fatalf("txn revision %d, want %d", tr.Header.Revision, rev+1)
		}
		got := get(t, st, "b")
		if len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "w" || got.Kvs[0].Version != 1 || got.Kvs[0].CreateRevision != rev+1 {
			t.Fatalf("b after delete+put txn: %v", got.Kvs)
		}
	})
}

func TestPutErrorsChangeNothing(t *testing.T) {
	eachEngine(t, func(t *testing.T, a *Applier, st *mvcc.Store) {
		cases := []struct {
			req  *pb.PutRequest
			want error
		}{
			{&pb.PutRequest{Key: []byte("k"), Value: []byte("v"), Lease: 5}, rpctypes.ErrGRPCLeaseNotFound},
			{&pb.PutRequest{Key: []byte("missing"), IgnoreValue: true}, rpctypes.ErrGRPCKeyNotFound},
			{&pb.PutRequest{Key: []byte("missing"), IgnoreLease: true}, rpctypes.ErrGRPCKeyNotFound},
		}
		for _, c := range cases {
			rev := st.Rev()
			res := do(t, a, st, &pb.InternalRaftRequest{Put: c.req})
			if !errors.Is(res.Err, c.want) {
				t.Errorf("put %v: %v, want %v", c.req, res.Err, c.want)
			}
			if st.Rev() != rev {
				t.Errorf("put %v moved the revision", c.req)
			}
		}
	})
}

func TestTxnNestedPathsAndRevisions(t *testing.T) {
	eachEngine(t, func(t *testing.T, a *Applier, st *mvcc.Store) {
		do(t, a, st, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("x"), Value: []byte("1")}}) // rev 2
		cmp := func(k, v string) *pb.Compare {
			return &pb.Compare{Key: []byte(k), Target: pb.Compare_VALUE, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Value{Value: []byte(v)}}
		}
		txn := &pb.TxnRequest{
			Compare: []*pb.Compare{cmp("x", "1")},
			Success: []*pb.RequestOp{
				putReq("a", "1"),
				{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("a")}}},
				{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{
					// Nested compares see the state before the txn: x is still 1.
					Compare: []*pb.Compare{cmp("x", "1")},
					Success: []*pb.RequestOp{putReq("b", "2")},
					Failure: []*pb.RequestOp{putReq("c", "3")},
				}}},
			},
			Failure: []*pb.RequestOp{putReq("f", "0")},
		}
		res := do(t, a, st, &pb.InternalRaftRequest{Txn: txn})
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		tr := res.Resp.(*pb.TxnResponse)
		if !tr.Succeeded || tr.Header.Revision != 3 {
			t.Fatalf("txn: succeeded=%v rev=%d, want true 3", tr.Succeeded, tr.Header.Revision)
		}
		rr := tr.Responses[1].GetResponseRange()
		if len(rr.Kvs) != 1 || rr.Kvs[0].ModRevision != 3 || rr.Header.Revision != 3 {
			t.Fatalf("range inside txn sees %v at %d, want a@3", rr.Kvs, rr.Header.Revision)
		}
		nested := tr.Responses[2].GetResponseTxn()
		if !nested.Succeeded {
			t.Fatal("nested txn took the failure branch")
		}
		for k, want := range map[string]int{"a": 1, "b": 1, "c": 0, "f": 0} {
			if got := len(get(t, st, k).Kvs); got != want {
				t.Errorf("%s: %d kvs, want %d", k, got, want)
			}
		}
		if a, b := get(t, st, "a").Kvs[0], get(t, st, "b").Kvs[0]; a.ModRevision != 3 || b.ModRevision != 3 {
			t.Errorf("one txn, one revision: a@%d b@%d", a.ModRevision, b.ModRevision)
		}
	})
}

func TestRangeSortLimitMore(t *testing.T) {
	eachEngine(t, func(t *testing.T, a *Applier, st *mvcc.Store) {
		for i, v := range []string{"c", "a", "b", "a"} {
			do(t, a, st, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(v)}})
		}
		rv := st.Read()
		defer rv.End()
		resp, err := Range(rv, &pb.RangeRequest{Key: []byte("k"), RangeEnd: []byte("l"), Limit: 2,
			SortOrder: pb.RangeRequest_DESCEND, SortTarget: pb.RangeRequest_MOD})
		if err != nil {
			t.Fatal(err)
		}
		if !resp.More || resp.Count != 4 || len(resp.Kvs) != 2 || string(resp.Kvs[0].Key) != "k3" || string(resp.Kvs[1].Key) != "k2" {
			t.Fatalf("sorted by mod desc, limit 2: more=%v count=%d kvs=%v", resp.More, resp.Count, resp.Kvs)
		}
		resp, err = Range(rv, &pb.RangeRequest{Key: []byte("k"), RangeEnd: []byte("l"), MinModRevision: 3, MaxModRevision: 4, KeysOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 2 || resp.Kvs[0].Value != nil || string(resp.Kvs[0].Key) != "k1" {
			t.Fatalf("mod revision filter: %v", resp.Kvs)
		}
		resp, err = Range(rv, &pb.RangeRequest{Key: []byte("k"), RangeEnd: []byte{0}, CountOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count != 4 || len(resp.Kvs) != 0 {
			t.Fatalf("count only from key: count=%d kvs=%d", resp.Count, len(resp.Kvs))
		}
	})
}

func TestEventsFollowTheBatchInRevisionOrder(t *testing.T) {
	eachEngine(t, func(t *testing.T, a *Applier, st *mvcc.Store) {
		var got []*mvccpb.Event
		a.cfg.Events = func(evs []*mvccpb.Event) { got = append(got, evs...) }
		reqs := []*pb.InternalRaftRequest{
			{Put: &pb.PutRequest{Key: []byte("a"), Value: []byte("1")}},
			{Txn: &pb.TxnRequest{Success: []*pb.RequestOp{putReq("b", "2"), putReq("c", "3")}}},
			{DeleteRange: &pb.DeleteRangeRequest{Key: []byte("a")}},
			{Put: &pb.PutRequest{Key: []byte("x"), Lease: 9}}, // refused: no event
		}
		ents := entries(t, reqs...)
		if err := a.applyEntries(ents); err != nil {
			t.Fatal(err)
		}
		want := []string{"PUT a 2", "PUT b 3", "PUT c 3", "DELETE a 4"}
		if len(got) != len(want) {
			t.Fatalf("got %d events, want %d", len(got), len(want))
		}
		for i, ev := range got {
			if s := fmt.Sprintf("%s %s %d", ev.Type, ev.Kv.Key, ev.Kv.ModRevision); s != want[i] {
				t.Errorf("event %d = %s, want %s", i, s, want[i])
			}
		}
	})
}

// A batched entry applies its requests in order at the entry's index, each
// answering its own waiter: those this member proposed from the registry,
// the others decoded (a follower's view).
func TestBatchedEntryAppliesEachRequest(t *testing.T) {
	eachEngine(t, func(t *testing.T, a *Applier, st *mvcc.Store) {
		var events []string
		a.cfg.Events = func(evs []*mvccpb.Event) {
			for _, ev := range evs {
				events = append(events, fmt.Sprintf("%s %s %d", ev.Type, ev.Kv.Key, ev.Kv.ModRevision))
			}
		}
		reqs := []*pb.InternalRaftRequest{
			{Header: &pb.RequestHeader{ID: 1}, Put: &pb.PutRequest{Key: []byte("a"), Value: []byte("1")}},
			{Header: &pb.RequestHeader{ID: 2}, Txn: &pb.TxnRequest{
				Compare: []*pb.Compare{{Key: []byte("a"), Target: pb.Compare_VERSION, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Version{Version: 1}}},
				Success: []*pb.RequestOp{putReq("b", "2")}}},
			{Header: &pb.RequestHeader{ID: 3}, Put: &pb.PutRequest{Key: []byte("x"), Lease: 9}}, // refused
			{Header: &pb.RequestHeader{ID: 4}, DeleteRange: &pb.DeleteRangeRequest{Key: []byte("a")}},
		}
		reg := a.cfg.Registry
		waits := []<-chan Result{
			reg.RegisterRequest(t.Context(), nil, 1, reqs[0]).C(), // proposed here
			reg.Register(t.Context(), 2),                          // decoded
			reg.Register(t.Context(), 3),
			reg.RegisterRequest(t.Context(), nil, 4, reqs[3]).C(),
		}
		batch := entrybatch.Begin(nil)
		for _, r := range reqs {
			batch = entrybatch.Append(batch, marshalReq(t, r))
		}
		one := marshalReq(t, &pb.InternalRaftRequest{Header: &pb.RequestHeader{ID: 5}, Put: &pb.PutRequest{Key: []byte("c"), Value: []byte("3")}})
		waits = append(waits, reg.Register(t.Context(), 5))
		ents := []*raftpb.Entry{entryAt(7, batch), entryAt(8, one)}
		if err := a.applyEntries(ents); err != nil {
			t.Fatal(err)
		}
		var got []string
		for i, w := range waits {
			res := <-w
			switch r := res.Resp.(type) {
			case *pb.PutResponse:
				got = append(got, fmt.Sprintf("%d put %d", i+1, r.Header.Revision))
			case *pb.TxnResponse:
				got = append(got, fmt.Sprintf("%d txn %v %d", i+1, r.Succeeded, r.Header.Revision))
			case *pb.DeleteRangeResponse:
				got = append(got, fmt.Sprintf("%d delete %d %d", i+1, r.Deleted, r.Header.Revision))
			default:
				got = append(got, fmt.Sprintf("%d error %v", i+1, res.Err))
			}
		}
		want := []string{"1 put 2", "2 txn true 3", "3 error " + rpctypes.ErrGRPCLeaseNotFound.Error(), "4 delete 1 4", "5 put 5"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("answers %v, want %v", got, want)
		}
		if want := []string{"PUT a 2", "PUT b 3", "DELETE a 4", "PUT c 5"}; fmt.Sprint(events) != fmt.Sprint(want) {
			t.Errorf("events %v, want %v", events, want)
		}
		if ci := st.ConsistentIndex(); ci != 8 {
			t.Errorf("consistent index %d, want 8", ci)
		}
		// Replayed after a restart: applied already, skipped.
		if err := a.applyEntries(ents); err != nil || st.Rev() != 5 {
			t.Fatalf("replay: %v, revision %d, want 5", err, st.Rev())
		}
		// A batch whose framing is broken stops the applier.
		if err := a.applyEntries([]*raftpb.Entry{entryAt(9, batch[:len(batch)-1])}); !errors.Is(err, entrybatch.ErrCorrupt) {
			t.Fatalf("broken batch: %v, want %v", err, entrybatch.ErrCorrupt)
		}
	})
}

// The applier reuses one precheck: a txn's deletes and puts must not leak
// into the next request's checks. Here the last txn's ignore_value put of
// k passes (k exists again); a precheck that still held the earlier txn's
// delete of k would refuse it with "key not found".
func TestPrecheckStartsAfreshEachRequest(t *testing.T) {
	eachEngine(t, func(t *testing.T, a *Applier, st *mvcc.Store) {
		reqs := []*pb.InternalRaftRequest{
			{Header: &pb.RequestHeader{ID: 1}, Put: &pb.PutRequest{Key: []byte("k"), Value: []byte("1")}},
			{Header: &pb.RequestHeader{ID: 2}, Txn: &pb.TxnRequest{Success: []*pb.RequestOp{
				{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("k")}}}}}},
			{Header: &pb.RequestHeader{ID: 3}, Put: &pb.PutRequest{Key: []byte("k"), Value: []byte("2")}},
			{Header: &pb.RequestHeader{ID: 4}, Txn: &pb.TxnRequest{Success: []*pb.RequestOp{
				{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("k"), IgnoreValue: true}}}}}},
		}
		waits := make([]<-chan Result, len(reqs))
		for i := range reqs {
			waits[i] = a.cfg.Registry.Register(t.Context(), uint64(i+1))
		}
		ents := entries(t, reqs...)
		if err := a.applyEntries(ents); err != nil {
			t.Fatal(err)
		}
		for i, w := range waits {
			if res := <-w; res.Err != nil {
				t.Fatalf("request %d: %v", i+1, res.Err)
			}
		}
		if kv := get(t, st, "k").Kvs; len(kv) != 1 || string(kv[0].Value) != "2" || kv[0].ModRevision != 5 {
			t.Fatalf("k = %v, want value 2 at revision 5", kv)
		}
	})
}
