// Package gate tracks the operations in flight on a backend so that Close can
// wait for them and refuse new ones.
package gate

import "sync"

// Gate counts holders. The zero value is open.
type Gate struct {
	mu     sync.Mutex
	cond   *sync.Cond
	n      int // holders that entered and have not exited
	closed bool
}

// Enter registers a holder. It returns false once Close has started; the
// caller must not proceed and must not call Exit.
func (g *Gate) Enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.n++
	return true
}

// Exit ends a holder registered by a successful Enter.
func (g *Gate) Exit() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n--
	if g.n < 0 {
		panic("gate: Exit without Enter")
	}
	if g.n == 0 && g.cond != nil {
		g.cond.Broadcast()
	}
}

// Close refuses new holders and waits until every holder has exited. It
// returns false if the gate was already closed (and then does not wait).
func (g *Gate) Close() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.closed = true
	if g.cond == nil {
		g.cond = sync.NewCond(&g.mu)
	}
	for g.n > 0 {
		g.cond.Wait()
	}
	return true
}
