package api

import (
	"sync"
	"sync/atomic"
	"time"
)

// timeoutGrain is how long proposals share one timeout: those that start
// within it give up together.
const timeoutGrain = 100 * time.Millisecond

// sharedTimeouts times proposals out without a timer and a context per
// proposal (etcd's context.WithTimeout per request allocates a context, a
// timer and a channel and links the context to its parent): the proposals
// that start within one timeoutGrain share one channel, closed between the
// request timeout and the request timeout plus timeoutGrain after each of
// them started, never before.
type sharedTimeouts struct {
	timeout time.Duration
	cur     atomic.Pointer[timeoutShare]
	mu      sync.Mutex // serialises making a new share
}

type timeoutShare struct {
	expired chan struct{} // closed when its proposals time out
	// joinBy is when the share stops taking proposals: timeoutGrain after
	// it was made. A clock check, not a second timer: a "full" timer that
	// fired late would let a proposal join a share whose close is already
	// less than the request timeout away.
	joinBy time.Time
}

func (sh *timeoutShare) open() bool { return sh != nil && time.Now().Before(sh.joinBy) }

// expiry returns the channel closed when a proposal starting now has run
// out of the request timeout.
func (t *sharedTimeouts) expiry() <-chan struct{} {
	if sh := t.cur.Load(); sh.open() {
		return sh.expired
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if sh := t.cur.Load(); sh.open() {
		return sh.expired
	}
	// joinBy is taken before the timer starts, so the close comes at
	// least the request timeout after any proposal that joined in time.
	sh := &timeoutShare{expired: make(chan struct{}), joinBy: time.Now().Add(timeoutGrain)}
	time.AfterFunc(t.timeout+timeoutGrain, func() { close(sh.expired) })
	t.cur.Store(sh)
	return sh.expired
}
