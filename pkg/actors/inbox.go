package actors

import "sync"

// Inbox is an unbounded mailbox. Senders never block, so two actors that
// feed each other (the raft driver and its storage threads) cannot deadlock;
// the flow is bounded upstream instead: raft's flow control (uncommitted
// entries, unacknowledged committed bytes handed to the applier, appends in
// flight to a follower) and the API's refusal of proposals once 5000
// entries wait to be applied. raftnode.Node documents the bound of each of
// its mailboxes.
type Inbox[T any] struct {
	mu    sync.Mutex
	items []T
	spare []T
	ready chan struct{}
}

// NewInbox returns an empty inbox.
func NewInbox[T any]() *Inbox[T] {
	return &Inbox[T]{ready: make(chan struct{}, 1)}
}

// Put enqueues items and wakes the receiver.
func (in *Inbox[T]) Put(items ...T) {
	if len(items) == 0 {
		return
	}
	in.mu.Lock()
	in.items = append(in.items, items...)
	in.mu.Unlock()
	select {
	case in.ready <- struct{}{}:
	default:
	}
}

// Ready receives a value when the inbox may hold items.
func (in *Inbox[T]) Ready() <-chan struct{} { return in.ready }

// Take returns everything queued, oldest first. The returned slice is owned by
// the caller until the next Take.
func (in *Inbox[T]) Take() []T {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := in.items
	clear(in.spare)
	in.items = in.spare[:0]
	in.spare = out
	return out
}

// Len returns how many items are queued (for metrics: it takes the lock).
func (in *Inbox[T]) Len() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.items)
}
