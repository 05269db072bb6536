package apply

import (
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kvd-dev/kvd/pkg/mvcc"
)

// Compares of create revision, mod revision and version read the index
// (compareVersions); each must answer what comparing the KeyValues a Range
// returns answers, for single keys and ranges, live, deleted and missing
// keys, through a read view and inside a write txn.
func TestCompareVersionsAgreesWithRange(t *testing.T) {
	eachEngine(t, func(t *testing.T, a *Applier, st *mvcc.Store) {
		for _, req := range []*pb.InternalRaftRequest{
			{Put: &pb.PutRequest{Key: []byte("a"), Value: []byte("1")}},
			{Put: &pb.PutRequest{Key: []byte("b"), Value: []byte("1")}},
			{Put: &pb.PutRequest{Key: []byte("a"), Value: []byte("2")}},
			{Put: &pb.PutRequest{Key: []byte("c"), Value: []byte("1")}},
			{DeleteRange: &pb.DeleteRangeRequest{Key: []byte("c")}},
			{Put: &pb.PutRequest{Key: []byte("a"), Value: []byte("3")}},
		} {
			if res := do(t, a, st, req); res.Err != nil {
				t.Fatal(res.Err)
			}
		}
		// a: created 2, mod 7, version 3; b: created 3, mod 3, version 1.
		ranges := [][2]string{{"a", ""}, {"b", ""}, {"c", ""}, {"z", ""}, {"a", "c"}, {"a", "\x00"}, {"b", "z"}}
		check := func(t *testing.T, r mvcc.Reader) {
			t.Helper()
			n := 0
			for _, kr := range ranges {
				for _, target := range []pb.Compare_CompareTarget{pb.Compare_CREATE, pb.Compare_MOD, pb.Compare_VERSION} {
					for _, result := range []pb.Compare_CompareResult{pb.Compare_EQUAL, pb.Compare_NOT_EQUAL, pb.Compare_GREATER, pb.Compare_LESS} {
						for operand := int64(0); operand <= 8; operand++ {
							c := &pb.Compare{Key: []byte(kr[0]), Target: target, Result: result}
							if kr[1] != "" {
								c.RangeEnd = []byte(kr[1])
							}
							switch target {
							case pb.Compare_CREATE:
								c.TargetUnion = &pb.Compare_CreateRevision{CreateRevision: operand}
							case pb.Compare_MOD:
								c.TargetUnion = &pb.Compare_ModRevision{ModRevision: operand}
							default:
								c.TargetUnion = &pb.Compare_Version{Version: operand}
							}
							if got, want := Compare(r, c), compareByRange(t, r, c); got != want {
								t.Fatalf("%v %q-%q %v %d: %v, comparing the range's KeyValues gives %v", target, kr[0], kr[1], result, operand, got, want)
							}
							if Compare(r, c) {
								n++
							}
						}
					}
				}
			}
			if n == 0 {
				t.Fatal("no compare held")
			}
		}
		view := st.Read()
		check(t, view)
		view.End()
		err := st.Apply(func(b *mvcc.Batch) error {
			tw := b.Write()
			defer tw.End()
			check(t, tw)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// compareByRange is Compare as etcd evaluates it: over the KeyValues a
// Range returns.
func compareByRange(t *testing.T, r mvcc.Reader, c *pb.Compare) bool {
	t.Helper()
	rr, err := r.Range(c.Key, RangeEnd(c.RangeEnd), mvcc.RangeOptions{})
	if err != nil {
		t.Fatalf("range: %v", err)
	}
	if len(rr.KVs) == 0 {
		return compareKV(c, &mvccpb.KeyValue{})
	}
	for i := range rr.KVs {
		if !compareKV(c, &rr.KVs[i]) {
			return false
		}
	}
	return true
}
