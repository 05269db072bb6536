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
		var ok bool
		switch f.num {
		case 4:
			ok = decodeOnce(&r.Put, f.bytes, unmarshalPutRequest)
		case 5:
			ok = decodeOnce(&r.DeleteRange, f.bytes, unmarshalDeleteRangeRequest)
		case 6:
			ok = decodeOnce(&r.Txn, f.bytes, func(b []byte, t *pb.TxnRequest) bool { return unmarshalTxnRequest(b, t, 0) })
		case 100:
			ok = decodeOnce(&r.Header, f.bytes, unmarshalRequestHeader)
		default:
			return false
		}
		if !ok {
			return false
		}
	}
	return true
}

// decodeOnce decodes b into a new message at *m with decode, unless *m is
// set already: protobuf-go merges a message field seen twice, which is
// left to it.
func decodeOnce[T any](m **T, b []byte, decode func([]byte, *T) bool) bool {
	if *m != nil {
		return false
	}
	*m = new(T)
	return decode(b, *m)
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
