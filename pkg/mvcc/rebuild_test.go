package mvcc

import (
	"fmt"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.uber.org/goleak"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/index"
)

// A damaged record in the middle of the Key bucket fails the open with the
// revision it sits at, after more than one chunk went to the index builder,
// and the builder goroutine ends. Damaged: a value that does not decode, or
// a sub revision no transaction can reach (the index holds 32 bits of it).
func TestRebuildIndexDamagedRecord(t *testing.T) {
	t.Run("value", func(t *testing.T) {
		testRebuildDamaged(t, index.Revision{Main: 2 * rebuildChunk}, []byte{0x0a, 0xff})
	})
	t.Run("sub revision", func(t *testing.T) {
		kv := marshalKV(&mvccpb.KeyValue{Key: []byte("k"), Value: []byte("v"), CreateRevision: 5, ModRevision: 5, Version: 1})
		testRebuildDamaged(t, index.Revision{Main: 2 * rebuildChunk, Sub: index.MaxSub + 1}, kv)
	})
}

func testRebuildDamaged(t *testing.T, bad index.Revision, value []byte) {
	forEachEngine(t, func(t *testing.T, e engine) {
		ts := newTestStore(t, e)
		const n = 3 * rebuildChunk
		for i := 0; i < n; i += 500 {
			ts.apply(func(bt *Batch) {
				for j := i; j < min(i+500, n); j++ {
					tw := bt.Write()
					tw.Put(fmt.Appendf(nil, "k%05d", j), []byte("v"), 0)
					tw.End()
				}
			})
		}
		ts.close()
		be, err := e.open(ts.dir)
		if err != nil {
			t.Fatal(err)
		}
		defer be.Close()
		err = be.Update(func(tx backend.WriteTx) error {
			return tx.Put(backend.Key, revToBytes(bad, false), value)
		})
		if err != nil {
			t.Fatal(err)
		}
		tx, err := be.ReadTx()
		if err != nil {
			t.Fatal(err)
		}
		leaks := goleak.IgnoreCurrent() // the engine's own
		_, err = rebuildIndex(tx)
		tx.Release()
		if err == nil || !strings.Contains(err.Error(), "rebuild index") || !strings.Contains(err.Error(), fmt.Sprint(bad.Main)) {
			t.Fatalf("rebuild over a damaged record: %v", err)
		}
		goleak.VerifyNone(t, leaks)
	})
}
