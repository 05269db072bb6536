package fastpb

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// gen makes random field values, zero and extreme ones often: the zero
// values are the fields proto3 leaves out, the extremes the longest varints.
type gen struct{ r *rand.Rand }

func (g gen) i64() int64 {
	switch g.r.IntN(6) {
	case 0:
		return 0
	case 1:
		return -1 - g.r.Int64N(1<<40)
	case 2:
		return math.MaxInt64
	case 3:
		return math.MinInt64
	}
	return g.r.Int64N(1 << uint(g.r.IntN(62)+1))
}

func (g gen) u64() uint64 { return uint64(g.i64()) }

func (g gen) bytes() []byte {
	switch g.r.IntN(4) {
	case 0:
		return nil
	case 1:
		return []byte{}
	}
	b := make([]byte, g.r.IntN(300))
	for i := range b {
		b[i] = byte(g.r.IntN(256))
	}
	return b
}

func (g gen) bool() bool { return g.r.IntN(2) == 0 }

func (g gen) header() *pb.ResponseHeader {
	if g.r.IntN(5) == 0 {
		return nil
	}
	return &pb.ResponseHeader{ClusterId: g.u64(), MemberId: g.u64(), Revision: g.i64(), RaftTerm: g.u64()}
}

func (g gen) kv() *mvccpb.KeyValue {
	return &mvccpb.KeyValue{Key: g.bytes(), CreateRevision: g.i64(), ModRevision: g.i64(), Version: g.i64(),
		Value: g.bytes(), Lease: g.i64()}
}

func (g gen) putResponse() *pb.PutResponse {
	m := &pb.PutResponse{Header: g.header()}
	if g.bool() {
		m.PrevKv = g.kv()
	}
	return m
}

func (g gen) rangeResponse() *pb.RangeResponse {
	m := &pb.RangeResponse{Header: g.header(), More: g.bool(), Count: g.i64()}
	for range g.r.IntN(4) {
		m.Kvs = append(m.Kvs, g.kv())
	}
	return m
}

func (g gen) putRequest() *pb.PutRequest {
	return &pb.PutRequest{Key: g.bytes(), Value: g.bytes(), Lease: g.i64(), PrevKv: g.bool(),
		IgnoreValue: g.bool(), IgnoreLease: g.bool()}
}

func (g gen) rangeRequest() *pb.RangeRequest {
	return &pb.RangeRequest{Key: g.bytes(), RangeEnd: g.bytes(), Limit: g.i64(), Revision: g.i64(),
		SortOrder: pb.RangeRequest_SortOrder(int32(g.i64())), SortTarget: pb.RangeRequest_SortTarget(g.r.IntN(5)),
		Serializable: g.bool(), KeysOnly: g.bool(), CountOnly: g.bool(), MinModRevision: g.i64(),
		MaxModRevision: g.i64(), MinCreateRevision: g.i64(), MaxCreateRevision: g.i64()}
}

func (g gen) deleteRangeRequest() *pb.DeleteRangeRequest {
	return &pb.DeleteRangeRequest{Key: g.bytes(), RangeEnd: g.bytes(), PrevKv: g.bool()}
}

func (g gen) compare() *pb.Compare {
	c := &pb.Compare{Result: pb.Compare_CompareResult(g.r.IntN(5) - 1), Target: pb.Compare_CompareTarget(g.r.IntN(6)),
		Key: g.bytes(), RangeEnd: g.bytes()}
	switch g.r.IntN(6) {
	case 0:
		c.TargetUnion = &pb.Compare_Version{Version: g.i64()}
	case 1:
		c.TargetUnion = &pb.Compare_CreateRevision{CreateRevision: g.i64()}
	case 2:
		c.TargetUnion = &pb.Compare_ModRevision{ModRevision: g.i64()}
	case 3:
		c.TargetUnion = &pb.Compare_Value{Value: g.bytes()}
	case 4:
		c.TargetUnion = &pb.Compare_Lease{Lease: g.i64()}
	}
	return c
}

func (g gen) requestOp(depth int) *pb.RequestOp {
	switch g.r.IntN(5) {
	case 0:
		return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: g.rangeRequest()}}
	case 1:
		return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: g.putRequest()}}
	case 2:
		return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: g.deleteRangeRequest()}}
	case 3:
		if depth < 3 {
			return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: g.txnRequest(depth + 1)}}
		}
	}
	return &pb.RequestOp{}
}

func (g gen) txnRequest(depth int) *pb.TxnRequest {
	t := &pb.TxnRequest{}
	for range g.r.IntN(3) {
		t.Compare = append(t.Compare, g.compare())
	}
	for range g.r.IntN(3) {
		t.Success = append(t.Success, g.requestOp(depth))
	}
	for range g.r.IntN(3) {
		t.Failure = append(t.Failure, g.requestOp(depth))
	}
	return t
}

func (g gen) deleteRangeResponse() *pb.DeleteRangeResponse {
	m := &pb.DeleteRangeResponse{Header: g.header(), Deleted: g.i64()}
	for range g.r.IntN(3) {
		m.PrevKvs = append(m.PrevKvs, g.kv())
	}
	return m
}

func (g gen) txnResponse(depth int) *pb.TxnResponse {
	m := &pb.TxnResponse{Header: g.header(), Succeeded: g.bool()}
	for range g.r.IntN(4) {
		op := &pb.ResponseOp{}
		switch g.r.IntN(5) {
		case 0:
			op.Response = &pb.ResponseOp_ResponseRange{ResponseRange: g.rangeResponse()}
		case 1:
			op.Response = &pb.ResponseOp_ResponsePut{ResponsePut: g.putResponse()}
		case 2:
			op.Response = &pb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: g.deleteRangeResponse()}
		case 3:
			if depth < 3 {
				op.Response = &pb.ResponseOp_ResponseTxn{ResponseTxn: g.txnResponse(depth + 1)}
			}
		}
		m.Responses = append(m.Responses, op)
	}
	return m
}

// entry is a raft entry of one KV write, as the API proposes it.
func (g gen) entry() *pb.InternalRaftRequest {
	r := &pb.InternalRaftRequest{}
	switch g.r.IntN(3) {
	case 0:
		r.Put = g.putRequest()
	case 1:
		r.DeleteRange = g.deleteRangeRequest()
	default:
		r.Txn = g.txnRequest(0)
	}
	if g.r.IntN(4) != 0 {
		r.Header = &pb.RequestHeader{ID: g.u64(), AuthRevision: g.u64()}
		switch g.r.IntN(3) {
		case 0:
			r.Header.Username = string(g.bytes())
		case 1:
			r.Header.Username = "user-é-" + string(rune(g.r.IntN(0x10000)))
		}
	}
	return r
}

func TestMarshalMatchesProtobuf(t *testing.T) {
	g := gen{rand.New(rand.NewPCG(1, 2))}
	for i := range 5000 {
		m := []proto.Message{g.putResponse(), g.rangeResponse(), g.deleteRangeResponse(), g.txnResponse(0)}[i%4]
		want, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		prefix := []byte("prefix")
		got, ok := Marshal(prefix, m)
		if !ok {
			t.Fatalf("Marshal(%v) not handled", m)
		}
		if !bytes.Equal(got[:len(prefix)], []byte("prefix")) || !bytes.Equal(got[len(prefix):], want) {
			t.Fatalf("Marshal(%v)\n got %x\nwant %x", m, got[len(prefix):], want)
		}
		if n, ok := Size(m); !ok || n != len(want) {
			t.Fatalf("Size(%v) = %d, %v; want %d", m, n, ok, len(want))
		}
	}
}

func TestMarshalEntryMatchesProtobuf(t *testing.T) {
	g := gen{rand.New(rand.NewPCG(3, 4))}
	for range 3000 {
		r := g.entry()
		want, err := proto.Marshal(r) // fails for a user name that is not UTF-8
		got, ok := MarshalEntry(nil, r)
		if err != nil {
			if ok {
				t.Fatalf("MarshalEntry(%v) handled what proto.Marshal refuses (%v)", r, err)
			}
			continue
		}
		if !ok || !bytes.Equal(got, want) {
			t.Fatalf("MarshalEntry(%v) = %x, %v\nwant %x", r, got, ok, want)
		}
	}
}

// A field of InternalRaftRequest beside Header and the one write, a field
// that a newer api module adds included, is never dropped: the entry goes
// to protobuf-go.
func TestEntryFieldsComplete(t *testing.T) {
	fields := (&pb.InternalRaftRequest{}).ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		switch fd.Name() {
		case "header", "put", "delete_range", "txn":
			continue
		}
		r := &pb.InternalRaftRequest{Header: &pb.RequestHeader{ID: 1}, Put: &pb.PutRequest{Key: []byte("k")}}
		m := r.ProtoReflect()
		switch fd.Kind() {
		case protoreflect.MessageKind:
			m.Set(fd, protoreflect.ValueOfMessage(m.NewField(fd).Message()))
		case protoreflect.Uint64Kind:
			m.Set(fd, protoreflect.ValueOfUint64(1))
		default:
			t.Fatalf("field %s of kind %v: teach this test to set it", fd.Name(), fd.Kind())
		}
		if out, ok := MarshalEntry(nil, r); ok {
			t.Errorf("MarshalPutEntry handled an entry with %s set: %x", fd.Name(), out)
		}
	}
	for _, r := range []*pb.InternalRaftRequest{
		{Header: &pb.RequestHeader{ID: 1}},
		{Put: &pb.PutRequest{}, Txn: &pb.TxnRequest{}},
		{DeleteRange: &pb.DeleteRangeRequest{}, Put: &pb.PutRequest{}},
		{Txn: &pb.TxnRequest{Success: []*pb.RequestOp{nil}}},
		{Txn: &pb.TxnRequest{Compare: []*pb.Compare{nil}}},
		{Txn: &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{}}}}},
		{Txn: deepTxn(maxTxnDepth + 1)},
	} {
		if out, ok := MarshalEntry(nil, r); ok {
			t.Errorf("MarshalEntry handled %v: %x", r, out)
		}
	}
	if _, ok := MarshalEntry(nil, &pb.InternalRaftRequest{Txn: deepTxn(maxTxnDepth)}); !ok {
		t.Error("MarshalEntry left a txn nested to the limit to protobuf-go")
	}
}

// deepTxn is a txn with txns nested depth deep in its success branch.
func deepTxn(depth int) *pb.TxnRequest {
	t := &pb.TxnRequest{}
	if depth > 0 {
		t.Success = []*pb.RequestOp{{Request: &pb.RequestOp_RequestTxn{RequestTxn: deepTxn(depth - 1)}}}
	}
	return t
}

// Messages holding unknown fields, or other types, are left to protobuf-go.
func TestMarshalLeavesUnknownFieldsToProtobuf(t *testing.T) {
	unknown := protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 7)
	withUnknown := func(m proto.Message) proto.Message {
		m.ProtoReflect().SetUnknown(unknown)
		return m
	}
	hdr := func() *pb.ResponseHeader { return withUnknown(&pb.ResponseHeader{Revision: 1}).(*pb.ResponseHeader) }
	kv := func() *mvccpb.KeyValue { return withUnknown(&mvccpb.KeyValue{Key: []byte("k")}).(*mvccpb.KeyValue) }
	for _, m := range []any{
		withUnknown(&pb.PutResponse{}),
		&pb.PutResponse{Header: hdr()},
		&pb.PutResponse{PrevKv: kv()},
		withUnknown(&pb.RangeResponse{}),
		&pb.RangeResponse{Header: hdr()},
		&pb.RangeResponse{Kvs: []*mvccpb.KeyValue{{Key: []byte("a")}, kv()}},
		&pb.RangeResponse{Kvs: []*mvccpb.KeyValue{nil}},
		withUnknown(&pb.DeleteRangeResponse{}),
		&pb.DeleteRangeResponse{PrevKvs: []*mvccpb.KeyValue{kv()}},
		withUnknown(&pb.TxnResponse{}),
		&pb.TxnResponse{Responses: []*pb.ResponseOp{nil}},
		&pb.TxnResponse{Responses: []*pb.ResponseOp{withUnknown(&pb.ResponseOp{}).(*pb.ResponseOp)}},
		&pb.TxnResponse{Responses: []*pb.ResponseOp{{Response: &pb.ResponseOp_ResponsePut{ResponsePut: &pb.PutResponse{Header: hdr()}}}}},
		&pb.TxnResponse{Responses: []*pb.ResponseOp{{Response: &pb.ResponseOp_ResponseRange{}}}},
		(*pb.PutResponse)(nil),
		&pb.CompactionResponse{},
		"not a message",
	} {
		if out, ok := Marshal(nil, m); ok {
			t.Errorf("Marshal(%v) handled: %x", m, out)
		}
		if _, ok := Size(m); ok {
			t.Errorf("Size(%v) handled", m)
		}
	}
	r := &pb.InternalRaftRequest{Header: &pb.RequestHeader{ID: 1}, Put: &pb.PutRequest{Key: []byte("k")}}
	r.Put.ProtoReflect().SetUnknown(unknown)
	if _, ok := MarshalEntry(nil, r); ok {
		t.Error("MarshalPutEntry handled a put with unknown fields")
	}
}

func TestUnmarshalRoundTrip(t *testing.T) {
	g := gen{rand.New(rand.NewPCG(5, 6))}
	for i := range 5000 {
		in := []proto.Message{g.putRequest(), g.rangeRequest(), g.deleteRangeRequest(), g.txnRequest(0)}[i%4]
		out := in.ProtoReflect().New().Interface()
		b, err := proto.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		checkUnmarshal(t, b, out, true)
	}
}

// Entries as MarshalEntry writes them, and as protobuf-go does, decode as
// protobuf-go decodes them; a user name that is not UTF-8 (which only a
// hand-made entry holds) and the shapes MarshalEntry never writes go to
// protobuf-go.
func TestUnmarshalEntryRoundTrip(t *testing.T) {
	g := gen{rand.New(rand.NewPCG(9, 10))}
	handled := 0
	for range 3000 {
		in := g.entry()
		b, ok := MarshalEntry(nil, in)
		if !ok {
			continue // a user name that is not UTF-8
		}
		checkUnmarshal(t, b, &pb.InternalRaftRequest{}, true)
		handled++
	}
	if handled < 2000 {
		t.Fatalf("only %d of 3000 entries encoded", handled)
	}
	tag := protowire.AppendTag
	msg := func(num protowire.Number, b []byte) []byte {
		return protowire.AppendBytes(tag(nil, num, protowire.BytesType), b)
	}
	put := msg(4, msg(1, []byte("k")))
	for _, c := range []struct {
		name   string
		b      []byte
		handle bool
	}{
		{"put and txn both", append(append([]byte(nil), put...), msg(6, nil)...), true},
		{"header only", msg(100, protowire.AppendVarint(tag(nil, 1, protowire.VarintType), 7)), true},
		{"put twice (merged by protobuf-go)", append(append([]byte(nil), put...), put...), false},
		{"user name not UTF-8", msg(100, msg(2, []byte{0xff, 0xfe})), false},
		{"a compaction", msg(7, protowire.AppendVarint(tag(nil, 1, protowire.VarintType), 3)), false},
		{"an ID", protowire.AppendVarint(tag(nil, 1, protowire.VarintType), 9), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			checkUnmarshal(t, c.b, &pb.InternalRaftRequest{}, c.handle)
			if !c.handle && Unmarshal(c.b, &pb.InternalRaftRequest{}) {
				t.Fatalf("Unmarshal(%x) handled", c.b)
			}
		})
	}
}

// checkUnmarshal decodes b with Unmarshal and with proto.Unmarshal into
// fresh messages of into's type and fails unless they agree: an input
// Unmarshal takes must be one protobuf-go takes, into the same message,
// with the same nil-or-not bytes fields, sharing no memory with b.
func checkUnmarshal(t *testing.T, b []byte, into proto.Message, mustHandle bool) {
	t.Helper()
	fast := into.ProtoReflect().New().Interface()
	input := bytes.Clone(b)
	if !Unmarshal(input, fast) {
		if mustHandle {
			t.Fatalf("Unmarshal(%x) not handled", b)
		}
		return
	}
	slow := into.ProtoReflect().New().Interface()
	if err := proto.Unmarshal(b, slow); err != nil {
		t.Fatalf("Unmarshal took %x, which proto.Unmarshal refuses: %v", b, err)
	}
	if !proto.Equal(fast, slow) {
		t.Fatalf("Unmarshal(%x) = %v, proto.Unmarshal %v", b, fast, slow)
	}
	for i := range input {
		input[i] ^= 0xff // the decoded message must not change with its input
	}
	if !proto.Equal(fast, slow) {
		t.Fatalf("Unmarshal(%x) kept references to its input", b)
	}
	if path, ok := sameNils(fast.ProtoReflect(), slow.ProtoReflect(), ""); !ok {
		t.Fatalf("Unmarshal(%x): bytes field %s nil in one decoding, not in the other", b, path)
	}
}

// sameNils walks two equal messages and reports the first bytes field,
// nested ones included, that is nil in one and not in the other.
func sameNils(a, b protoreflect.Message, path string) (string, bool) {
	fields := a.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		p := path + "." + string(fd.Name())
		switch {
		case fd.IsList() && fd.Kind() == protoreflect.MessageKind:
			la, lb := a.Get(fd).List(), b.Get(fd).List()
			for j := range la.Len() {
				if q, ok := sameNils(la.Get(j).Message(), lb.Get(j).Message(), fmt.Sprintf("%s[%d]", p, j)); !ok {
					return q, false
				}
			}
		case fd.Kind() == protoreflect.MessageKind:
			if a.Has(fd) {
				if q, ok := sameNils(a.Get(fd).Message(), b.Get(fd).Message(), p); !ok {
					return q, false
				}
			}
		case fd.Kind() == protoreflect.BytesKind && !fd.IsList():
			if (a.Get(fd).Bytes() == nil) != (b.Get(fd).Bytes() == nil) {
				return p, false
			}
		}
	}
	return "", true
}

// Inputs protobuf-go reads otherwise than as plain known fields (unknown
// fields, a known field with another wire type) go to protobuf-go, and so
// do malformed ones; repeated fields take the last value, as protobuf-go's.
func TestUnmarshalEdges(t *testing.T) {
	tag := protowire.AppendTag
	varint := func(num protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(tag(nil, num, protowire.VarintType), v)
	}
	bytesField := func(num protowire.Number, v string) []byte {
		return protowire.AppendString(tag(nil, num, protowire.BytesType), v)
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	for _, c := range []struct {
		name   string
		b      []byte
		handle bool
	}{
		{"empty", nil, true},
		{"repeated key, last wins", cat(bytesField(1, "a"), bytesField(1, "bb")), true},
		{"empty key after a key", cat(bytesField(1, "a"), bytesField(1, "")), true},
		{"negative lease", varint(3, math.MaxUint64), true},
		{"bool from a big varint", varint(4, 1<<40), true},
		{"unknown field", cat(bytesField(1, "a"), varint(99, 1)), false},
		{"key as a varint", varint(1, 5), false},
		{"lease as bytes", bytesField(3, "x"), false},
		{"fixed64 field", protowire.AppendFixed64(tag(nil, 3, protowire.Fixed64Type), 1), false},
		{"truncated length", []byte{0x0a, 0x05, 'a'}, false},
		{"truncated varint", []byte{0x18, 0x80}, false},
		{"overlong varint", append([]byte{0x18}, bytes.Repeat([]byte{0xff}, 10)...), false},
		{"field zero", []byte{0x00, 0x01}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, m := range []proto.Message{&pb.PutRequest{}, &pb.RangeRequest{}} {
				checkUnmarshal(t, c.b, m, c.handle)
				if !c.handle && Unmarshal(c.b, m.ProtoReflect().New().Interface()) {
					t.Fatalf("%T: Unmarshal(%x) handled", m, c.b)
				}
			}
		})
	}
	if Unmarshal([]byte{}, &pb.CompactionRequest{}) || Unmarshal(nil, (*pb.PutRequest)(nil)) {
		t.Fatal("Unmarshal handled a message it does not decode")
	}
}

func FuzzUnmarshal(f *testing.F) {
	g := gen{rand.New(rand.NewPCG(7, 8))}
	for range 8 {
		for _, m := range []proto.Message{g.putRequest(), g.rangeRequest(), g.deleteRangeRequest(), g.txnRequest(0)} {
			b, err := proto.Marshal(m)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
		if b, ok := MarshalEntry(nil, g.entry()); ok {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkUnmarshal(t, b, &pb.PutRequest{}, false)
		checkUnmarshal(t, b, &pb.RangeRequest{}, false)
		checkUnmarshal(t, b, &pb.DeleteRangeRequest{}, false)
		checkUnmarshal(t, b, &pb.TxnRequest{}, false)
		checkUnmarshal(t, b, &pb.InternalRaftRequest{}, false)
	})
}

var sink []byte

func BenchmarkMarshalPutResponse(b *testing.B) {
	m := &pb.PutResponse{Header: &pb.ResponseHeader{ClusterId: 1 << 60, MemberId: 1 << 59, Revision: 123456, RaftTerm: 3}}
	b.Run("fastpb", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sink, _ = Marshal(nil, m)
		}
	})
	b.Run("protobuf", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sink, _ = proto.MarshalOptions{UseCachedSize: true}.Marshal(m) // after Size, as gRPC's codec
			_ = proto.Size(m)
		}
	})
}

func BenchmarkUnmarshalPutRequest(b *testing.B) {
	in, err := proto.Marshal(&pb.PutRequest{Key: bytes.Repeat([]byte("k"), 16), Value: bytes.Repeat([]byte("v"), 256)})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("fastpb", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			Unmarshal(in, &pb.PutRequest{})
		}
	})
	b.Run("protobuf", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := proto.Unmarshal(in, &pb.PutRequest{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A request op with two members (protobuf-go keeps the last, merging a
// message member seen twice) and a txn nested deeper than maxTxnDepth go to
// protobuf-go; a compare's oneof takes its last member, as protobuf-go's.
func TestUnmarshalTxnEdges(t *testing.T) {
	put, err := proto.Marshal(&pb.PutRequest{Key: []byte("k")})
	if err != nil {
		t.Fatal(err)
	}
	msg := func(num protowire.Number, body []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), body)
	}
	twoMembers := msg(2, append(msg(2, put), msg(1, nil)...))
	samePutTwice := msg(2, append(msg(2, put), msg(2, put)...))
	for _, b := range [][]byte{twoMembers, samePutTwice} {
		checkUnmarshal(t, b, &pb.TxnRequest{}, false)
		if Unmarshal(b, &pb.TxnRequest{}) {
			t.Errorf("Unmarshal(%x) handled a request op with two members", b)
		}
	}
	compare := msg(1, append(protowire.AppendVarint(protowire.AppendTag(nil, 4, protowire.VarintType), 3), msg(7, nil)...))
	checkUnmarshal(t, compare, &pb.TxnRequest{}, true)

	for depth, handled := range map[int]bool{maxTxnDepth: true, maxTxnDepth + 1: false} {
		b, err := proto.Marshal(deepTxn(depth))
		if err != nil {
			t.Fatal(err)
		}
		checkUnmarshal(t, b, &pb.TxnRequest{}, handled)
		if !handled && Unmarshal(b, &pb.TxnRequest{}) {
			t.Errorf("Unmarshal handled a txn nested %d deep", depth)
		}
	}
}

// A follower decodes every put entry it applies.
func BenchmarkUnmarshalPutEntry(b *testing.B) {
	in, ok := MarshalEntry(nil, &pb.InternalRaftRequest{
		Header: &pb.RequestHeader{ID: 1 << 40, Username: "user", AuthRevision: 7},
		Put:    &pb.PutRequest{Key: bytes.Repeat([]byte("k"), 16), Value: bytes.Repeat([]byte("v"), 256)}})
	if !ok {
		b.Fatal("MarshalEntry refused the entry")
	}
	b.Run("fastpb", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !Unmarshal(in, &pb.InternalRaftRequest{}) {
				b.Fatal("not handled")
			}
		}
	})
	b.Run("protobuf", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := proto.Unmarshal(in, &pb.InternalRaftRequest{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
