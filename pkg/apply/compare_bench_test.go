package apply

import (
	"fmt"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/backend/enginetest"
	"github.com/kvd-dev/kvd/pkg/mvcc"
)

// BenchmarkCompare evaluates one compare of a key that is in the backend
// (10,000 keys written and committed), through a read view: the version and
// mod-revision compares read the index alone, the value compare reads the
// value as etcd does for every target.
func BenchmarkCompare(b *testing.B) {
	for _, engine := range enginetest.Names {
		b.Run(engine, func(b *testing.B) {
			st, err := mvcc.Open(enginetest.OpenT(b, engine), zap.NewNop())
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { st.Close() })
			value := make([]byte, 256)
			for i := 0; i < 10000; i += 1000 {
				err := st.Apply(func(bt *mvcc.Batch) error {
					for j := i; j < i+1000; j++ {
						tw := bt.Write()
						tw.Put(fmt.Appendf(nil, "key-%06d", j), value, 0)
						tw.End()
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			if err := st.Flush(); err != nil {
				b.Fatal(err)
			}
			key := []byte("key-005123")
			for _, c := range []*pb.Compare{
				{Key: key, Target: pb.Compare_VERSION, Result: pb.Compare_GREATER, TargetUnion: &pb.Compare_Version{Version: 0}},
				{Key: key, Target: pb.Compare_MOD, Result: pb.Compare_LESS, TargetUnion: &pb.Compare_ModRevision{ModRevision: 1 << 40}},
				{Key: key, Target: pb.Compare_VALUE, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Value{Value: value}},
			} {
				b.Run(c.Target.String(), func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						r := st.Read()
						ok := Compare(r, c)
						r.End()
						if !ok {
							b.Fatalf("compare %v failed", c)
						}
					}
				})
			}
		})
	}
}
