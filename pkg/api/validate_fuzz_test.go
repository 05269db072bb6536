package api

import (
	"errors"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
)

// FuzzValidateRequests decodes fuzzed bytes as each KV request the API
// validates before proposing it, as gRPC would off the wire, and runs the
// validation: it must not panic, must return only nil or an error, and must
// give the same answer for the request re-encoded (the checks depend only on
// the message, not on how it was encoded).
func FuzzValidateRequests(f *testing.F) {
	for _, m := range []proto.Message{
		&pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("b"), Limit: 10, SortOrder: pb.RangeRequest_DESCEND, SortTarget: pb.RangeRequest_MOD},
		&pb.RangeRequest{Key: []byte("a"), SortOrder: 7},
		&pb.PutRequest{Key: []byte("k"), Value: []byte("v"), Lease: 5, PrevKv: true},
		&pb.PutRequest{Key: []byte("k"), IgnoreValue: true, IgnoreLease: true},
		&pb.DeleteRangeRequest{Key: []byte("a"), RangeEnd: []byte{0}},
		&pb.TxnRequest{
			Compare: []*pb.Compare{{Key: []byte("k"), Target: pb.Compare_VALUE, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Value{Value: []byte("v")}}},
			Success: []*pb.RequestOp{opPut("a"), opDel("b", "c"), opTxn([]*pb.RequestOp{opPut("x")}, []*pb.RequestOp{opPut("x"), opDel("y", "")})},
			Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("a")}}}},
		},
		&pb.TxnRequest{Success: []*pb.RequestOp{opPut("a"), opPut("a")}},
		&pb.TxnRequest{Success: []*pb.RequestOp{opDel("a", "z"), opTxn([]*pb.RequestOp{opPut("b")}, nil)}},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint8(128))
	}
	f.Add([]byte{}, uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, maxOps uint8) {
		check := func(m proto.Message) error {
			switch r := m.(type) {
			case *pb.RangeRequest:
				return checkRange(r)
			case *pb.PutRequest:
				return checkPut(r)
			case *pb.DeleteRangeRequest:
				return checkDelete(r)
			case *pb.TxnRequest:
				return checkTxnTop(r, int(maxOps))
			}
			t.Fatalf("unexpected %T", m)
			return nil
		}
		for _, m := range []proto.Message{&pb.RangeRequest{}, &pb.PutRequest{}, &pb.DeleteRangeRequest{}, &pb.TxnRequest{}} {
			if proto.Unmarshal(data, m) != nil {
				continue
			}
			err := check(m)
			b, merr := proto.Marshal(m)
			if merr != nil {
				t.Fatalf("re-encode %T: %v", m, merr)
			}
			m2 := m.ProtoReflect().New().Interface()
			if err := proto.Unmarshal(b, m2); err != nil {
				t.Fatalf("re-encoded %T does not decode: %v", m, err)
			}
			if !proto.Equal(m, m2) {
				t.Fatalf("%T changed in a round trip", m)
			}
			if err2 := check(m2); !errors.Is(err2, err) && !(err == nil && err2 == nil) {
				t.Fatalf("%T validates to %v, re-encoded to %v", m, err, err2)
			}
		}
	})
}
