package fastpb

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/encoding/protowire"
)

// Unmarshal decodes b into m, a freshly made message, when m is one of the
// requests this package decodes (a raft entry of MarshalEntry's shape
// too) and b holds only fields it knows; ok is
// false otherwise, and the caller decodes b with proto.Unmarshal (which
// resets m first). The message keeps no reference to b.
func Unmarshal(b []byte, m any) (ok bool) {
	switch m := m.(type) {
	case *pb.PutRequest:
		return m != nil && unmarshalPutRequest(b, m)
	case *pb.RangeRequest:
		return m != nil && unmarshalRangeRequest(b, m)
	case *pb.DeleteRangeRequest:
		return m != nil && unmarshalDeleteRangeRequest(b, m)
	case *pb.TxnRequest:
		return m != nil && unmarshalTxnRequest(b, m, 0)
	case *pb.InternalRaftRequest:
		return m != nil && unmarshalEntry(b, m)
	}
	return false
}

// field is one decoded field: its number and either its varint or, for a
// length-delimited field, its bytes (aliasing the input).
type field struct {
	num   protowire.Number
	typ   protowire.Type
	v     uint64
	bytes []byte
}

// next decodes the field at the start of b, returning its length, or -1
// for a field this package does not decode (a wire type other than varint
// and bytes, or a malformed one).
func next(b []byte, f *field) int {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return -1
	}
	f.num, f.typ = num, typ
	switch typ {
	case protowire.VarintType:
		v, m := protowire.ConsumeVarint(b[n:])
		if m < 0 {
			return -1
		}
		f.v = v
		return n + m
	case protowire.BytesType:
		v, m := protowire.ConsumeBytes(b[n:])
		if m < 0 {
			return -1
		}
		f.bytes = v
		return n + m
	}
	return -1
}

// owned copies a bytes field out of the input, as protobuf-go does: one
// allocation a field (a key kept by the store must not pin the value it
// arrived with); an empty field decodes to nil.
func owned(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}

func unmarshalPutRequest(b []byte, m *pb.PutRequest) bool {
	var f field
	for len(b) > 0 {
		n := next(b, &f)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case f.num == 1 && f.typ == protowire.BytesType:
			m.Key = owned(f.bytes)
		case f.num == 2 && f.typ == protowire.BytesType:
			m.Value = owned(f.bytes)
		case f.num == 3 && f.typ == protowire.VarintType:
			m.Lease = int64(f.v)
		case f.num == 4 && f.typ == protowire.VarintType:
			m.PrevKv = f.v != 0
		case f.num == 5 && f.typ == protowire.VarintType:
			m.IgnoreValue = f.v != 0
		case f.num == 6 && f.typ == protowire.VarintType:
			m.IgnoreLease = f.v != 0
		default:
			return false
		}
	}
	return true
}

func unmarshalRangeRequest(b []byte, m *pb.RangeRequest) bool {
	var f field
	for len(b) > 0 {
		n := next(b, &f)
		if n < 0 {
			return false
		}
		b = b[n:]
		if f.typ == protowire.BytesType {
			switch f.num {
			case 1:
				m.Key = owned(f.bytes)
			case 2:
				m.RangeEnd = owned(f.bytes)
			default:
				return false
			}
			continue
		}
		switch f.num {
		case 3:
			m.Limit = int64(f.v)
		case 4:
			m.Revision = int64(f.v)
		case 5:
			m.SortOrder = pb.RangeRequest_SortOrder(int32(f.v))
		case 6:
			m.SortTarget = pb.RangeRequest_SortTarget(int32(f.v))
		case 7:
			m.Serializable = f.v != 0
		case 8:
			m.KeysOnly = f.v != 0
		case 9:
			m.CountOnly = f.v != 0
		case 10:
			m.MinModRevision = int64(f.v)
		case 11:
			m.MaxModRevision = int64(f.v)
		case 12:
			m.MinCreateRevision = int64(f.v)
		case 13:
			m.MaxCreateRevision = int64(f.v)
		default:
			return false
		}
	}
	return true
}
