package server

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	gproto "google.golang.org/protobuf/proto"
)

// gathered returns the value of every sample of family name in r, by its
// label values joined with "/".
func gathered(t *testing.T, r *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	fams, err := r.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			key := ""
			for i, l := range m.GetLabel() {
				if i > 0 {
					key += "/"
				}
				key += l.GetValue()
			}
			switch {
			case m.GetCounter() != nil:
				out[key] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[key] = m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				out[key] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

func TestClientRequests(t *testing.T) {
	c := newClientRequests()
	r := prometheus.NewRegistry()
	r.MustRegister(c.vec)
	for _, call := range []struct {
		stream  bool
		version string
	}{{false, "3.7"}, {false, "3.7"}, {true, "3.7"}, {false, "unknown"}, {true, "3.5"}, {true, "3.5"}, {true, "3.5"}} {
		c.Inc(call.stream, call.version)
	}
	want := map[string]float64{"3.7/unary": 2, "3.7/stream": 1, "unknown/unary": 1, "3.5/stream": 3}
	got := gathered(t, r, "etcd_server_client_requests_total")
	if len(got) != len(want) {
		t.Fatalf("children %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	// A version seen before costs no allocation.
	if n := testing.AllocsPerRun(100, func() { c.Inc(false, "3.7") }); n != 0 {
		t.Errorf("Inc of a known version: %v allocs, want 0", n)
	}
	// Past maxClientVersions, calls still count.
	for i := range maxClientVersions + 10 {
		c.Inc(false, string(rune('a'+i%26))+string(rune('A'+i/26)))
	}
	c.Inc(false, "zZ")
	c.Inc(false, "zZ")
	if got := gathered(t, r, "etcd_server_client_requests_total")["unary/zZ"]; got != 0 {
		// label order is client_api_version/type
		t.Fatalf("label order changed: %v", got)
	}
	if got := gathered(t, r, "etcd_server_client_requests_total")["zZ/unary"]; got != 2 {
		t.Fatalf("zZ/unary = %v, want 2", got)
	}
}

// The codec counts the encoded message sizes both ways, as etcd's, with
// no allocation of its own.
func TestCountingCodec(t *testing.T) {
	c := &countingCodec{base: encoding.GetCodecV2(proto.Name)}
	req := &pb.PutRequest{Key: []byte("key"), Value: make([]byte, 300)}
	out, err := c.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	size := uint64(gproto.Size(req))
	if c.sent.Load() != size {
		t.Fatalf("sent %d, want %d", c.sent.Load(), size)
	}
	var back pb.PutRequest
	if err := c.Unmarshal(out, &back); err != nil {
		t.Fatal(err)
	}
	if c.received.Load() != size || string(back.Key) != "key" {
		t.Fatalf("received %d (key %q), want %d", c.received.Load(), back.Key, size)
	}
	base := encoding.GetCodecV2(proto.Name)
	measure := func(codec encoding.CodecV2) float64 {
		return testing.AllocsPerRun(100, func() {
			out, _ := codec.Marshal(req)
			var r pb.PutRequest
			_ = codec.Unmarshal(out, &r)
			out.Free()
		})
	}
	if got, want := measure(c), measure(base); got != want {
		t.Errorf("counting codec: %v allocs per round trip, proto codec %v", got, want)
	}
	if c.Name() != "proto" {
		t.Errorf("Name %q", c.Name())
	}
}
