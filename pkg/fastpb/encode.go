// Package fastpb encodes and decodes, by hand, the protobuf messages that
// every KV request carries: put, range, delete-range and txn requests as
// they arrive, their responses as they leave, and a write's raft entry. protobuf-go's generic
// code walks a message's field table, allocates as it goes and, through
// gRPC's codec, sizes each message twice; for these small messages that
// was about a twentieth of a request's CPU.
//
// The contract is exactness: an encoder writes the bytes proto.Marshal
// writes (fields in number order but a oneof last, proto3 zero values left
// out, a oneof member written even when zero), and a
// decoder fills the message as proto.Unmarshal does. Anything outside what
// the hand-written code knows (an unknown field, a field with an
// unexpected wire type, unknown fields held in a message to encode) makes
// it answer ok=false, and the caller falls back on protobuf-go. The tests
// hold both sides against protobuf-go on random and fuzzed messages.
package fastpb

import (
	"math/bits"
	"unicode/utf8"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Marshal appends the encoding of m to dst when m is one of the messages
// this package encodes (the responses to put, range, delete-range and txn)
// and holds nothing it does not know; ok is false otherwise (dst is then
// returned unchanged).
func Marshal(dst []byte, m any) (out []byte, ok bool) {
	n, ok := Size(m)
	if !ok {
		return dst, false
	}
	return Append(grow(dst, n), m), true
}

// Append appends the encoding of m, a message Size took (ok) and nobody
// changed since, to dst: Marshal without checking m again, for a caller
// that sized its buffer with Size.
func Append(dst []byte, m any) []byte {
	switch m := m.(type) {
	case *pb.PutResponse:
		return appendPutResponse(dst, m)
	case *pb.RangeResponse:
		return appendRangeResponse(dst, m)
	case *pb.DeleteRangeResponse:
		return appendDeleteRangeResponse(dst, m)
	case *pb.TxnResponse:
		return appendTxnResponse(dst, m, 0)
	}
	return dst
}

// Size is the encoded size of m, for a message Marshal encodes; ok as
// Marshal's.
func Size(m any) (n int, ok bool) {
	switch m := m.(type) {
	case *pb.PutResponse:
		if m == nil || !putResponseKnown(m) {
			return 0, false
		}
		return sizePutResponse(m), true
	case *pb.RangeResponse:
		if m == nil || !rangeResponseKnown(m) {
			return 0, false
		}
		return sizeRangeResponse(m), true
	case *pb.DeleteRangeResponse:
		return sizeDeleteRangeResponse(m)
	case *pb.TxnResponse:
		return sizeTxnResponse(m, 0)
	}
	return 0, false
}

// MarshalEntry appends the encoding of a raft entry that carries one KV
// write: an InternalRaftRequest with a Header (or none) and one of Put,
// DeleteRange and Txn. ok is false for any other shape.
func MarshalEntry(dst []byte, r *pb.InternalRaftRequest) (out []byte, ok bool) {
	if !isWriteEntry(r) {
		return dst, false
	}
	var num protowire.Number
	var body int
	switch {
	case r.Put != nil:
		num, body = 4, sizePutRequest(r.Put)
	case r.DeleteRange != nil:
		num, body = 5, sizeDeleteRangeRequest(r.DeleteRange)
	default:
		if body, ok = sizeTxnRequest(r.Txn, 0); !ok {
			return dst, false
		}
		num = 6
	}
	h := r.Header
	n := sizeMsg(num, body)
	if h != nil {
		n += sizeMsg(100, sizeRequestHeader(h))
	}
	dst = grow(dst, n)
	// Fields in number order: the request (4-6) before the header (100).
	dst = appendMsgHead(dst, num, body)
	switch num {
	case 4:
		dst = appendPutRequest(dst, r.Put)
	case 5:
		dst = appendDeleteRangeRequest(dst, r.DeleteRange)
	default:
		dst = appendTxnRequest(dst, r.Txn, 0)
	}
	if h != nil {
		dst = appendMsgHead(dst, 100, sizeRequestHeader(h))
		dst = appendRequestHeader(dst, h)
	}
	return dst, true
}

// isWriteEntry reports whether r is an InternalRaftRequest with one of Put,
// DeleteRange and Txn, maybe a Header, and nothing else (unknown fields
// included), which protobuf-go would encode without error. (A txn's own
// fields are checked as its size is taken.)
func isWriteEntry(r *pb.InternalRaftRequest) bool {
	if r == nil || !known(r) {
		return false
	}
	switch {
	case r.Put != nil && r.DeleteRange == nil && r.Txn == nil:
		if !known(r.Put) {
			return false
		}
	case r.DeleteRange != nil && r.Put == nil && r.Txn == nil:
		if !known(r.DeleteRange) {
			return false
		}
	case r.Txn != nil && r.Put == nil && r.DeleteRange == nil:
	default:
		return false
	}
	// protobuf-go refuses a string field that is not UTF-8.
	if h := r.Header; h != nil && (!known(h) || !utf8.ValidString(h.Username)) {
		return false
	}
	// TestEntryFieldsComplete sets every other field in turn, so a field
	// that a newer api module adds cannot slip through this list.
	return r.ID == 0 && r.Range == nil && r.Compaction == nil && r.LeaseGrant == nil && r.LeaseRevoke == nil && r.Alarm == nil &&
		r.LeaseCheckpoint == nil && r.AuthEnable == nil && r.AuthDisable == nil && r.AuthStatus == nil &&
		r.Authenticate == nil && r.AuthUserAdd == nil && r.AuthUserDelete == nil && r.AuthUserGet == nil &&
		r.AuthUserChangePassword == nil && r.AuthUserGrantRole == nil && r.AuthUserRevokeRole == nil &&
		r.AuthUserList == nil && r.AuthRoleList == nil && r.AuthRoleAdd == nil && r.AuthRoleDelete == nil &&
		r.AuthRoleGet == nil && r.AuthRoleGrantPermission == nil && r.AuthRoleRevokePermission == nil &&
		r.ClusterVersionSet == nil && r.ClusterMemberAttrSet == nil && r.DowngradeInfoSet == nil &&
		r.DowngradeVersionTest == nil
}

func putResponseKnown(m *pb.PutResponse) bool {
	return known(m) && headerKnown(m.Header) && (m.PrevKv == nil || known(m.PrevKv))
}

func rangeResponseKnown(m *pb.RangeResponse) bool {
	if !known(m) || !headerKnown(m.Header) {
		return false
	}
	for _, kv := range m.Kvs {
		if kv == nil || !known(kv) {
			return false
		}
	}
	return true
}

// known reports whether m holds no unknown fields.
func known(m proto.Message) bool { return len(m.ProtoReflect().GetUnknown()) == 0 }

func headerKnown(h *pb.ResponseHeader) bool { return h == nil || known(h) }

// grow makes room for n more bytes, so the appends below allocate once.
func grow(dst []byte, n int) []byte {
	if cap(dst)-len(dst) >= n {
		return dst
	}
	out := make([]byte, len(dst), len(dst)+n)
	copy(out, dst)
	return out
}

func tagSize(num protowire.Number) int { return protowire.SizeTag(num) }

// lenSize is the size of a length-delimited field's length and body.
func lenSize(n int) int { return protowire.SizeVarint(uint64(n)) + n }

func varintSize(v uint64) int {
	// protowire.SizeVarint, inlined: 1 + (bits-1)/7 for v != 0.
	return int(9*uint32(bits.Len64(v))+64) / 64
}

// Proto3 fields without presence: zero values are not written.

func sizeU64(num protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return tagSize(num) + varintSize(v)
}

func appendU64(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func sizeBool(num protowire.Number, v bool) int {
	if !v {
		return 0
	}
	return tagSize(num) + 1
}

func appendBool(b []byte, num protowire.Number, v bool) []byte {
	if !v {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return append(b, 1)
}

func sizeBytes(num protowire.Number, v []byte) int {
	if len(v) == 0 {
		return 0
	}
	return tagSize(num) + lenSize(len(v))
}

func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(len(v)))
	return append(b, v...)
}

// A set message field is written even when empty (tag and zero length).

func sizeMsg(num protowire.Number, n int) int { return tagSize(num) + lenSize(n) }

func appendMsgHead(b []byte, num protowire.Number, n int) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendVarint(b, uint64(n))
}

func sizeResponseHeader(h *pb.ResponseHeader) int {
	return sizeU64(1, h.ClusterId) + sizeU64(2, h.MemberId) + sizeU64(3, uint64(h.Revision)) + sizeU64(4, h.RaftTerm)
}

func appendResponseHeader(b []byte, h *pb.ResponseHeader) []byte {
	b = appendU64(b, 1, h.ClusterId)
	b = appendU64(b, 2, h.MemberId)
	b = appendU64(b, 3, uint64(h.Revision))
	return appendU64(b, 4, h.RaftTerm)
}

// SizeKeyValue is the encoded size of kv, which AppendKeyValue writes.
func SizeKeyValue(kv *mvccpb.KeyValue) int { return sizeKV(kv) }

// AppendKeyValue appends the encoding of kv to dst, for a KeyValue built in
// memory: unknown fields, which such a message never holds, are not
// written.
func AppendKeyValue(dst []byte, kv *mvccpb.KeyValue) []byte { return appendKV(dst, kv) }

func sizeKV(kv *mvccpb.KeyValue) int {
	return sizeBytes(1, kv.Key) + sizeU64(2, uint64(kv.CreateRevision)) + sizeU64(3, uint64(kv.ModRevision)) +
		sizeU64(4, uint64(kv.Version)) + sizeBytes(5, kv.Value) + sizeU64(6, uint64(kv.Lease))
}

func appendKV(b []byte, kv *mvccpb.KeyValue) []byte {
	b = appendBytes(b, 1, kv.Key)
	b = appendU64(b, 2, uint64(kv.CreateRevision))
	b = appendU64(b, 3, uint64(kv.ModRevision))
	b = appendU64(b, 4, uint64(kv.Version))
	b = appendBytes(b, 5, kv.Value)
	return appendU64(b, 6, uint64(kv.Lease))
}

func sizePutResponse(m *pb.PutResponse) int {
	n := 0
	if m.Header != nil {
		n += sizeMsg(1, sizeResponseHeader(m.Header))
	}
	if m.PrevKv != nil {
		n += sizeMsg(2, sizeKV(m.PrevKv))
	}
	return n
}

func appendPutResponse(b []byte, m *pb.PutResponse) []byte {
	if m.Header != nil {
		b = appendMsgHead(b, 1, sizeResponseHeader(m.Header))
		b = appendResponseHeader(b, m.Header)
	}
	if m.PrevKv != nil {
		b = appendMsgHead(b, 2, sizeKV(m.PrevKv))
		b = appendKV(b, m.PrevKv)
	}
	return b
}

func sizeRangeResponse(m *pb.RangeResponse) int {
	n := 0
	if m.Header != nil {
		n += sizeMsg(1, sizeResponseHeader(m.Header))
	}
	for _, kv := range m.Kvs {
		n += sizeMsg(2, sizeKV(kv))
	}
	return n + sizeBool(3, m.More) + sizeU64(4, uint64(m.Count))
}

func appendRangeResponse(b []byte, m *pb.RangeResponse) []byte {
	if m.Header != nil {
		b = appendMsgHead(b, 1, sizeResponseHeader(m.Header))
		b = appendResponseHeader(b, m.Header)
	}
	for _, kv := range m.Kvs {
		b = appendMsgHead(b, 2, sizeKV(kv))
		b = appendKV(b, kv)
	}
	b = appendBool(b, 3, m.More)
	return appendU64(b, 4, uint64(m.Count))
}

func sizeRequestHeader(h *pb.RequestHeader) int {
	if h == nil {
		return 0
	}
	n := sizeU64(1, h.ID) + sizeU64(3, h.AuthRevision)
	if h.Username != "" {
		n += tagSize(2) + lenSize(len(h.Username))
	}
	return n
}

func appendRequestHeader(b []byte, h *pb.RequestHeader) []byte {
	b = appendU64(b, 1, h.ID)
	if h.Username != "" {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, h.Username)
	}
	return appendU64(b, 3, h.AuthRevision)
}

func sizePutRequest(p *pb.PutRequest) int {
	return sizeBytes(1, p.Key) + sizeBytes(2, p.Value) + sizeU64(3, uint64(p.Lease)) +
		sizeBool(4, p.PrevKv) + sizeBool(5, p.IgnoreValue) + sizeBool(6, p.IgnoreLease)
}

func appendPutRequest(b []byte, p *pb.PutRequest) []byte {
	b = appendBytes(b, 1, p.Key)
	b = appendBytes(b, 2, p.Value)
	b = appendU64(b, 3, uint64(p.Lease))
	b = appendBool(b, 4, p.PrevKv)
	b = appendBool(b, 5, p.IgnoreValue)
	return appendBool(b, 6, p.IgnoreLease)
}
