package mvcc

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
)

// The hand-written codec produces and reads exactly protobuf's encoding.
func TestCodecMatchesProto(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	randBytes := func() []byte {
		if rng.IntN(4) == 0 {
			return nil
		}
		b := make([]byte, rng.IntN(300))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		return b
	}
	randInt := func() int64 {
		switch rng.IntN(4) {
		case 0:
			return 0
		case 1:
			return -rng.Int64()
		}
		return rng.Int64N(1 << rng.IntN(63))
	}
	for i := range 2000 {
		kv := &mvccpb.KeyValue{
			Key: randBytes(), Value: randBytes(),
			CreateRevision: randInt(), ModRevision: randInt(), Version: randInt(), Lease: randInt(),
		}
		want, err := proto.Marshal(kv)
		if err != nil {
			t.Fatal(err)
		}
		got := marshalKV(kv)
		if !bytes.Equal(got, want) {
			t.Fatalf("case %d: marshalKV = %x, proto.Marshal = %x", i, got, want)
		}
		var back mvccpb.KeyValue
		if err := unmarshalKV(got, &back); err != nil {
			t.Fatalf("case %d: unmarshal: %v", i, err)
		}
		if !proto.Equal(&back, kv) {
			t.Fatalf("case %d: round trip = %v, want %v", i, &back, kv)
		}
		got[0] ^= 0xff // decoded values must not alias the input
		if len(back.Key) > 0 && !bytes.Equal(back.Key, kv.Key) {
			t.Fatalf("case %d: decoded key aliases the input", i)
		}
	}
	if err := unmarshalKV([]byte{0x0a, 0x05, 'a'}, &mvccpb.KeyValue{}); err == nil {
		t.Fatal("truncated input decoded without error")
	}
}
