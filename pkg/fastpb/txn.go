package fastpb

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/encoding/protowire"
)

// Txns: their requests (compares and operations, nested txns included), their
// responses, and the delete-range messages they carry.

// maxTxnDepth bounds the nesting this package decodes and encodes; deeper
// txns go to protobuf-go.
const maxTxnDepth = 32

// Sizes that also validate: ok is false for anything the encoders below do
// not write as protobuf-go would (unknown fields, nil entries, too deep).

func sizeCompare(c *pb.Compare) (int, bool) {
	if c == nil || !known(c) {
		return 0, false
	}
	n := sizeU64(1, uint64(int64(c.Result))) + sizeU64(2, uint64(int64(c.Target))) + sizeBytes(3, c.Key)
	switch u := c.TargetUnion.(type) {
	case nil:
	case *pb.Compare_Version:
		n += tagSize(4) + varintSize(uint64(u.Version))
	case *pb.Compare_CreateRevision:
		n += tagSize(5) + varintSize(uint64(u.CreateRevision))
	case *pb.Compare_ModRevision:
		n += tagSize(6) + varintSize(uint64(u.ModRevision))
	case *pb.Compare_Value:
		n += tagSize(7) + lenSize(len(u.Value))
	case *pb.Compare_Lease:
		n += tagSize(8) + varintSize(uint64(u.Lease))
	default:
		return 0, false
	}
	return n + sizeBytes(64, c.RangeEnd), true
}

func appendCompare(b []byte, c *pb.Compare) []byte {
	b = appendU64(b, 1, uint64(int64(c.Result)))
	b = appendU64(b, 2, uint64(int64(c.Target)))
	b = appendBytes(b, 3, c.Key)
	// protobuf-go writes a message's oneof last (its "legacy field order"),
	// after range_end (64), and a oneof member even when zero.
	b = appendBytes(b, 64, c.RangeEnd)
	switch u := c.TargetUnion.(type) {
	case *pb.Compare_Version:
		b = protowire.AppendVarint(protowire.AppendTag(b, 4, protowire.VarintType), uint64(u.Version))
	case *pb.Compare_CreateRevision:
		b = protowire.AppendVarint(protowire.AppendTag(b, 5, protowire.VarintType), uint64(u.CreateRevision))
	case *pb.Compare_ModRevision:
		b = protowire.AppendVarint(protowire.AppendTag(b, 6, protowire.VarintType), uint64(u.ModRevision))
	case *pb.Compare_Value:
		b = protowire.AppendBytes(protowire.AppendTag(b, 7, protowire.BytesType), u.Value)
	case *pb.Compare_Lease:
		b = protowire.AppendVarint(protowire.AppendTag(b, 8, protowire.VarintType), uint64(u.Lease))
	}
	return b
}

func sizeRangeRequest(r *pb.RangeRequest) int {
	return sizeBytes(1, r.Key) + sizeBytes(2, r.RangeEnd) + sizeU64(3, uint64(r.Limit)) +
		sizeU64(4, uint64(r.Revision)) + sizeU64(5, uint64(int64(r.SortOrder))) +
		sizeU64(6, uint64(int64(r.SortTarget))) + sizeBool(7, r.Serializable) + sizeBool(8, r.KeysOnly) +
		sizeBool(9, r.CountOnly) + sizeU64(10, uint64(r.MinModRevision)) + sizeU64(11, uint64(r.MaxModRevision)) +
		sizeU64(12, uint64(r.MinCreateRevision)) + sizeU64(13, uint64(r.MaxCreateRevision))
}

func appendRangeRequest(b []byte, r *pb.RangeRequest) []byte {
	b = appendBytes(b, 1, r.Key)
	b = appendBytes(b, 2, r.RangeEnd)
	b = appendU64(b, 3, uint64(r.Limit))
	b = appendU64(b, 4, uint64(r.Revision))
	b = appendU64(b, 5, uint64(int64(r.SortOrder)))
	b = appendU64(b, 6, uint64(int64(r.SortTarget)))
	b = appendBool(b, 7, r.Serializable)
	b = appendBool(b, 8, r.KeysOnly)
	b = appendBool(b, 9, r.CountOnly)
	b = appendU64(b, 10, uint64(r.MinModRevision))
	b = appendU64(b, 11, uint64(r.MaxModRevision))
	b = appendU64(b, 12, uint64(r.MinCreateRevision))
	return appendU64(b, 13, uint64(r.MaxCreateRevision))
}

func sizeDeleteRangeRequest(r *pb.DeleteRangeRequest) int {
	return sizeBytes(1, r.Key) + sizeBytes(2, r.RangeEnd) + sizeBool(3, r.PrevKv)
}

func appendDeleteRangeRequest(b []byte, r *pb.DeleteRangeRequest) []byte {
	b = appendBytes(b, 1, r.Key)
	b = appendBytes(b, 2, r.RangeEnd)
	return appendBool(b, 3, r.PrevKv)
}

// sizeRequestOp is the size of op's body.
func sizeRequestOp(op *pb.RequestOp, depth int) (int, bool) {
	if op == nil || !known(op) {
		return 0, false
	}
	switch r := op.Request.(type) {
	case nil:
		return 0, true
	case *pb.RequestOp_RequestRange:
		if r.RequestRange == nil || !known(r.RequestRange) {
			return 0, false
		}
		return sizeMsg(1, sizeRangeRequest(r.RequestRange)), true
	case *pb.RequestOp_RequestPut:
		if r.RequestPut == nil || !known(r.RequestPut) {
			return 0, false
		}
		return sizeMsg(2, sizePutRequest(r.RequestPut)), true
	case *pb.RequestOp_RequestDeleteRange:
		if r.RequestDeleteRange == nil || !known(r.RequestDeleteRange) {
			return 0, false
		}
		return sizeMsg(3, sizeDeleteRangeRequest(r.RequestDeleteRange)), true
	case *pb.RequestOp_RequestTxn:
		n, ok := sizeTxnRequest(r.RequestTxn, depth+1)
		return sizeMsg(4, n), ok
	}
	return 0, false
}

func appendRequestOp(b []byte, op *pb.RequestOp, depth int) []byte {
	switch r := op.Request.(type) {
	case *pb.RequestOp_RequestRange:
		b = appendMsgHead(b, 1, sizeRangeRequest(r.RequestRange))
		return appendRangeRequest(b, r.RequestRange)
	case *pb.RequestOp_RequestPut:
		b = appendMsgHead(b, 2, sizePutRequest(r.RequestPut))
		return appendPutRequest(b, r.RequestPut)
	case *pb.RequestOp_RequestDeleteRange:
		b = appendMsgHead(b, 3, sizeDeleteRangeRequest(r.RequestDeleteRange))
		return appendDeleteRangeRequest(b, r.RequestDeleteRange)
	case *pb.RequestOp_RequestTxn:
		n, _ := sizeTxnRequest(r.RequestTxn, depth+1)
		b = appendMsgHead(b, 4, n)
		return appendTxnRequest(b, r.RequestTxn, depth+1)
	}
	return b
}

func sizeTxnRequest(t *pb.TxnRequest, depth int) (int, bool) {
	if t == nil || depth > maxTxnDepth || !known(t) {
		return 0, false
	}
	total := 0
	for _, c := range t.Compare {
		n, ok := sizeCompare(c)
		if !ok {
			return 0, false
		}
		total += sizeMsg(1, n)
	}
	for i, ops := range [2][]*pb.RequestOp{t.Success, t.Failure} {
		for _, op := range ops {
			n, ok := sizeRequestOp(op, depth)
			if !ok {
				return 0, false
			}
			total += sizeMsg(protowire.Number(2+i), n)
		}
	}
	return total, true
}

func appendTxnRequest(b []byte, t *pb.TxnRequest, depth int) []byte {
	for _, c := range t.Compare {
		n, _ := sizeCompare(c)
		b = appendCompare(appendMsgHead(b, 1, n), c)
	}
	for i, ops := range [2][]*pb.RequestOp{t.Success, t.Failure} {
		for _, op := range ops {
			n, _ := sizeRequestOp(op, depth)
			b = appendRequestOp(appendMsgHead(b, protowire.Number(2+i), n), op, depth)
		}
	}
	return b
}

func sizeDeleteRangeResponse(m *pb.DeleteRangeResponse) (int, bool) {
	if m == nil || !known(m) || !headerKnown(m.Header) {
		return 0, false
	}
	n := 0
	if m.Header != nil {
		n += sizeMsg(1, sizeResponseHeader(m.Header))
	}
	n += sizeU64(2, uint64(m.Deleted))
	for _, kv := range m.PrevKvs {
		if kv == nil || !known(kv) {
			return 0, false
		}
		n += sizeMsg(3, sizeKV(kv))
	}
	return n, true
}

func appendDeleteRangeResponse(b []byte, m *pb.DeleteRangeResponse) []byte {
	if m.Header != nil {
		b = appendMsgHead(b, 1, sizeResponseHeader(m.Header))
		b = appendResponseHeader(b, m.Header)
	}
	b = appendU64(b, 2, uint64(m.Deleted))
	for _, kv := range m.PrevKvs {
		b = appendMsgHead(b, 3, sizeKV(kv))
		b = appendKV(b, kv)
	}
	return b
}

func sizeResponseOp(op *pb.ResponseOp, depth int) (int, bool) {
	if op == nil || !known(op) {
		return 0, false
	}
	switch r := op.Response.(type) {
	case nil:
		return 0, true
	case *pb.ResponseOp_ResponseRange:
		if r.ResponseRange == nil || !rangeResponseKnown(r.ResponseRange) {
			return 0, false
		}
		return sizeMsg(1, sizeRangeResponse(r.ResponseRange)), true
	case *pb.ResponseOp_ResponsePut:
		if r.ResponsePut == nil || !putResponseKnown(r.ResponsePut) {
			return 0, false
		}
		return sizeMsg(2, sizePutResponse(r.ResponsePut)), true
	case *pb.ResponseOp_ResponseDeleteRange:
		n, ok := sizeDeleteRangeResponse(r.ResponseDeleteRange)
		return sizeMsg(3, n), ok
	case *pb.ResponseOp_ResponseTxn:
		n, ok := sizeTxnResponse(r.ResponseTxn, depth+1)
		return sizeMsg(4, n), ok
	}
	return 0, false
}

func appendResponseOp(b []byte, op *pb.ResponseOp, depth int) []byte {
	switch r := op.Response.(type) {
	case *pb.ResponseOp_ResponseRange:
		b = appendMsgHead(b, 1, sizeRangeResponse(r.ResponseRange))
		return appendRangeResponse(b, r.ResponseRange)
	case *pb.ResponseOp_ResponsePut:
		b = appendMsgHead(b, 2, sizePutResponse(r.ResponsePut))
		return appendPutResponse(b, r.ResponsePut)
	case *pb.ResponseOp_ResponseDeleteRange:
		n, _ := sizeDeleteRangeResponse(r.ResponseDeleteRange)
		b = appendMsgHead(b, 3, n)
		return appendDeleteRangeResponse(b, r.ResponseDeleteRange)
	case *pb.ResponseOp_ResponseTxn:
		n, _ := sizeTxnResponse(r.ResponseTxn, depth+1)
		b = appendMsgHead(b, 4, n)
		return appendTxnResponse(b, r.ResponseTxn, depth+1)
	}
	return b
}

func sizeTxnResponse(m *pb.TxnResponse, depth int) (int, bool) {
	if m == nil || depth > maxTxnDepth || !known(m) || !headerKnown(m.Header) {
		return 0, false
	}
	n := 0
	if m.Header != nil {
		n += sizeMsg(1, sizeResponseHeader(m.Header))
	}
	n += sizeBool(2, m.Succeeded)
	for _, op := range m.Responses {
		s, ok := sizeResponseOp(op, depth)
		if !ok {
			return 0, false
		}
		n += sizeMsg(3, s)
	}
	return n, true
}

func appendTxnResponse(b []byte, m *pb.TxnResponse, depth int) []byte {
	if m.Header != nil {
		b = appendMsgHead(b, 1, sizeResponseHeader(m.Header))
		b = appendResponseHeader(b, m.Header)
	}
	b = appendBool(b, 2, m.Succeeded)
	for _, op := range m.Responses {
		n, _ := sizeResponseOp(op, depth)
		b = appendResponseOp(appendMsgHead(b, 3, n), op, depth)
	}
	return b
}

// Decoding. A message field seen twice (protobuf-go merges the two) and a
// oneof message member after another member go to protobuf-go.

func unmarshalDeleteRangeRequest(b []byte, m *pb.DeleteRangeRequest) bool {
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
			m.RangeEnd = owned(f.bytes)
		case f.num == 3 && f.typ == protowire.VarintType:
			m.PrevKv = f.v != 0
		default:
			return false
		}
	}
	return true
}

func unmarshalCompare(b []byte, c *pb.Compare) bool {
	var f field
	for len(b) > 0 {
		n := next(b, &f)
		if n < 0 {
			return false
		}
		b = b[n:]
		if f.typ == protowire.BytesType {
			switch f.num {
			case 3:
				c.Key = owned(f.bytes)
			case 7:
				// A oneof's bytes member keeps an empty value non-nil, as
				// protobuf-go's.
				c.TargetUnion = &pb.Compare_Value{Value: append([]byte{}, f.bytes...)}
			case 64:
				c.RangeEnd = owned(f.bytes)
			default:
				return false
			}
			continue
		}
		switch f.num {
		case 1:
			c.Result = pb.Compare_CompareResult(int32(f.v))
		case 2:
			c.Target = pb.Compare_CompareTarget(int32(f.v))
		case 4:
			c.TargetUnion = &pb.Compare_Version{Version: int64(f.v)}
		case 5:
			c.TargetUnion = &pb.Compare_CreateRevision{CreateRevision: int64(f.v)}
		case 6:
			c.TargetUnion = &pb.Compare_ModRevision{ModRevision: int64(f.v)}
		case 8:
			c.TargetUnion = &pb.Compare_Lease{Lease: int64(f.v)}
		default:
			return false
		}
	}
	return true
}

func unmarshalRequestOp(b []byte, op *pb.RequestOp, depth int) bool {
	var f field
	for len(b) > 0 {
		n := next(b, &f)
		if n < 0 || f.typ != protowire.BytesType || op.Request != nil {
			return false
		}
		b = b[n:]
		switch f.num {
		case 1:
			r := &pb.RangeRequest{}
			if !unmarshalRangeRequest(f.bytes, r) {
				return false
			}
			op.Request = &pb.RequestOp_RequestRange{RequestRange: r}
		case 2:
			r := &pb.PutRequest{}
			if !unmarshalPutRequest(f.bytes, r) {
				return false
			}
			op.Request = &pb.RequestOp_RequestPut{RequestPut: r}
		case 3:
			r := &pb.DeleteRangeRequest{}
			if !unmarshalDeleteRangeRequest(f.bytes, r) {
				return false
			}
			op.Request = &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: r}
		case 4:
			r := &pb.TxnRequest{}
			if !unmarshalTxnRequest(f.bytes, r, depth+1) {
				return false
			}
			op.Request = &pb.RequestOp_RequestTxn{RequestTxn: r}
		default:
			return false
		}
	}
	return true
}

func unmarshalTxnRequest(b []byte, t *pb.TxnRequest, depth int) bool {
	if depth > maxTxnDepth {
		return false
	}
	var f field
	for len(b) > 0 {
		n := next(b, &f)
		if n < 0 || f.typ != protowire.BytesType {
			return false
		}
		b = b[n:]
		switch f.num {
		case 1:
			c := &pb.Compare{}
			if !unmarshalCompare(f.bytes, c) {
				return false
			}
			t.Compare = append(t.Compare, c)
		case 2, 3:
			op := &pb.RequestOp{}
			if !unmarshalRequestOp(f.bytes, op, depth) {
				return false
			}
			if f.num == 2 {
				t.Success = append(t.Success, op)
			} else {
				t.Failure = append(t.Failure, op)
			}
		default:
			return false
		}
	}
	return true
}
