package api

import (
	"errors"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

func opPut(k string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k)}}}
}

func opDel(k, end string) *pb.RequestOp {
	d := &pb.DeleteRangeRequest{Key: []byte(k)}
	if end != "" {
		d.RangeEnd = []byte(end)
	}
	return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: d}}
}

func opTxn(then, els []*pb.RequestOp) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: then, Failure: els}}}
}

func TestCheckTxn(t *testing.T) {
	many := make([]*pb.RequestOp, 129)
	for i := range many {
		many[i] = opPut(string(rune('a' + i%26)))
	}
	cases := []struct {
		name string
		txn  *pb.TxnRequest
		want error
	}{
		{"ok", &pb.TxnRequest{Success: []*pb.RequestOp{opPut("a"), opPut("b")}}, nil},
		{"too many ops", &pb.TxnRequest{Success: many}, rpctypes.ErrGRPCTooManyOps},
		{"empty compare key", &pb.TxnRequest{Compare: []*pb.Compare{{}}}, rpctypes.ErrGRPCEmptyKey},
		{"empty op", &pb.TxnRequest{Success: []*pb.RequestOp{{}}}, rpctypes.ErrGRPCKeyNotFound},
		{"put twice", &pb.TxnRequest{Success: []*pb.RequestOp{opPut("a"), opPut("a")}}, rpctypes.ErrGRPCDuplicateKey},
		{"put and delete", &pb.TxnRequest{Success: []*pb.RequestOp{opDel("a", ""), opPut("a")}}, rpctypes.ErrGRPCDuplicateKey},
		{"put inside deleted range", &pb.TxnRequest{Success: []*pb.RequestOp{opDel("a", "c"), opPut("b")}}, rpctypes.ErrGRPCDuplicateKey},
		{"put after deleted range", &pb.TxnRequest{Success: []*pb.RequestOp{opDel("a", "c"), opPut("c")}}, nil},
		// etcd's interval tree does not see a from-key delete: allowed.
		{"put and from-key delete", &pb.TxnRequest{Success: []*pb.RequestOp{opDel("a", "\x00"), opPut("b")}}, nil},
		{"then and else may share a key", &pb.TxnRequest{Success: []*pb.RequestOp{opTxn([]*pb.RequestOp{opPut("a")}, []*pb.RequestOp{opPut("a")})}}, nil},
		{"nested put clashes with outer", &pb.TxnRequest{Success: []*pb.RequestOp{opPut("a"), opTxn([]*pb.RequestOp{opPut("a")}, nil)}}, rpctypes.ErrGRPCDuplicateKey},
		{"nested delete clashes with outer put", &pb.TxnRequest{Success: []*pb.RequestOp{opPut("a"), opTxn([]*pb.RequestOp{opDel("a", "")}, nil)}}, rpctypes.ErrGRPCDuplicateKey},
		{"ignore value with value", &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("a"), Value: []byte("v"), IgnoreValue: true}}}}}, rpctypes.ErrGRPCValueProvided},
	}
	for _, c := range cases {
		if got := checkTxnTop(c.txn, 128); !errors.Is(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestIDsAreUniqueAndCarryTheMember(t *testing.T) {
	var g idGen
	g.init(0xabcd, time.Unix(1700000000, 0))
	seen := map[uint64]bool{}
	for i := 0; i < 1000; i++ {
		id := g.next()
		if seen[id] || id>>48 != 0xabcd {
			t.Fatalf("id %x repeated or lost the member bits", id)
		}
		seen[id] = true
	}
}
