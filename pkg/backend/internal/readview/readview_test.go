package readview

import (
	"sync"
	"sync/atomic"
	"testing"
)

// engine counts transactions; a transaction is the commit count it sees.
type engine struct {
	committed    atomic.Int64
	begun, ended atomic.Int64
	endedTx      sync.Map // tx id -> true
	nextID       atomic.Int64
}

type tx struct{ id, sees int64 }

func (e *engine) begin() (*tx, error) {
	e.begun.Add(1)
	return &tx{id: e.nextID.Add(1), sees: e.committed.Load()}, nil
}

func (e *engine) end(t *tx) {
	if _, dup := e.endedTx.LoadOrStore(t.id, true); dup {
		panic("transaction ended twice")
	}
	e.ended.Add(1)
}

func TestReadersShareAViewUntilAWriterBlocks(t *testing.T) {
	var e engine
	var c Cache[*tx]
	a, _ := c.Get(e.begin, e.end)
	b, _ := c.Get(e.begin, e.end)
	if a != b || e.begun.Load() != 1 {
		t.Fatalf("two readers without a commit between them: views %p %p, %d begun; want one shared", a, b, e.begun.Load())
	}
	c.Block()
	p, _ := c.Get(e.begin, e.end)
	if p == a || e.begun.Load() != 2 {
		t.Fatalf("a reader while a writer is blocked got the retired view or none of its own")
	}
	q, _ := c.Get(e.begin, e.end)
	if q == p {
		t.Fatal("a view begun while a writer is blocked was shared")
	}
	e.committed.Add(1)
	c.Unblock()
	a.Release()
	if e.ended.Load() != 0 {
		t.Fatal("the retired view ended while a reader still held it")
	}
	b.Release()
	if e.ended.Load() != 1 {
		t.Fatalf("the retired view did not end with its last reader: %d ended", e.ended.Load())
	}
	n, _ := c.Get(e.begin, e.end)
	if n == a || n.Tx.sees != 1 {
		t.Fatalf("the first reader after the commit sees commit %d, want 1", n.Tx.sees)
	}
	for _, v := range []*View[*tx]{p, q, n} {
		v.Release()
	}
	if got := e.ended.Load(); got != 3 { // a/b, p, q; n is still cached
		t.Fatalf("%d transactions ended, want 3", got)
	}
	c.Block()
	c.Unblock()
	if e.begun.Load() != e.ended.Load() {
		t.Fatalf("begun %d, ended %d after the last Block", e.begun.Load(), e.ended.Load())
	}
}

// Readers never see a view older than a commit that finished before they
// asked, and every transaction ends once.
func TestViewsAreNeverStale(t *testing.T) {
	var e engine
	var c Cache[*tx]
	var finished atomic.Int64 // commits whose Unblock returned
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				before := finished.Load()
				v, err := c.Get(e.begin, e.end)
				if err != nil {
					t.Error(err)
					return
				}
				if v.Tx.sees < before {
					t.Errorf("view sees commit %d, but commit %d had finished before Get", v.Tx.sees, before)
				}
				v.Release()
			}
		}()
	}
	for range 2000 {
		c.Block()
		n := e.committed.Add(1)
		c.Unblock()
		finished.Store(n)
	}
	close(stop)
	wg.Wait()
	c.Block()
	if e.begun.Load() != e.ended.Load() {
		t.Fatalf("begun %d, ended %d", e.begun.Load(), e.ended.Load())
	}
}

// While a writer holds the WriteLock no view is shared, and the first
// reader after Unlock begins one that sees the commit.
func TestWriteLockBlocksWhileHeld(t *testing.T) {
	var e engine
	var c Cache[*tx]
	w := WriteLock[*tx]{Views: &c}
	before, _ := c.Get(e.begin, e.end)
	w.Lock()
	p, _ := c.Get(e.begin, e.end)
	q, _ := c.Get(e.begin, e.end)
	if p == before || p == q {
		t.Fatal("a view was shared while the write lock was held")
	}
	e.committed.Add(1)
	w.Unlock()
	n, _ := c.Get(e.begin, e.end)
	if n.Tx.sees != 1 {
		t.Fatalf("the first reader after Unlock sees commit %d, want 1", n.Tx.sees)
	}
	for _, v := range []*View[*tx]{before, p, q, n} {
		v.Release()
	}
}
