package apply

import (
	"errors"
	"slices"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/backend/enginetest"
	"github.com/kvd-dev/kvd/pkg/leasemgr"
	"github.com/kvd-dev/kvd/pkg/mvcc"
)

// leaseEnv is an applier with a lease manager over a store that can be
// reopened, as a member restarts.
type leaseEnv struct {
	t      *testing.T
	engine string
	dir    string
	be     backend.Backend
	st     *mvcc.Store
	lm     *leasemgr.Manager
	a      *Applier
	events []*mvccpb.Event
}

func eachLeaseEnv(t *testing.T, fn func(t *testing.T, e *leaseEnv)) {
	for _, engine := range []string{"bolt", "badger"} {
		t.Run(engine, func(t *testing.T) {
			e := &leaseEnv{t: t, engine: engine, dir: t.TempDir()}
			e.open()
			t.Cleanup(e.close)
			fn(t, e)
		})
	}
}

func (e *leaseEnv) open() {
	e.t.Helper()
	var err error
	if e.be, err = enginetest.Open(e.engine, e.dir); err != nil {
		e.t.Fatal(err)
	}
	if e.st, err = mvcc.Open(e.be, zap.NewNop()); err != nil {
		e.t.Fatal(err)
	}
	e.lm = leasemgr.New(leasemgr.Config{MinTTL: 2})
	if err := e.lm.Recover(e.st); err != nil {
		e.t.Fatal(err)
	}
	e.a = New(Config{Store: e.st, Registry: NewRegistry(), Applied: NewApplied(0), Leases: e.lm,
		Events: func(evs []*mvccpb.Event) { e.events = append(e.events, evs...) }})
}

func (e *leaseEnv) close() {
	if e.st == nil {
		return
	}
	if err := e.st.Close(); err != nil {
		e.t.Error(err)
	}
	if err := e.be.Close(); err != nil {
		e.t.Error(err)
	}
	e.st = nil
}

// do applies one request in its own batch, publishing its events.
func (e *leaseEnv) do(req *pb.InternalRaftRequest) Result {
	e.t.Helper()
	a := e.a
	a.events = nil
	var res Result
	if err := e.st.Apply(func(b *mvcc.Batch) error {
		res = a.applyRequest(b, req, 0)
		return a.fatal
	}); err != nil {
		e.t.Fatal(err)
	}
	if len(a.events) > 0 {
		a.cfg.Events(a.events)
	}
	return res
}

func (e *leaseEnv) mustDo(req *pb.InternalRaftRequest) Result {
	e.t.Helper()
	res := e.do(req)
	if res.Err != nil {
		e.t.Fatalf("apply %v: %v", req, res.Err)
	}
	return res
}

func grant(id, ttl int64) *pb.InternalRaftRequest {
	return &pb.InternalRaftRequest{LeaseGrant: &pb.LeaseGrantRequest{ID: id, TTL: ttl}}
}

func revoke(id int64) *pb.InternalRaftRequest {
	return &pb.InternalRaftRequest{LeaseRevoke: &pb.LeaseRevokeRequest{ID: id}}
}

func putLease(k string, lease int64) *pb.InternalRaftRequest {
	return &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte(k), Value: []byte("v-" + k), Lease: lease}}
}

func (e *leaseEnv) keysOf(id int64) []string {
	e.t.Helper()
	st, err := e.lm.TimeToLive(id, true)
	if err != nil {
		e.t.Fatalf("lease %d: %v", id, err)
	}
	return st.Keys
}

func (e *leaseEnv) records() map[int64]int64 {
	e.t.Helper()
	got := map[int64]int64{}
	if err := e.st.Leases(func(id int64, v []byte) error {
		r, err := leasemgr.UnmarshalRecord(id, v)
		got[id] = r.TTL
		return err
	}); err != nil {
		e.t.Fatal(err)
	}
	return got
}

func TestLeaseGrantAttachRevoke(t *testing.T) {
	eachLeaseEnv(t, func(t *testing.T, e *leaseEnv) {
		gr := e.mustDo(grant(1, 1)).Resp.(*pb.LeaseGrantResponse)
		if gr.ID != 1 || gr.TTL != 2 || gr.Header.Revision != 1 {
			t.Fatalf("grant response %v: want ID 1, TTL raised to the minimum 2, revision 1", gr)
		}
		e.mustDo(grant(2, 60))
		for _, k := range []string{"c", "a", "b"} {
			e.mustDo(putLease(k, 1))
		}
		e.mustDo(putLease("other", 2))
		e.mustDo(putLease("plain", 0))
		e.mustDo(putLease("b", 2)) // moves b to lease 2
		e.mustDo(&pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("c"), Value: []byte("new"), IgnoreLease: true}})
		e.mustDo(&pb.InternalRaftRequest{Txn: &pb.TxnRequest{Success: []*pb.RequestOp{
			{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("t"), Lease: 1}}},
			{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("u"), Lease: 1}}},
		}}})
		e.mustDo(&pb.InternalRaftRequest{DeleteRange: &pb.DeleteRangeRequest{Key: []byte("u")}})
		if got, want := e.keysOf(1), []string{"a", "c", "t"}; !slices.Equal(got, want) {
			t.Fatalf("lease 1 keys %v, want %v", got, want)
		}
		if got, want := e.keysOf(2), []string{"b", "other"}; !slices.Equal(got, want) {
			t.Fatalf("lease 2 keys %v, want %v", got, want)
		}
		if got := e.records(); len(got) != 2 || got[1] != 2 || got[2] != 60 {
			t.Fatalf("lease records %v", got)
		}

		rev := e.st.Rev()
		e.events = nil
		rr := e.mustDo(revoke(1)).Resp.(*pb.LeaseRevokeResponse)
		if rr.Header.Revision != rev+1 || e.st.Rev() != rev+1 {
			t.Fatalf("revoke at revision %d (store %d), want one revision: %d", rr.Header.Revision, e.st.Rev(), rev+1)
		}
		var deleted []string
		for _, ev := range e.events {
			if ev.Type != mvccpb.DELETE || ev.Kv.ModRevision != rev+1 {
				t.Fatalf("revoke event %v", ev)
			}
			deleted = append(deleted, string(ev.Kv.Key))
		}
		if want := []string{"a", "c", "t"}; !slices.Equal(deleted, want) {
			t.Fatalf("revoke deleted %v, want %v", deleted, want)
		}
		for _, k := range []string{"a", "c", "t"} {
			if got := get(t, e.st, k); len(got.Kvs) != 0 {
				t.Fatalf("%s survives its lease: %v", k, got.Kvs)
			}
		}
		for _, k := range []string{"b", "plain", "other"} {
			if got := get(t, e.st, k); len(got.Kvs) != 1 {
				t.Fatalf("%s deleted with another lease", k)
			}
		}
		if got := e.records(); len(got) != 1 || got[2] != 60 {
			t.Fatalf("lease records after revoke %v", got)
		}
		// A lease without keys revokes without a new revision.
		e.mustDo(grant(3, 10))
		rev = e.st.Rev()
		if rr := e.mustDo(revoke(3)).Resp.(*pb.LeaseRevokeResponse); rr.Header.Revision != rev || e.st.Rev() != rev {
			t.Fatalf("empty lease revoke moved the revision to %d", rr.Header.Revision)
		}
	})
}

func TestLeaseErrors(t *testing.T) {
	eachLeaseEnv(t, func(t *testing.T, e *leaseEnv) {
		e.mustDo(grant(1, 10))
		rev := e.st.Rev()
		for _, tc := range []struct {
			req  *pb.InternalRaftRequest
			want error
		}{
			{grant(1, 10), rpctypes.ErrGRPCLeaseExist},
			{grant(2, leasemgr.MaxTTL+1), rpctypes.ErrGRPCLeaseTTLTooLarge},
			{revoke(2), rpctypes.ErrGRPCLeaseNotFound},
			{putLease("k", 2), rpctypes.ErrGRPCLeaseNotFound},
			{&pb.InternalRaftRequest{Txn: &pb.TxnRequest{Success: []*pb.RequestOp{
				{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("a"), Lease: 1}}},
				{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("b"), Lease: 2}}},
			}}}, rpctypes.ErrGRPCLeaseNotFound},
		} {
			if res := e.do(tc.req); !errors.Is(res.Err, tc.want) {
				t.Errorf("%v: %v, want %v", tc.req, res.Err, tc.want)
			}
		}
		if e.st.Rev() != rev || e.lm.Len() != 1 || len(e.keysOf(1)) != 0 {
			t.Fatalf("failed requests changed something: revision %d (was %d), %d leases", e.st.Rev(), rev, e.lm.Len())
		}
	})
}

// Leases and their keys survive a restart; a lease revoked before it stays
// gone.
func TestLeasesSurviveRestart(t *testing.T) {
	eachLeaseEnv(t, func(t *testing.T, e *leaseEnv) {
		e.mustDo(grant(1, 30))
		e.mustDo(grant(-9, 40))
		e.mustDo(grant(3, 50))
		e.mustDo(putLease("a", 1))
		e.mustDo(putLease("b", -9))
		e.mustDo(putLease("c", 3))
		e.mustDo(revoke(3))
		e.close()
		e.open()
		if got := e.lm.Leases(); len(got) != 2 {
			t.Fatalf("leases after restart %v", got)
		}
		for _, tc := range []struct {
			id   int64
			ttl  int64
			keys []string
		}{{1, 30, []string{"a"}}, {-9, 40, []string{"b"}}} {
			st, err := e.lm.TimeToLive(tc.id, true)
			if err != nil || st.GrantedTTL != tc.ttl || !slices.Equal(st.Keys, tc.keys) {
				t.Fatalf("lease %d after restart: %+v, %v", tc.id, st, err)
			}
		}
		if e.lm.Exists(3) {
			t.Fatal("revoked lease back after restart")
		}
		e.mustDo(revoke(-9))
		if got := get(t, e.st, "b"); len(got.Kvs) != 0 {
			t.Fatal("key of a restored lease not deleted at revoke")
		}
	})
}

// A checkpointed remaining TTL is kept in the lease's record: after a
// restart, promotion starts the lease from it.
func TestLeaseCheckpointSurvivesRestart(t *testing.T) {
	eachLeaseEnv(t, func(t *testing.T, e *leaseEnv) {
		e.mustDo(grant(1, 600))
		e.mustDo(grant(2, 600))
		rev := e.st.Rev()
		res := e.mustDo(&pb.InternalRaftRequest{LeaseCheckpoint: &pb.LeaseCheckpointRequest{Checkpoints: []*pb.LeaseCheckpoint{
			{ID: 1, Remaining_TTL: 120}, {ID: 9, Remaining_TTL: 5},
		}}})
		if h := res.Resp.(*pb.LeaseCheckpointResponse).Header; h.Revision != rev || e.st.Rev() != rev {
			t.Fatalf("checkpoint moved the revision to %d", h.Revision)
		}
		e.close()
		e.open()
		e.lm.Promote(0)
		for _, tc := range []struct{ id, ttl int64 }{{1, 120}, {2, 600}} {
			if st, err := e.lm.TimeToLive(tc.id, false); err != nil || st.TTL < tc.ttl-1 || st.TTL > tc.ttl || st.GrantedTTL != 600 {
				t.Fatalf("lease %d after restart: %+v, %v; want TTL %d of 600", tc.id, st, err, tc.ttl)
			}
		}
		if e.lm.Exists(9) {
			t.Fatal("checkpoint of a missing lease created it")
		}
	})
}
