package alarms

import (
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

type recorder struct{ puts, dels int }

func (r *recorder) PutAlarm([]byte)    { r.puts++ }
func (r *recorder) DeleteAlarm([]byte) { r.dels++ }

func TestStore(t *testing.T) {
	s := New()
	var w recorder
	s.Activate(&w, 2, pb.AlarmType_NOSPACE)
	s.Activate(&w, 2, pb.AlarmType_NOSPACE)
	s.Activate(&w, 1, pb.AlarmType_NOSPACE)
	if w.puts != 2 || !s.NoSpace() || s.Corrupt() || !s.Has(2, pb.AlarmType_NOSPACE) {
		t.Fatalf("after activate: %d puts, nospace %v corrupt %v", w.puts, s.NoSpace(), s.Corrupt())
	}
	if got := s.Get(pb.AlarmType_NONE); len(got) != 2 || got[0].MemberID != 1 || got[1].MemberID != 2 {
		t.Fatalf("get: %v", got)
	}
	if m := s.Deactivate(&w, 2, pb.AlarmType_CORRUPT); m != nil || w.dels != 0 {
		t.Fatalf("deactivate absent: %v", m)
	}
	s.Deactivate(&w, 1, pb.AlarmType_NOSPACE)
	if !s.NoSpace() {
		t.Fatal("NOSPACE of member 2 dropped")
	}
	s.Deactivate(&w, 2, pb.AlarmType_NOSPACE)
	if s.NoSpace() || w.dels != 2 || len(s.Get(pb.AlarmType_NONE)) != 0 {
		t.Fatalf("after deactivate: nospace %v, %d dels", s.NoSpace(), w.dels)
	}
	var nilStore *Store
	if nilStore.NoSpace() || nilStore.Corrupt() {
		t.Fatal("nil store has alarms")
	}
}

func TestCost(t *testing.T) {
	put := func(k, v string) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k), Value: []byte(v)}}}
	}
	del := &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("k")}}}
	cases := []struct {
		req  any
		want int
	}{
		{&pb.PutRequest{Key: []byte("ab"), Value: []byte("cde")}, 261},
		{&pb.LeaseGrantRequest{TTL: 5}, 64},
		{&pb.TxnRequest{Success: []*pb.RequestOp{del}}, 0},
		{&pb.TxnRequest{Success: []*pb.RequestOp{put("a", ""), put("b", "")}, Failure: []*pb.RequestOp{put("c", "xxxx")}}, 514},
		{&pb.TxnRequest{Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: []*pb.RequestOp{put("a", "")}}}}}}, 257},
		{&pb.DeleteRangeRequest{}, 0},
	}
	for _, c := range cases {
		if got := Cost(c.req); got != c.want {
			t.Errorf("Cost(%v) = %d, want %d", c.req, got, c.want)
		}
	}
}

func TestQuota(t *testing.T) {
	size := int64(0)
	q := NewQuota(0, func() int64 { return size })
	if q.Limit != DefaultQuotaBytes {
		t.Fatalf("limit %d", q.Limit)
	}
	q = NewQuota(1000, func() int64 { return size })
	put := &pb.PutRequest{Key: []byte("k")}
	if !q.Available(put) {
		t.Fatal("empty store refused")
	}
	size = 743 // 743 + 257 = 1000: not under the limit
	q = NewQuota(1000, func() int64 { return size })
	if q.Available(put) || !q.Available(&pb.DeleteRangeRequest{}) {
		t.Fatal("quota check")
	}
	if !NewQuota(-1, func() int64 { return 1 << 40 }).Available(put) {
		t.Fatal("negative quota not disabled")
	}
}
