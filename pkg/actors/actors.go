// Package actors is kvd's actor contract: an actor owns its state, runs one
// loop, and talks to others through bounded channels. This package holds the
// pieces every actor shares: lifecycle under fx, and mailbox draining.
package actors

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.uber.org/fx"
	"go.uber.org/zap"
)

// Actor is one goroutine's worth of work. Run returns when ctx is cancelled
// (with nil or ctx.Err()) or when the actor fails (with the reason).
type Actor interface {
	Run(ctx context.Context) error
}

// Func adapts a function to Actor.
type Func func(ctx context.Context) error

// Run implements Actor.
func (f Func) Run(ctx context.Context) error { return f(ctx) }

// Group runs actors and stops them together. The first actor to fail cancels
// the others and calls onFail once; a failed actor stops the whole member, it
// never wedges silently.
type Group struct {
	lg     *zap.Logger
	onFail func(error)

	mu      sync.Mutex
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	failed  error
	stopped bool
}

// NewGroup returns a group whose actors run under a context cancelled by Stop.
func NewGroup(lg *zap.Logger, onFail func(error)) *Group {
	ctx, cancel := context.WithCancel(context.Background())
	return &Group{lg: lg, onFail: onFail, ctx: ctx, cancel: cancel}
}

// Go starts an actor.
func (g *Group) Go(name string, a Actor) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		err := a.Run(g.ctx)
		if err == nil || errors.Is(err, context.Canceled) && g.ctx.Err() != nil {
			return
		}
		g.fail(fmt.Errorf("actor %s: %w", name, err))
	}()
}

func (g *Group) fail(err error) {
	g.mu.Lock()
	first := g.failed == nil && !g.stopped
	if g.failed == nil {
		g.failed = err
	}
	g.mu.Unlock()
	if !first {
		return
	}
	g.lg.Error("actor failed; stopping member", zap.Error(err))
	g.cancel()
	if g.onFail != nil {
		g.onFail(err)
	}
}

// Context is cancelled when the group stops or an actor fails.
func (g *Group) Context() context.Context { return g.ctx }

// Err reports the first failure, if any.
func (g *Group) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.failed
}

// Stop cancels every actor and waits for them to return.
func (g *Group) Stop() error {
	g.mu.Lock()
	g.stopped = true
	g.mu.Unlock()
	g.cancel()
	g.wg.Wait()
	return g.Err()
}

// Hook registers the group's Stop on an fx lifecycle.
func (g *Group) Hook(lc fx.Lifecycle) {
	lc.Append(fx.Hook{OnStop: func(context.Context) error {
		// A failure was already logged and reported through onFail.
		_ = g.Stop()
		return nil
	}})
}

// Drain appends to batch every message already waiting in ch, up to max in
// total, without blocking: the way an actor turns a burst into one batch.
func Drain[T any](ch <-chan T, batch []T, max int) []T {
	for len(batch) < max {
		select {
		case m, ok := <-ch:
			if !ok {
				return batch
			}
			batch = append(batch, m)
		default:
			return batch
		}
	}
	return batch
}
