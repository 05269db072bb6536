package compactor

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock moves only when told to.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeWaiter
	changed chan struct{} // closed and replaced when waiters changes
}

type fakeWaiter struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), changed: make(chan struct{})}
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) After(d time.Duration) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- f.now
		return ch
	}
	f.waiters = append(f.waiters, fakeWaiter{at: f.now.Add(d), ch: ch})
	close(f.changed)
	f.changed = make(chan struct{})
	return ch
}

// Advance moves the clock and fires the timers due.
func (f *fakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	kept := f.waiters[:0]
	for _, w := range f.waiters {
		if !w.at.After(f.now) {
			w.ch <- f.now
		} else {
			kept = append(kept, w)
		}
	}
	f.waiters = kept
}

// BlockUntil waits until n timers are pending.
func (f *fakeClock) BlockUntil(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		f.mu.Lock()
		got, ch := len(f.waiters), f.changed
		f.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("%d timers pending after 5s, want %d", got, n)
		}
	}
}

// harness runs a compactor over a fake clock, revision, leadership and
// Compact that records what it was asked.
type harness struct {
	t      *testing.T
	clk    *fakeClock
	rev    atomic.Int64
	leader atomic.Bool
	mu     sync.Mutex
	err    error // what Compact returns
	asked  []int64
	c      *Compactor
}

func newHarness(t *testing.T, cfg Config) *harness {
	h := &harness{t: t, clk: newFakeClock()}
	h.rev.Store(1)
	h.leader.Store(true)
	cfg.Clock = h.clk
	cfg.Logger = zaptest.NewLogger(t)
	cfg.Rev = h.rev.Load
	cfg.IsLeader = h.leader.Load
	cfg.Compact = func(_ context.Context, rev int64) error {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.asked = append(h.asked, rev)
		return h.err
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.c = c
	c.Start()
	t.Cleanup(c.Stop)
	return h
}

// tick lets the loop reach its timer, sets the revision, moves the clock by
// d and waits until the loop is back at its timer: any compaction of that
// tick has been asked by then.
func (h *harness) tick(rev int64, d time.Duration) {
	h.t.Helper()
	h.clk.BlockUntil(h.t, 1)
	h.rev.Store(rev)
	h.clk.Advance(d)
	h.clk.BlockUntil(h.t, 1)
}

func (h *harness) setErr(err error) {
	h.mu.Lock()
	h.err = err
	h.mu.Unlock()
}

// take returns the compactions asked since the last take.
func (h *harness) take() []int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	a := h.asked
	h.asked = nil
	return a
}

func (h *harness) want(what string, want ...int64) {
	h.t.Helper()
	got := h.take()
	if len(got) != len(want) {
		h.t.Fatalf("%s: compactions %v, want %v", what, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			h.t.Fatalf("%s: compactions %v, want %v", what, got, want)
		}
	}
}

func TestIntervals(t *testing.T) {
	for _, tc := range []struct {
		period, compact, retry time.Duration
		keep                   int
	}{
		{2 * time.Second, 2 * time.Second, 200 * time.Millisecond, 11},
		{5 * time.Minute, 5 * time.Minute, 30 * time.Second, 11},
		{59 * time.Minute, 59 * time.Minute, 354 * time.Second, 11},
		{time.Hour, time.Hour, 6 * time.Minute, 11},
		{24 * time.Hour, time.Hour, 6 * time.Minute, 241},
	} {
		if c, r, k := CompactInterval(tc.period), RetryInterval(tc.period), retentions(tc.period); c != tc.compact || r != tc.retry || k != tc.keep {
			t.Errorf("%s: compact every %s, sample every %s, keep %d; want %s, %s, %d", tc.period, c, r, k, tc.compact, tc.retry, tc.keep)
		}
	}
}

// TestPeriodicMinutes is etcd's TestPeriodicMinutes: with a 5-minute
// retention, the first compaction comes after 5 minutes at the revision of
// the start, then one every 5 minutes at the revision of 5 minutes before.
func TestPeriodicMinutes(t *testing.T) {
	period := 5 * time.Minute
	h := newHarness(t, Config{Mode: ModePeriodic, Period: period})
	tick := RetryInterval(period)
	// The revision grows by one every tick: at tick i it is i+1.
	rev := int64(1)
	for i := 0; i < 9; i++ {
		rev++
		h.tick(rev, tick)
	}
	h.want("before one period")
	rev++
	h.tick(rev, tick)
	h.want("after one period", 1)
	for p := 1; p <= 4; p++ {
		for i := 0; i < 9; i++ {
			rev++
			h.tick(rev, tick)
		}
		h.want("within the period")
		rev++
		h.tick(rev, tick)
		// The oldest sample of the window: the one taken one period and
		// one tick ago (this tick's is taken after the compaction).
		h.want("after the period", int64(p*10))
	}
}

// TestPeriodicHourly: a retention above an hour samples every 6 minutes and
// compacts every hour, at the revision of one retention ago (etcd's
// TestPeriodicHourly).
func TestPeriodicHourly(t *testing.T) {
	period := 2 * time.Hour
	h := newHarness(t, Config{Mode: ModePeriodic, Period: period})
	tick := RetryInterval(period)
	if tick != 6*time.Minute {
		t.Fatalf("tick %s", tick)
	}
	rev := int64(1)
	for i := 0; i < 19; i++ {
		rev++
		h.tick(rev, tick)
	}
	h.want("before two hours")
	rev++
	h.tick(rev, tick)
	h.want("after two hours", 1)
	for hour := 1; hour <= 3; hour++ {
		for i := 0; i < 9; i++ {
			rev++
			h.tick(rev, tick)
		}
		h.want("within the hour")
		rev++
		h.tick(rev, tick)
		// The oldest of 21 samples, taken 2h and one tick before.
		h.want("every hour", int64(hour*10))
	}
}

// TestPeriodicSkipUnchanged: no compaction again at the same revision, and
// the one at the next change is not delayed by the skip.
func TestPeriodicSkipUnchanged(t *testing.T) {
	period := time.Minute
	h := newHarness(t, Config{Mode: ModePeriodic, Period: period})
	tick := RetryInterval(period)
	for i := 0; i < 10; i++ {
		h.tick(1, tick)
	}
	h.want("first", 1)
	for i := 0; i < 25; i++ {
		h.tick(1, tick)
	}
	h.want("no writes")
	// Writes now: the window holds revision 1 for one more period.
	rev := int64(1)
	for i := 0; i < 10; i++ {
		rev++
		h.tick(rev, tick)
	}
	h.want("a period of writes")
	h.tick(rev+1, tick)
	h.want("the window still starts before the writes")
	h.tick(rev+2, tick)
	h.want("the first write a period and a tick ago", 2)
}

// TestPeriodicRetry: a failed compaction is tried again at the next tick; an
// already compacted revision counts as done.
func TestPeriodicRetry(t *testing.T) {
	period := time.Minute
	h := newHarness(t, Config{Mode: ModePeriodic, Period: period})
	tick := RetryInterval(period)
	h.setErr(errors.New("etcdserver: request timed out"))
	rev := int64(1)
	for i := 0; i < 10; i++ {
		rev++
		h.tick(rev, tick)
	}
	h.want("first, failing", 1)
	rev++
	h.tick(rev, tick)
	h.want("retried at the next tick", 1)
	h.setErr(rpctypes.ErrGRPCCompacted)
	rev++
	h.tick(rev, tick)
	h.want("compacted already, the window moved on", 2)
	rev++
	h.tick(rev, tick)
	h.want("done: next one a period later")
}

// TestPeriodicLeaderOnly: a follower samples but does not compact; once
// leader, it compacts at the next tick at the revision of one period ago.
func TestPeriodicLeaderOnly(t *testing.T) {
	period := time.Minute
	h := newHarness(t, Config{Mode: ModePeriodic, Period: period})
	tick := RetryInterval(period)
	h.leader.Store(false)
	rev := int64(1)
	for i := 0; i < 30; i++ {
		rev++
		h.tick(rev, tick)
	}
	h.want("follower")
	h.leader.Store(true)
	rev++
	h.tick(rev, tick)
	h.want("leader: the sample of a period and a tick ago", rev-11)
	h.leader.Store(false)
	for i := 0; i < 20; i++ {
		rev++
		h.tick(rev, tick)
	}
	h.want("follower again")
}

// TestRevision is etcd's TestRevision: every interval, compact at the
// current revision minus the retention, not twice at the same one.
func TestRevision(t *testing.T) {
	h := newHarness(t, Config{Mode: ModeRevision, Retention: 10})
	iv := DefaultRevisionInterval
	h.tick(5, iv)
	h.want("below the retention")
	h.tick(10, iv)
	h.want("at the retention")
	h.tick(11, iv)
	h.want("one past", 1)
	h.tick(11, iv)
	h.want("unchanged")
	h.tick(11, iv/2)
	h.tick(300, iv/2)
	h.want("every five minutes", 290)
	h.tick(400, iv-time.Nanosecond)
	h.want("not before the interval")
	h.tick(400, time.Nanosecond)
	h.want("at the interval", 390)
}

// TestRevisionRetryAndLeaderOnly: a failure is retried at the next interval,
// ErrCompacted counts as done, a follower never compacts.
func TestRevisionRetryAndLeaderOnly(t *testing.T) {
	h := newHarness(t, Config{Mode: ModeRevision, Retention: 100, RevisionInterval: time.Second})
	h.setErr(errors.New("etcdserver: no leader"))
	h.tick(150, time.Second)
	h.want("failing", 50)
	h.tick(150, time.Second)
	h.want("retried", 50)
	h.setErr(rpctypes.ErrGRPCCompacted)
	h.tick(150, time.Second)
	h.want("compacted already", 50)
	h.tick(150, time.Second)
	h.want("done")
	h.leader.Store(false)
	for r := int64(200); r < 210; r++ {
		h.tick(r, time.Second)
	}
	h.want("follower")
	h.leader.Store(true)
	h.tick(210, time.Second)
	h.want("leader again", 110)
}

func TestNew(t *testing.T) {
	ok := func(context.Context, int64) error { return nil }
	base := Config{Rev: func() int64 { return 0 }, IsLeader: func() bool { return true }, Compact: ok}
	for _, tc := range []struct {
		name string
		mode string
		p    time.Duration
		r    int64
	}{
		{"unknown mode", "daily", time.Hour, 0},
		{"periodic below 10ns", ModePeriodic, 9, 0},
		{"negative period", ModePeriodic, -time.Hour, 0},
		{"revision zero", ModeRevision, 0, 0},
	} {
		cfg := base
		cfg.Mode, cfg.Period, cfg.Retention = tc.mode, tc.p, tc.r
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	c, err := New(Config{Mode: ModeRevision, Retention: 1, Rev: base.Rev, IsLeader: base.IsLeader, Compact: ok})
	if err != nil || c.RevisionInterval() != DefaultRevisionInterval {
		t.Fatalf("revision: %v, interval %v", err, c)
	}
	c.Stop() // never started
}

// TestStopCancelsCompaction: Stop ends a compaction in flight and the loop.
func TestStopCancelsCompaction(t *testing.T) {
	clk := newFakeClock()
	entered := make(chan struct{})
	c, err := New(Config{Mode: ModeRevision, Retention: 1, RevisionInterval: time.Second, Clock: clk,
		Rev: func() int64 { return 5 }, IsLeader: func() bool { return true },
		Compact: func(ctx context.Context, _ int64) error {
			close(entered)
			<-ctx.Done()
			return ctx.Err()
		}})
	if err != nil {
		t.Fatal(err)
	}
	c.Start()
	clk.BlockUntil(t, 1)
	clk.Advance(time.Second)
	<-entered
	c.Stop()
}
