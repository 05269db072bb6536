// Package readview lets a backend's readers share one engine read
// transaction between commits, as etcd's backend does (ConcurrentReadTx):
// beginning and ending a transaction per reader costs more than a one-key
// read itself (bbolt's beginTx and rollback, Badger's read watermark).
//
// A shared view is begun by the first reader after a commit and ended by the
// last reader after the next writer retired it. A writer calls Block before
// it commits and Unblock after: Block retires the current view, and while
// any writer is blocked no view is shared, so a view is never older than
// the last commit that finished before the reader asked for it. Readers
// that ask while a writer is blocked get a transaction of their own, as
// they would without the cache.
//
// Block also matters for bbolt: a commit that grows the file remaps it and
// waits for every open read transaction, so a view the cache kept open
// across a commit would deadlock it. Retired views are held only by the
// readers still using them, which end them when they are done.
package readview

import (
	"sync"
	"sync/atomic"
)

// View is an engine read transaction and its references.
type View[T any] struct {
	Tx   T
	refs atomic.Int64
	end  func(T)
}

// acquire adds a reference unless the view has ended.
func (v *View[T]) acquire() bool {
	for {
		n := v.refs.Load()
		if n == 0 {
			return false
		}
		if v.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// Release drops one reference; the last one ends the transaction.
func (v *View[T]) Release() {
	switch n := v.refs.Add(-1); {
	case n == 0:
		v.end(v.Tx)
	case n < 0:
		panic("readview: Release of an ended view")
	}
}

// Cache holds the shared view of one engine. The zero value is ready.
type Cache[T any] struct {
	cur atomic.Pointer[View[T]]
	// mu serialises beginning a shared view with Block, so that no view is
	// begun while a writer is blocked.
	mu      sync.Mutex
	blocked int
}

// Get returns a view of the last commit with a reference for the caller,
// who must Release it. begin starts an engine read transaction and end
// finishes one; Get calls begin when no view is shared. A view begun while
// a writer is blocked is the caller's alone.
func (c *Cache[T]) Get(begin func() (T, error), end func(T)) (*View[T], error) {
	if v := c.cur.Load(); v != nil && v.acquire() {
		return v, nil
	}
	c.mu.Lock()
	if v := c.cur.Load(); v != nil && v.acquire() {
		c.mu.Unlock()
		return v, nil
	}
	if c.blocked > 0 {
		c.mu.Unlock()
		return newView(begin, end, 1)
	}
	// Begun under mu: a writer's Block waits for it, so the view cannot
	// miss a commit that starts meanwhile.
	v, err := newView(begin, end, 2) // the cache's reference and the caller's
	if err == nil {
		c.cur.Store(v)
	}
	c.mu.Unlock()
	return v, err
}

func newView[T any](begin func() (T, error), end func(T), refs int64) (*View[T], error) {
	tx, err := begin()
	if err != nil {
		return nil, err
	}
	v := &View[T]{Tx: tx, end: end}
	v.refs.Store(refs)
	return v, nil
}

// Block retires the shared view and shares none until the matching
// Unblock. A writer calls it before it commits; so do Close and anything
// that replaces the engine's files.
func (c *Cache[T]) Block() {
	c.mu.Lock()
	c.blocked++
	v := c.cur.Swap(nil)
	c.mu.Unlock()
	if v != nil {
		v.Release()
	}
}

// Unblock ends a Block; once no writer is blocked the next Get begins a
// shared view again.
func (c *Cache[T]) Unblock() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.blocked--
	if c.blocked < 0 {
		panic("readview: Unblock without Block")
	}
}

// WriteLock is a backend's write lock over its Cache: holding it
// serialises the writers and blocks the cache (Block) until Unlock. Every
// path that commits to the engine or replaces its files holds it, so none
// can keep a shared view open across its commit by forgetting to block.
// Views must be set before the first Lock.
type WriteLock[T any] struct {
	Views *Cache[T]
	mu    sync.Mutex
}

// Lock takes the write lock and blocks the cache.
func (l *WriteLock[T]) Lock() {
	l.mu.Lock()
	l.Views.Block()
}

// Unlock unblocks the cache and releases the write lock.
func (l *WriteLock[T]) Unlock() {
	l.Views.Unblock()
	l.mu.Unlock()
}
