package mvcc

import (
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/backend/enginetest"
)

// engine opens a backend in dir; every store test runs on each engine.
type engine struct {
	name string
	open func(dir string) (backend.Backend, error)
}

var engines = func() []engine {
	var es []engine
	for _, name := range enginetest.Names {
		es = append(es, engine{name, func(dir string) (backend.Backend, error) { return enginetest.Open(name, dir) }})
	}
	return es
}()

func forEachEngine(t *testing.T, f func(t *testing.T, e engine)) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) { f(t, e) })
	}
}

// testStore is a store with its backend and directory, reopenable.
type testStore struct {
	*Store
	t   testing.TB
	e   engine
	dir string
	cfg config
	be  backend.Backend
}

func newTestStore(t testing.TB, e engine) *testStore {
	t.Helper()
	return newTestStoreConfig(t, e, config{compactBatchLimit: defaultCompactBatchLimit})
}

func newTestStoreConfig(t testing.TB, e engine, cfg config) *testStore {
	t.Helper()
	ts := &testStore{t: t, e: e, dir: t.TempDir(), cfg: cfg}
	ts.open()
	t.Cleanup(ts.close)
	return ts
}

func (ts *testStore) open() {
	ts.t.Helper()
	be, err := ts.e.open(ts.dir)
	if err != nil {
		ts.t.Fatalf("open %s backend: %v", ts.e.name, err)
	}
	cfg := ts.cfg
	if cfg.batchBytes == 0 {
		// The badger test engine's updates hold 4 MiB.
		cfg.batchBytes = 1 << 20
	}
	s, err := open(be, testLogger(ts.t), cfg)
	if err != nil {
		_ = be.Close()
		ts.t.Fatalf("open store: %v", err)
	}
	ts.Store, ts.be = s, be
}

func (ts *testStore) close() {
	if ts.Store == nil {
		return
	}
	if err := ts.Store.Close(); err != nil {
		ts.t.Errorf("close store: %v", err)
	}
	if err := ts.be.Close(); err != nil {
		ts.t.Errorf("close backend: %v", err)
	}
	ts.Store, ts.be = nil, nil
}

// crash stops the store without committing its buffered writes, as if the
// process died, and closes the backend.
func (ts *testStore) crash() {
	ts.t.Helper()
	ts.Store.closeOnce.Do(func() {
		ts.Store.compactor.stop()
		ts.Store.flusher.stop()
	})
	if err := ts.be.Close(); err != nil {
		ts.t.Errorf("close backend: %v", err)
	}
	ts.Store, ts.be = nil, nil
}

func (ts *testStore) reopen() {
	ts.t.Helper()
	ts.close()
	ts.open()
}

// apply runs fn in one Apply and fails the test on error.
func (ts *testStore) apply(fn func(b *Batch)) {
	ts.t.Helper()
	if err := ts.Apply(func(b *Batch) error { fn(b); return nil }); err != nil {
		ts.t.Fatalf("apply: %v", err)
	}
}

// put writes key=value in its own batch and txn and returns the revision.
func (ts *testStore) put(key, value string) int64 {
	ts.t.Helper()
	var rev int64
	ts.apply(func(b *Batch) {
		tw := b.Write()
		rev = tw.Put([]byte(key), []byte(value), 0)
		tw.End()
	})
	return rev
}

func (ts *testStore) del(key, end string) (n, rev int64) {
	ts.t.Helper()
	ts.apply(func(b *Batch) {
		tw := b.Write()
		var e []byte
		if end != "" {
			e = []byte(end)
		}
		n, rev = tw.DeleteRange([]byte(key), e)
		tw.End()
	})
	return n, rev
}

// compact compacts at rev in its own batch and waits for the physical
// compaction.
func (ts *testStore) compact(rev int64) {
	ts.t.Helper()
	var done <-chan struct{}
	ts.apply(func(b *Batch) {
		var err error
		if done, err = b.Compact(rev); err != nil {
			ts.t.Fatalf("compact at %d: %v", rev, err)
		}
	})
	waitClosed(ts.t, done, fmt.Sprintf("compaction at %d", rev))
}

func waitClosed(t testing.TB, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// kv is a comparable mvccpb.KeyValue.
type kv struct {
	Key, Value                    string
	Create, Mod, Version, LeaseID int64
}

func (k kv) String() string {
	return fmt.Sprintf("%s=%s(c%d m%d v%d l%d)", k.Key, k.Value, k.Create, k.Mod, k.Version, k.LeaseID)
}

func toKVs(res *RangeResult) []kv {
	var out []kv
	for i := range res.KVs {
		p := &res.KVs[i]
		out = append(out, kv{string(p.Key), string(p.Value), p.CreateRevision, p.ModRevision, p.Version, p.Lease})
	}
	return out
}

var all = []byte{0} // with key []byte{0}: the whole keyspace

// rangeAt reads everything at rev through a fresh read view.
func (ts *testStore) rangeAt(key, end []byte, ro RangeOptions) ([]kv, *RangeResult, error) {
	r := ts.Read()
	defer r.End()
	res, err := r.Range(key, end, ro)
	if err != nil {
		return nil, res, err
	}
	return toKVs(res), res, nil
}

func (ts *testStore) mustRange(key, end []byte, ro RangeOptions) []kv {
	ts.t.Helper()
	kvs, _, err := ts.rangeAt(key, end, ro)
	if err != nil {
		ts.t.Fatalf("range %q-%q %+v: %v", key, end, ro, err)
	}
	return kvs
}

// countKeyBucket counts the Key bucket's entries with main revision <= rev.
func (ts *testStore) countKeyBucket(rev int64) int {
	ts.t.Helper()
	tx, err := ts.be.ReadTx()
	if err != nil {
		ts.t.Fatal(err)
	}
	defer tx.Release()
	n := 0
	end := make([]byte, 8)
	for i := range 8 {
		end[i] = byte(uint64(rev+1) >> (56 - 8*i))
	}
	if err := tx.Range(backend.Key, nil, end, 0, func(k, _ []byte) bool { n++; return true }); err != nil {
		ts.t.Fatal(err)
	}
	return n
}

func eqKVs(a, b []kv) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// testLogger logs through t in tests; benchmarks stay quiet.
func testLogger(t testing.TB) *zap.Logger {
	if _, ok := t.(*testing.B); ok {
		return zap.NewNop()
	}
	return zaptest.NewLogger(t)
}
