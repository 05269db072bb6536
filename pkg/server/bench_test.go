package server

import (
	"context"
	"fmt"
	"runtime/metrics"
	"sync/atomic"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// The member benchmarks drive a real member over gRPC on loopback, with
// b.SetParallelism(16) goroutines per CPU as concurrent clients.

// reportSchedPerOp reports, when the benchmark ends, the goroutine
// wake-ups per operation ("sched/op", client and server together) as the
// runtime samples them: its scheduling latency histogram tracks one
// transition in eight per goroutine, so compare builds, not the figure with
// a count. A park and wake-up is a cost that server CPU on a shared machine
// blurs but this count does not.
func reportSchedPerOp(b *testing.B) {
	start := schedEvents()
	b.Cleanup(func() {
		if b.N > 0 {
			b.ReportMetric(float64(schedEvents()-start)/float64(b.N), "sched/op")
		}
	})
}

// schedEvents is the number of samples in the runtime's scheduling latency
// histogram so far.
func schedEvents() uint64 {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	var n uint64
	for _, c := range s[0].Value.Float64Histogram().Counts {
		n += c
	}
	return n
}

func benchMember(b *testing.B, engine string) *member {
	c := testConfig(b, engine, b.TempDir())
	m := startMember(b, c)
	put(b, m, "warm", "up")
	return m
}

func BenchmarkMemberPut(b *testing.B) {
	for _, engine := range engines {
		b.Run(engine, func(b *testing.B) {
			m := benchMember(b, engine)
			val := make([]byte, 256)
			var n atomic.Int64
			b.SetParallelism(16)
			b.ResetTimer()
			reportSchedPerOp(b)
			b.RunParallel(func(pb_ *testing.PB) {
				for pb_.Next() {
					k := fmt.Sprintf("key-%d", n.Add(1)%10000)
					if _, err := m.kv.Put(context.Background(), &pb.PutRequest{Key: []byte(k), Value: val}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

func BenchmarkMemberRangeOneKey(b *testing.B) {
	for _, engine := range engines {
		for _, serializable := range []bool{true, false} {
			b.Run(fmt.Sprintf("%s/serializable=%v", engine, serializable), func(b *testing.B) {
				m := benchMember(b, engine)
				b.SetParallelism(16)
				b.ResetTimer()
				b.RunParallel(func(pb_ *testing.PB) {
					for pb_.Next() {
						if _, err := m.kv.Range(context.Background(), &pb.RangeRequest{Key: []byte("warm"), Serializable: serializable}); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

func BenchmarkMemberRangePrefix1000(b *testing.B) {
	for _, engine := range engines {
		b.Run(engine, func(b *testing.B) {
			m := benchMember(b, engine)
			val := make([]byte, 256)
			for i := 0; i < 1000; i++ {
				if _, err := m.kv.Put(context.Background(), &pb.PutRequest{Key: []byte(fmt.Sprintf("p/%04d", i)), Value: val}); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			b.RunParallel(func(pb_ *testing.PB) {
				for pb_.Next() {
					resp, err := m.kv.Range(context.Background(), &pb.RangeRequest{Key: []byte("p/"), RangeEnd: []byte("p0"), Serializable: true})
					if err != nil || len(resp.Kvs) != 1000 {
						b.Errorf("range: %v, %d kvs", err, len(resp.GetKvs()))
						return
					}
				}
			})
		})
	}
}

func BenchmarkMemberTxn(b *testing.B) {
	for _, engine := range engines {
		b.Run(engine, func(b *testing.B) {
			m := benchMember(b, engine)
			val := make([]byte, 256)
			var n atomic.Int64
			b.SetParallelism(16)
			b.ResetTimer()
			b.RunParallel(func(pb_ *testing.PB) {
				for pb_.Next() {
					k := []byte(fmt.Sprintf("txn-%d", n.Add(1)%10000))
					txn := &pb.TxnRequest{
						Compare: []*pb.Compare{{Key: k, Target: pb.Compare_VERSION, Result: pb.Compare_GREATER, TargetUnion: &pb.Compare_Version{Version: -1}}},
						Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: k, Value: val}}}},
					}
					if _, err := m.kv.Txn(context.Background(), txn); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
