package e2e

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// TestDefragOnline defragments a single member holding a few tens of MB
// while a write load runs (issue #15): every acknowledged write must be
// there afterwards with its value and revision, the data written before
// must be intact, and the db size must shrink after deletes and compaction.
// kvd's Defrag lets writes go on during its copy; etcd's stops them, which
// the test allows (it checks outcomes, not latency).
func TestDefragOnline(t *testing.T) {
	t.Parallel()
	forEachClusterEngine(t, func(t *testing.T, engine string) {
		c := harness.StartCluster(t, 1, harness.ClusterOptions{Engine: engine})
		m := c.Members()[0]
		cli := c.Client(t)
		ctx := testCtx(t)

		// 32 MiB of 1 KiB values, then half of it deleted and compacted
		// away: space for the defragment to give back.
		const keys, perTxn = 32 << 10, 64
		value := strings.Repeat("d", 1024)
		fillKey := func(i int) string { return fmt.Sprintf("fill/%06d", i) }
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for lo := w * perTxn; lo < keys; lo += 4 * perTxn {
					ops := make([]clientv3.Op, 0, perTxn)
					for i := lo; i < lo+perTxn; i++ {
						ops = append(ops, clientv3.OpPut(fillKey(i), value))
					}
					if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("fill: %v", err)
		}
		_, err := cli.Delete(ctx, fillKey(0), clientv3.WithRange(fillKey(keys/2)))
		mustOK(t, "delete half", err)
		r, err := cli.Get(ctx, "fill-probe")
		mustOK(t, "head revision", err)
		_, err = cli.Compact(ctx, r.Header.Revision, clientv3.WithCompactPhysical())
		mustOK(t, "compact", err)
		st, err := c.Status(m, 10*time.Second)
		mustOK(t, "status before defrag", err)
		before := st.DbSize
		t.Logf("%s: db size %d (in use %d) before defragmenting", engine, st.DbSize, st.DbSizeInUse)

		load := startWriteLoad(cli, "load/", 4)
		defer load.stop()
		load.waitAcked(t, "writes before the first defragment", 100, 20*time.Second)
		for i := range 3 {
			start, n := time.Now(), load.count()
			_, err := cli.Defragment(ctx, m.Endpoint())
			mustOK(t, fmt.Sprintf("defragment %d", i), err)
			t.Logf("%s: defragment %d took %v; %d writes acknowledged meanwhile", engine, i, time.Since(start).Round(time.Millisecond), load.count()-n)
			load.waitAcked(t, fmt.Sprintf("writes after defragment %d", i), 100, 20*time.Second)
		}
		acked := load.stop()
		if len(acked) == 0 {
			t.Fatal("no write acknowledged")
		}
		verifyAckedOn(t, c, m, "load/", acked)

		g, err := cli.Get(ctx, "fill/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		mustOK(t, "read back the fill", err)
		if len(g.Kvs) != keys/2 || string(g.Kvs[0].Key) != fillKey(keys/2) {
			t.Fatalf("after defragment: %d fill keys from %q, want %d from %q", len(g.Kvs), g.Kvs[0].Key, keys/2, fillKey(keys/2))
		}
		v, err := cli.Get(ctx, fillKey(keys-1))
		mustOK(t, "read back the last fill key", err)
		if len(v.Kvs) != 1 || string(v.Kvs[0].Value) != value {
			t.Fatalf("after defragment: %s lost its value", fillKey(keys-1))
		}

		st, err = c.Status(m, 10*time.Second)
		mustOK(t, "status after defrag", err)
		t.Logf("%s: db size %d (in use %d) after %d acknowledged writes and 3 defragments", engine, st.DbSize, st.DbSizeInUse, len(acked))
		if st.DbSize >= before {
			t.Errorf("%s: db size %d after defragment, %d before: want it to shrink", engine, st.DbSize, before)
		}
		if st.DbSizeInUse > st.DbSize {
			t.Errorf("%s: db size in use %d above db size %d", engine, st.DbSizeInUse, st.DbSize)
		}
	})
}
