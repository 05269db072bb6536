package transport

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// BenchmarkSend measures messages/s and MB/s of entry payload from one
// transport to another, keeping at most half a queue in flight so that
// nothing is dropped.
func BenchmarkSend(b *testing.B) {
	for _, payload := range []int{128, 4 << 10} {
		b.Run(fmt.Sprintf("payload=%d", payload), func(b *testing.B) {
			var got atomic.Int64
			a := startMember(b, 1, 7, "", nil)
			r := startMember(b, 2, 7, "", func(c *Config) {
				c.Receive = func(msgs []*raftpb.Message) { got.Add(int64(len(msgs))) }
			})
			connect(b, a, r)
			const batch = 64
			window := int64(a.cfg.QueueSize / 2)
			data := make([]byte, payload)
			msgs := make([]*raftpb.Message, batch)
			b.SetBytes(int64(payload))
			b.ReportAllocs()
			b.ResetTimer()
			for sent := 0; sent < b.N; {
				n := min(batch, b.N-sent)
				for i := range n {
					msgs[i] = &raftpb.Message{
						Type: raftpb.MsgApp.Enum(), From: proto.Uint64(1), To: proto.Uint64(2), Index: proto.Uint64(uint64(sent + i)),
						Entries: []*raftpb.Entry{{Index: proto.Uint64(uint64(sent + i)), Data: data}},
					}
				}
				for int64(sent+n)-got.Load() > window {
					// Yield-wait on the receiver: the benchmark measures the
					// transport, not a sleep granularity.
					runtime.Gosched()
				}
				a.Send(msgs[:n])
				sent += n
			}
			waitFor(b, "every message", func() bool { return got.Load() == int64(b.N) })
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			if h := a.Health(2); h.Dropped != 0 {
				b.Fatalf("dropped %d messages", h.Dropped)
			}
		})
	}
}

// BenchmarkRoundTrip measures one message to a peer and one back, one at a
// time: the transport's share of a raft commit's latency (an append out, its
// acknowledgement back).
func BenchmarkRoundTrip(b *testing.B) {
	back := make(chan struct{}, 1)
	var r *member
	a := startMember(b, 1, 7, "", func(c *Config) {
		c.Receive = func([]*raftpb.Message) { back <- struct{}{} }
	})
	r = startMember(b, 2, 7, "", func(c *Config) {
		c.Receive = func(msgs []*raftpb.Message) {
			r.Send([]*raftpb.Message{{Type: raftpb.MsgAppResp.Enum(), From: proto.Uint64(2), To: proto.Uint64(1), Index: msgs[0].Index}})
		}
	})
	connect(b, a, r)
	data := make([]byte, 300)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		a.Send([]*raftpb.Message{{Type: raftpb.MsgApp.Enum(), From: proto.Uint64(1), To: proto.Uint64(2), Index: proto.Uint64(uint64(i)),
			Entries: []*raftpb.Entry{{Index: proto.Uint64(uint64(i)), Data: data}}}})
		<-back
	}
}
