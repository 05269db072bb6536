package raftnode

import (
	"testing"
	"time"
)

func TestHeartbeatWatch(t *testing.T) {
	t0 := time.Unix(1000, 0)
	w := newHeartbeatWatch(200 * time.Millisecond)
	steps := []struct {
		peer uint64
		at   time.Duration
		late bool
		by   time.Duration
		// reset before this step
		reset bool
	}{
		{peer: 2, at: 0},                      // first to 2: never late
		{peer: 3, at: 50 * time.Millisecond},  // first to 3
		{peer: 2, at: 100 * time.Millisecond}, // 100ms after the last
		{peer: 2, at: 300 * time.Millisecond}, // 200ms: at the limit, not late
		{peer: 2, at: 550 * time.Millisecond, late: true, by: 50 * time.Millisecond},
		{peer: 3, at: 600 * time.Millisecond, late: true, by: 350 * time.Millisecond},
		{peer: 2, at: 5 * time.Second, reset: true}, // a new term starts afresh
		{peer: 2, at: 5100 * time.Millisecond},
	}
	for i, s := range steps {
		if s.reset {
			w.reset()
		}
		late, by := w.sent(s.peer, t0.Add(s.at))
		if late != s.late || by != s.by {
			t.Errorf("step %d (peer %d at %v): late %v by %v, want %v by %v", i, s.peer, s.at, late, by, s.late, s.by)
		}
	}
}
