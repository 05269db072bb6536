package apply

import (
	"errors"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/alarms"
	"github.com/kvd-dev/kvd/pkg/backend/enginetest"
	"github.com/kvd-dev/kvd/pkg/leasemgr"
	"github.com/kvd-dev/kvd/pkg/mvcc"
)

func alarmReq(action pb.AlarmRequest_AlarmAction, member uint64, at pb.AlarmType) *pb.InternalRaftRequest {
	return &pb.InternalRaftRequest{Alarm: &pb.AlarmRequest{Action: action, MemberID: member, Alarm: at}}
}

func alarmList(t *testing.T, a *Applier, st *mvcc.Store) []*pb.AlarmMember {
	t.Helper()
	res := do(t, a, st, alarmReq(pb.AlarmRequest_GET, 0, pb.AlarmType_NONE))
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	return res.Resp.(*pb.AlarmResponse).Alarms
}

func TestAlarmsActivateDeactivatePersist(t *testing.T) {
	for _, engine := range enginetest.Names {
		t.Run(engine, func(t *testing.T) {
			be := enginetest.OpenT(t, engine)
			st, err := mvcc.Open(be, zap.NewNop())
			if err != nil {
				t.Fatal(err)
			}
			as := alarms.New()
			a := New(Config{Store: st, Registry: NewRegistry(), Applied: NewApplied(0), Alarms: as})
			// NONE is ignored, as etcd's.
			if res := do(t, a, st, alarmReq(pb.AlarmRequest_ACTIVATE, 1, pb.AlarmType_NONE)); len(res.Resp.(*pb.AlarmResponse).Alarms) != 0 {
				t.Fatalf("activate NONE: %v", res.Resp)
			}
			for range 2 { // twice: idempotent
				res := do(t, a, st, alarmReq(pb.AlarmRequest_ACTIVATE, 2, pb.AlarmType_NOSPACE))
				if got := res.Resp.(*pb.AlarmResponse).Alarms; len(got) != 1 || got[0].MemberID != 2 || got[0].Alarm != pb.AlarmType_NOSPACE {
					t.Fatalf("activate: %v", got)
				}
			}
			do(t, a, st, alarmReq(pb.AlarmRequest_ACTIVATE, 1, pb.AlarmType_CORRUPT))
			got := alarmList(t, a, st)
			if len(got) != 2 || got[0].Alarm != pb.AlarmType_NOSPACE || got[1].Alarm != pb.AlarmType_CORRUPT || got[1].MemberID != 1 {
				t.Fatalf("list: %v", got)
			}
			res := do(t, a, st, &pb.InternalRaftRequest{Alarm: &pb.AlarmRequest{Action: pb.AlarmRequest_GET, Alarm: pb.AlarmType_CORRUPT}})
			if got := res.Resp.(*pb.AlarmResponse).Alarms; len(got) != 1 || got[0].Alarm != pb.AlarmType_CORRUPT {
				t.Fatalf("get CORRUPT: %v", got)
			}
			// Deactivating an alarm not raised answers no alarm.
			if res := do(t, a, st, alarmReq(pb.AlarmRequest_DEACTIVATE, 3, pb.AlarmType_NOSPACE)); len(res.Resp.(*pb.AlarmResponse).Alarms) != 0 {
				t.Fatalf("deactivate absent: %v", res.Resp)
			}
			do(t, a, st, alarmReq(pb.AlarmRequest_DEACTIVATE, 1, pb.AlarmType_CORRUPT))

			// The records are in the backend: a fresh set loads them.
			fresh := alarms.New()
			if err := fresh.Load(st.AlarmRecords); err != nil {
				t.Fatal(err)
			}
			if got := fresh.Get(pb.AlarmType_NONE); len(got) != 1 || got[0].MemberID != 2 || got[0].Alarm != pb.AlarmType_NOSPACE || !fresh.NoSpace() || fresh.Corrupt() {
				t.Fatalf("reloaded: %v", got)
			}
			do(t, a, st, alarmReq(pb.AlarmRequest_DEACTIVATE, 2, pb.AlarmType_NOSPACE))
			if err := fresh.Load(st.AlarmRecords); err != nil {
				t.Fatal(err)
			}
			if got := fresh.Get(pb.AlarmType_NONE); len(got) != 0 || fresh.NoSpace() {
				t.Fatalf("reloaded after disarm: %v", got)
			}
			st.Close()
		})
	}
}

func TestNoSpaceAlarmRefusesGrowth(t *testing.T) {
	eachEngine(t, func(t *testing.T, a *Applier, st *mvcc.Store) {
		a.cfg.Alarms = alarms.New()
		a.cfg.Leases = leasemgr.New(leasemgr.Config{})
		do(t, a, st, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("a"), Value: []byte("1")}})
		do(t, a, st, alarmReq(pb.AlarmRequest_ACTIVATE, 7, pb.AlarmType_NOSPACE))
		rev := st.Rev()
		nested := &pb.TxnRequest{Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: []*pb.RequestOp{putReq("x", "y")}}}}}}
		refused := []*pb.InternalRaftRequest{
			{Put: &pb.PutRequest{Key: []byte("b"), Value: []byte("2")}},
			{Txn: &pb.TxnRequest{Success: []*pb.RequestOp{putReq("c", "3")}}},
			{Txn: &pb.TxnRequest{Failure: []*pb.RequestOp{putReq("c", "3")}}},
			{Txn: nested},
			{LeaseGrant: &pb.LeaseGrantRequest{ID: 5, TTL: 60}},
		}
		for _, r := range refused {
			if res := do(t, a, st, r); !errors.Is(res.Err, rpctypes.ErrGRPCNoSpace) {
				t.Errorf("%v under NOSPACE: %v, %v; want no space", r, res.Resp, res.Err)
			}
		}
		if st.Rev() != rev {
			t.Fatalf("revision moved under NOSPACE")
		}
		allowed := []*pb.InternalRaftRequest{
			{Txn: &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("zz")}}}}}},
			{DeleteRange: &pb.DeleteRangeRequest{Key: []byte("a")}},
			{Compaction: &pb.CompactionRequest{Revision: st.Rev()}},
		}
		for _, r := range allowed {
			if res := do(t, a, st, r); res.Err != nil {
				t.Errorf("%v under NOSPACE: %v", r, res.Err)
			}
		}
		do(t, a, st, alarmReq(pb.AlarmRequest_DEACTIVATE, 7, pb.AlarmType_NOSPACE))
		for _, r := range refused {
			if res := do(t, a, st, r); res.Err != nil {
				t.Errorf("%v after disarm: %v", r, res.Err)
			}
		}
	})
}

func TestCorruptAlarmRefuses(t *testing.T) {
	eachEngine(t, func(t *testing.T, a *Applier, st *mvcc.Store) {
		a.cfg.Alarms = alarms.New()
		a.cfg.Leases = leasemgr.New(leasemgr.Config{})
		do(t, a, st, &pb.InternalRaftRequest{LeaseGrant: &pb.LeaseGrantRequest{ID: 9, TTL: 60}})
		do(t, a, st, alarmReq(pb.AlarmRequest_ACTIVATE, 7, pb.AlarmType_CORRUPT))
		for _, r := range []*pb.InternalRaftRequest{
			{Put: &pb.PutRequest{Key: []byte("b"), Value: []byte("2")}},
			{DeleteRange: &pb.DeleteRangeRequest{Key: []byte("a")}},
			{Txn: &pb.TxnRequest{}},
			{Compaction: &pb.CompactionRequest{Revision: 1}},
			{LeaseGrant: &pb.LeaseGrantRequest{ID: 5, TTL: 60}},
			{LeaseRevoke: &pb.LeaseRevokeRequest{ID: 9}},
		} {
			if res := do(t, a, st, r); !errors.Is(res.Err, rpctypes.ErrGRPCCorrupt) {
				t.Errorf("%v under CORRUPT: %v, %v; want corrupt", r, res.Resp, res.Err)
			}
		}
		// The alarms themselves still work.
		if got := alarmList(t, a, st); len(got) != 1 {
			t.Fatalf("list: %v", got)
		}
		do(t, a, st, alarmReq(pb.AlarmRequest_DEACTIVATE, 7, pb.AlarmType_CORRUPT))
		if res := do(t, a, st, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("b")}}); res.Err != nil {
			t.Fatal(res.Err)
		}
	})
}

func TestApplyOverQuotaAppliesAndRaises(t *testing.T) {
	eachEngine(t, func(t *testing.T, a *Applier, st *mvcc.Store) {
		raised := 0
		size := int64(0)
		a.cfg.Alarms = alarms.New()
		a.cfg.Quota = &alarms.Quota{Limit: 1000, Size: func() int64 { return size }}
		a.cfg.RaiseNoSpace = func() { raised++ }
		put := &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}}
		if res := do(t, a, st, put); res.Err != nil || raised != 0 {
			t.Fatalf("put under quota: %v, raised %d", res.Err, raised)
		}
		// 800 + 256 + 2 bytes is over 1000: the put applies, its caller
		// gets no space and NOSPACE is raised.
		size = 800
		a.cfg.Quota = &alarms.Quota{Limit: 1000, Size: func() int64 { return size }}
		rev := st.Rev()
		if res := do(t, a, st, put); !errors.Is(res.Err, rpctypes.ErrGRPCNoSpace) || raised != 1 {
			t.Fatalf("put over quota: %v, raised %d", res.Err, raised)
		}
		if st.Rev() != rev+1 {
			t.Fatalf("put over quota not applied: rev %d, was %d", st.Rev(), rev)
		}
		// Requests that do not grow the store are not counted.
		if res := do(t, a, st, &pb.InternalRaftRequest{DeleteRange: &pb.DeleteRangeRequest{Key: []byte("k")}}); res.Err != nil {
			t.Fatal(res.Err)
		}
		// An error of the request itself is kept.
		if res := do(t, a, st, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("k"), IgnoreValue: true}}); !errors.Is(res.Err, rpctypes.ErrGRPCKeyNotFound) {
			t.Fatalf("ignore_value put of a deleted key: %v", res.Err)
		}
		if raised != 1 {
			t.Fatalf("raised %d times, want 1", raised)
		}
	})
}
