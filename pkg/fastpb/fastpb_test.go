package fastpb

import (
	"bytes"
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

func (g gen) putEntry() *pb.InternalRaftRequest {
	r := &pb.InternalRaftRequest{Put: g.putRequest()}
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
		var m proto.Message = g.putResponse()
		if i%2 == 1 {
			m = g.rangeResponse()
		}
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

func TestMarshalPutEntryMatchesProtobuf(t *testing.T) {
	g := gen{rand.New(rand.NewPCG(3, 4))}
	for range 3000 {
		r := g.putEntry()
		want, err := proto.Marshal(r) // fails for a user name that is not UTF-8
		got, ok := MarshalPutEntry(nil, r)
		if err != nil {
			if ok {
				t.Fatalf("MarshalPutEntry(%v) handled what proto.Marshal refuses (%v)", r, err)
			}
			continue
		}
		if !ok || !bytes.Equal(got, want) {
			t.Fatalf("MarshalPutEntry(%v) = %x, %v\nwant %x", r, got, ok, want)
		}
	}
}

// A field of InternalRaftRequest other than Header and Put, a field that
// a newer api module adds included, is never dropped: the entry goes to
// protobuf-go.
func TestPutEntryFieldsComplete(t *testing.T) {
	fields := (&pb.InternalRaftRequest{}).ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.Name() == "header" || fd.Name() == "put" {
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
		if out, ok := MarshalPutEntry(nil, r); ok {
			t.Errorf("MarshalPutEntry handled an entry with %s set: %x", fd.Name(), out)
		}
	}
	if _, ok := MarshalPutEntry(nil, &pb.InternalRaftRequest{Header: &pb.RequestHeader{ID: 1}}); ok {
		t.Error("MarshalPutEntry handled an entry without a put")
	}
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
		(*pb.PutResponse)(nil),
		&pb.TxnResponse{},
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
	if _, ok := MarshalPutEntry(nil, r); ok {
		t.Error("MarshalPutEntry handled a put with unknown fields")
	}
}

func TestUnmarshalRoundTrip(t *testing.T) {
	g := gen{rand.New(rand.NewPCG(5, 6))}
	for i := range 5000 {
		var in, out proto.Message = g.putRequest(), &pb.PutRequest{}
		if i%2 == 1 {
			in, out = g.rangeRequest(), &pb.RangeRequest{}
		}
		b, err := proto.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		checkUnmarshal(t, b, out, true)
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
	fields := slow.ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.Kind() != protoreflect.BytesKind {
			continue
		}
		fb, sb := fast.ProtoReflect().Get(fd).Bytes(), slow.ProtoReflect().Get(fd).Bytes()
		if (fb == nil) != (sb == nil) {
			t.Fatalf("Unmarshal(%x): field %s nil %v, protobuf-go's nil %v", b, fd.Name(), fb == nil, sb == nil)
		}
	}
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
	if Unmarshal([]byte{}, &pb.TxnRequest{}) || Unmarshal(nil, (*pb.PutRequest)(nil)) {
		t.Fatal("Unmarshal handled a message it does not decode")
	}
}

func FuzzUnmarshal(f *testing.F) {
	g := gen{rand.New(rand.NewPCG(7, 8))}
	for range 8 {
		for _, m := range []proto.Message{g.putRequest(), g.rangeRequest()} {
			b, err := proto.Marshal(m)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkUnmarshal(t, b, &pb.PutRequest{}, false)
		checkUnmarshal(t, b, &pb.RangeRequest{}, false)
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
