// Package defrag holds what the engines' online Defrag share (see the
// Defrag comment in pkg/backend/backend.go and each engine's defrag.go):
// the protocol (Run: snapshot and journal under the writer lock, a paced
// copy, replay rounds without the lock, the last replay and the swap under
// it, cleanup on failure), the journal of the writes committed while the
// copy runs, and the pacer that throttles the copy so it yields to the live
// workload. The engines keep what differs (Target): how they snapshot,
// copy, replay, sync and swap.
package defrag

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

const (
	// JournalMax bounds the keys and values a Defrag's journal holds. Past
	// it, Update waits until Defrag drains the journal: during the copy
	// that means writers wait for the rest of the copy, as every write did
	// before Defrag went online (the last resort); once the copy is done,
	// each replay round drains it. It is memory held for the length of a
	// Defrag, sized for the throttled copy (CopyPause): it holds about 50 s
	// of a steady 5 MB/s of writes (docs/benchmarks.md's load), and the
	// pacer stops throttling as it fills (Journal.Headroom), so a copy
	// longer than that under such a load finishes at full speed rather than
	// holding writers.
	JournalMax = 256 << 20
	// ReplayRounds is how many times Defrag replays the journal without the
	// writer lock before it takes the lock for the rest.
	ReplayRounds = 4
	// LockedReplay: a replay round that found less than this many bytes is
	// the last one without the writer lock; so little replays in about a
	// millisecond.
	LockedReplay = 256 << 10
	// CopyPause throttles the copy and the replay rounds that run without
	// the writer lock, so that they yield to the live workload (issue #15):
	// after each CopyStep bytes of keys and values, the copying goroutine
	// sleeps CopyPause times as long as that step took, so it runs about
	// 1/(1+CopyPause) of the time and leaves the rest of the CPU and the
	// disk to the writers. The pause is a multiple of the step's own time,
	// not a fixed rate, so it adapts to the machine and to the load: a step
	// slowed down by the workload gets a longer pause. The cost is a longer
	// Defrag: its copy takes up to 1+CopyPause times as long as at full
	// speed under the same load (4x), and its journal grows for that long.
	// The pause shrinks as the journal fills (Journal.Headroom): a write
	// rate that would fill the journal before the throttled copy ends gets
	// a faster copy rather than writers held by a full journal. The final
	// replay under the writer lock is never throttled. Measured in
	// docs/benchmarks.md, "Online defragment".
	CopyPause = 3
	// CopyStep is the bytes of keys and values the copy handles between two
	// pauses: at full speed a few milliseconds of work.
	CopyStep = 1 << 20
)

// Knobs of the running process; an engine's tests change them.
var (
	// Hook, when set, is called by Defrag at each stage: "copy" after the
	// snapshot is open and the writer lock released, "replay" when the copy
	// is done and the snapshot released, "swap" holding the writer lock
	// just before the new store is synced and made the live one. An error
	// fails the Defrag there.
	Hook func(stage string) error
	// JournalLimit is JournalMax; tests lower it.
	JournalLimit int64 = JournalMax
	// Pause is CopyPause; tests set 0 for a full-speed copy.
	Pause float64 = CopyPause
)

// Stage calls Hook for stage.
func Stage(stage string) error {
	if Hook != nil {
		if err := Hook(stage); err != nil {
			return fmt.Errorf("defrag: %s: %w", stage, err)
		}
	}
	return nil
}

// Stats are what a Defrag did, for its log line.
type Stats struct {
	Copy, Paused     time.Duration // the copy; writers waiting for the swap
	Replayed, Rounds int
	Throttled        time.Duration // the pacer's sleeps
	JournalPeak      int64
}

// Fields are st as log fields, for the engines' "defrag done" lines.
func (st Stats) Fields() []zap.Field {
	return []zap.Field{
		zap.Duration("copy", st.Copy), zap.Duration("writers-paused", st.Paused),
		zap.Int("replayed-writes", st.Replayed), zap.Int("replay-rounds", st.Rounds),
		zap.Duration("throttled", st.Throttled), zap.Int64("journal-peak", st.JournalPeak),
	}
}

// Journal holds, in commit order, the writes of type T committed since a
// Defrag opened its snapshot, for Defrag to replay into the new store.
type Journal[T any] struct {
	limit int64
	mu    sync.Mutex
	room  *sync.Cond // signalled when ops are drained or the journal ends
	ops   []T
	bytes int64
	peak  int64 // the most bytes it held
	done  bool
}

// NewJournal starts a journal of JournalLimit bytes.
func NewJournal[T any]() *Journal[T] {
	j := &Journal[T]{limit: JournalLimit}
	j.room = sync.NewCond(&j.mu)
	return j
}

// Add appends the writes of one committed Update, n bytes of keys and
// values.
func (j *Journal[T]) Add(ops []T, n int64) {
	if len(ops) == 0 {
		return
	}
	j.mu.Lock()
	j.ops = append(j.ops, ops...)
	j.bytes += n
	j.peak = max(j.peak, j.bytes)
	j.mu.Unlock()
}

// Drain takes every write recorded so far.
func (j *Journal[T]) Drain() ([]T, int64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	ops, n := j.ops, j.bytes
	j.ops, j.bytes = nil, 0
	j.room.Broadcast()
	return ops, n
}

// WaitRoom waits while the journal is full.
func (j *Journal[T]) WaitRoom() {
	j.mu.Lock()
	for j.bytes > j.limit && !j.done {
		j.room.Wait()
	}
	j.mu.Unlock()
}

// Headroom tells a pacer how much of its pause to take: all of it while the
// journal is under a quarter full, none from three quarters, in proportion
// between.
func (j *Journal[T]) Headroom() float64 {
	j.mu.Lock()
	fill := float64(j.bytes) / float64(j.limit)
	j.mu.Unlock()
	return min(1, max(0, 1.5-2*fill))
}

// Peak is the most bytes the journal held.
func (j *Journal[T]) Peak() int64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.peak
}

// End releases the writers waiting for room; Defrag has unhooked j.
func (j *Journal[T]) End() {
	j.mu.Lock()
	j.done = true
	j.ops, j.bytes = nil, 0
	j.room.Broadcast()
	j.mu.Unlock()
}

// Pacer throttles the copy and the unlocked replay rounds of a Defrag with
// a duty cycle (see CopyPause). A nil Pacer does not throttle.
type Pacer struct {
	pause    float64
	headroom func() float64
	n        int64     // bytes since the last pause
	since    time.Time // start of the current step
	slept    time.Duration
}

// NewPacer paces at Pause, less as headroom (a Journal's) falls.
func NewPacer(headroom func() float64) *Pacer {
	return &Pacer{pause: Pause, headroom: headroom, since: time.Now()}
}

// Restart starts a step now, after a gap that is not the pacer's work.
func (p *Pacer) Restart() {
	if p != nil {
		p.n, p.since = 0, time.Now()
	}
}

// Add counts n bytes handled; at the end of a step it sleeps.
func (p *Pacer) Add(n int) {
	if p == nil || p.pause <= 0 {
		return
	}
	if p.n += int64(n); p.n < CopyStep {
		return
	}
	if d := time.Duration(float64(time.Since(p.since)) * p.pause * p.headroom()); d > 0 {
		time.Sleep(d)
		p.slept += d
	}
	p.Restart()
}

// Slept is the time the pacer slept.
func (p *Pacer) Slept() time.Duration {
	if p == nil {
		return 0
	}
	return p.slept
}

// ReplayUnlocked replays the journal into the new store without the writer
// lock, in up to ReplayRounds rounds while a round finds LockedReplay bytes
// or more, counting into st. The first round goes at the copy's pace (pc);
// a later one only if the rounds converge fast enough at that pace (this
// round has at most half the previous one's bytes), otherwise at full
// speed: writers that outpace a throttled replay would make each round
// longer than the last.
func ReplayUnlocked[T any](j *Journal[T], pc *Pacer, st *Stats, replay func(ops []T, pc *Pacer) error) error {
	rp, prev := pc, int64(-1)
	for st.Rounds < ReplayRounds {
		ops, n := j.Drain()
		st.Rounds++
		st.Replayed += len(ops)
		if prev >= 0 && n > prev/2 {
			rp = nil
		}
		prev = n
		rp.Restart()
		if err := replay(ops, rp); err != nil {
			return err
		}
		if n < LockedReplay {
			return nil
		}
	}
	return nil
}

// Target is one engine's side of a Defrag: the new store being built beside
// the live one. Its errors name the store; Run adds the stage.
type Target[T any] interface {
	// Snapshot opens a read view of the live store. Run calls it holding
	// the writer lock, so that the view and the journal start together:
	// every commit is in the view or in the journal, never both. It
	// returns the copy of the view into the new store, which Run calls
	// without the lock, and the release of the view, which Run calls once,
	// copied or not.
	Snapshot() (copy func(*Pacer) error, release func(), err error)
	// Replay writes journaled ops into the new store at pc's pace (nil:
	// full speed).
	Replay(ops []T, pc *Pacer) error
	// Sync makes the new store durable so far.
	Sync() error
	// Swap makes the synced new store the live one, on disk and in memory.
	// Run calls it holding the writer lock, after the last replay and
	// sync. Once it has made the new store live on disk it must not fail.
	Swap() error
	// Abort removes the new store after a failure before Swap succeeded.
	Abort()
}

// Run defragments online: under writeMu it opens t's snapshot and hooks a
// new journal into slot (which every Update appends to); it copies the
// snapshot at the pacer's pace and replays the journal in rounds without
// the lock, each followed by a sync so that the one under the lock writes
// little; then it takes writeMu, replays the rest, syncs, swaps, unhooks the
// journal and releases the lock. Writers wait only for that last step
// (Stats.Paused), unless the journal fills up. On an error nothing is
// swapped: the journal is unhooked and t aborted.
func Run[T any](writeMu sync.Locker, slot *atomic.Pointer[Journal[T]], t Target[T]) (st Stats, err error) {
	writeMu.Lock()
	copyFn, release, err := t.Snapshot()
	if err != nil {
		writeMu.Unlock()
		t.Abort()
		return st, fmt.Errorf("defrag: snapshot: %w", err)
	}
	j := NewJournal[T]()
	slot.Store(j)
	writeMu.Unlock()

	locked := false
	defer func() {
		if err == nil {
			return
		}
		if !locked {
			writeMu.Lock()
		}
		slot.Store(nil)
		writeMu.Unlock()
		j.End()
		t.Abort()
	}()

	pc := NewPacer(j.Headroom)
	defer func() {
		st.Throttled = pc.Slept()
		st.JournalPeak = j.Peak()
	}()
	if err := Stage("copy"); err != nil {
		release()
		return st, err
	}
	t0 := time.Now()
	err = copyFn(pc)
	release()
	if err != nil {
		return st, fmt.Errorf("defrag: copy: %w", err)
	}
	if err := t.Sync(); err != nil {
		return st, fmt.Errorf("defrag: sync after the copy: %w", err)
	}
	st.Copy = time.Since(t0)
	if err := Stage("replay"); err != nil {
		return st, err
	}
	if err := ReplayUnlocked(j, pc, &st, t.Replay); err != nil {
		return st, fmt.Errorf("defrag: replay: %w", err)
	}
	if err := t.Sync(); err != nil {
		return st, fmt.Errorf("defrag: sync after the replay: %w", err)
	}

	writeMu.Lock()
	locked = true
	t1 := time.Now()
	ops, _ := j.Drain()
	st.Replayed += len(ops)
	if err := t.Replay(ops, nil); err != nil {
		return st, fmt.Errorf("defrag: replay: %w", err)
	}
	if err := Stage("swap"); err != nil {
		return st, err
	}
	if err := t.Sync(); err != nil {
		return st, fmt.Errorf("defrag: sync before the swap: %w", err)
	}
	if err := t.Swap(); err != nil {
		return st, fmt.Errorf("defrag: swap: %w", err)
	}
	slot.Store(nil)
	j.End()
	st.Paused = time.Since(t1)
	writeMu.Unlock()
	return st, nil
}
