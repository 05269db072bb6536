package fastpb

import (
	"unicode/utf8"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/encoding/protowire"
)

// unmarshalEntry decodes a raft entry of MarshalEntry's shape: an
// InternalRaftRequest whose only fields are a header and KV writes (put,
// delete_range, txn), each at most once. A follower decodes every write
// it applies; the leader too after a restart.
func unmarshalEntry(b []byte, r *pb.InternalRaftRequest) bool {
	var f field
	for len(b) > 0 {
		n := next(b, &f)
		if n < 0 || f.typ != protowire.BytesType {
			return false
		}
		b = b[n:]
		// A message field seen twice is merged by protobuf-go: left to it.
		switch f.num {
		case 4:
			if r.Put != nil {
				return false
			}
			r.Put = &pb.PutRequest{}
			if !unmarshalPutRequest(f.bytes, r.Put) {
				return false
			}
		case 5:
			if r.DeleteRange != nil {
				return false
			}
			r.DeleteRange = &pb.DeleteRangeRequest{}
			if !unmarshalDeleteRangeRequest(f.bytes, r.DeleteRange) {
				return false
			}
		case 6:
			if r.Txn != nil {
				return false
			}
			r.Txn = &pb.TxnRequest{}
			if !unmarshalTxnRequest(f.bytes, r.Txn, 0) {
				return false
			}
		case 100:
			if r.Header != nil {
				return false
			}
			r.Header = &pb.RequestHeader{}
			if !unmarshalRequestHeader(f.bytes, r.Header) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

func unmarshalRequestHeader(b []byte, h *pb.RequestHeader) bool {
	var f field
	for len(b) > 0 {
		n := next(b, &f)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case f.num == 1 && f.typ == protowire.VarintType:
			h.ID = f.v
		case f.num == 2 && f.typ == protowire.BytesType:
			// protobuf-go refuses a string that is not UTF-8.
			if !utf8.Valid(f.bytes) {
				return false
			}
			h.Username = string(f.bytes)
		case f.num == 3 && f.typ == protowire.VarintType:
			h.AuthRevision = f.v
		default:
			return false
		}
	}
	return true
}
