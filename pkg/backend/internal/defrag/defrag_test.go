package defrag

import (
	"errors"
	"testing"
	"time"
)

func TestJournalHoldsWritersWhenFull(t *testing.T) {
	JournalLimit = 10
	defer func() { JournalLimit = JournalMax }()
	j := NewJournal[int]()
	j.Add([]int{1, 2}, 11) // past the limit
	if h := j.Headroom(); h != 0 {
		t.Errorf("headroom of a full journal %v, want 0", h)
	}
	waited := make(chan struct{})
	go func() { j.WaitRoom(); close(waited) }()
	select {
	case <-waited:
		t.Fatal("WaitRoom returned while the journal is full")
	case <-time.After(50 * time.Millisecond):
	}
	ops, n := j.Drain()
	if len(ops) != 2 || n != 11 || j.Peak() != 11 {
		t.Fatalf("drained %v (%d bytes), peak %d", ops, n, j.Peak())
	}
	<-waited
	if h := j.Headroom(); h != 1 {
		t.Errorf("headroom of an empty journal %v, want 1", h)
	}
	j.Add([]int{3}, 20)
	done := make(chan struct{})
	go func() { j.WaitRoom(); close(done) }()
	j.End() // releases writers even though nothing was drained
	<-done
}

func TestReplayUnlockedRounds(t *testing.T) {
	j := NewJournal[int]()
	var st Stats
	// Each round finds LockedReplay bytes or more: ReplayRounds rounds.
	rounds := 0
	j.Add([]int{0}, LockedReplay)
	err := ReplayUnlocked(j, nil, &st, func(ops []int, _ *Pacer) error {
		rounds++
		j.Add([]int{rounds}, LockedReplay)
		return nil
	})
	if err != nil || st.Rounds != ReplayRounds || rounds != ReplayRounds {
		t.Fatalf("rounds %d (stats %+v), %v; want %d", rounds, st, err, ReplayRounds)
	}
	// A small round is the last.
	st = Stats{}
	j.Drain()
	j.Add([]int{1}, 10)
	if err := ReplayUnlocked(j, nil, &st, func([]int, *Pacer) error { return nil }); err != nil || st.Rounds != 1 || st.Replayed != 1 {
		t.Fatalf("stats %+v, %v", st, err)
	}
	boom := errors.New("boom")
	if err := ReplayUnlocked(j, nil, &Stats{}, func([]int, *Pacer) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("err %v", err)
	}
}

func TestPacerSleepsInProportion(t *testing.T) {
	var nilPacer *Pacer
	nilPacer.Add(CopyStep) // a nil pacer does not throttle
	nilPacer.Restart()
	p := NewPacer(func() float64 { return 1 })
	p.since = time.Now().Add(-2 * time.Millisecond) // the step took ~2 ms
	p.Add(CopyStep)
	if p.Slept() < time.Duration(CopyPause)*2*time.Millisecond {
		t.Errorf("slept %v after a 2 ms step, want at least %v", p.Slept(), time.Duration(CopyPause)*2*time.Millisecond)
	}
	q := NewPacer(func() float64 { return 0 }) // a full journal: no pause
	q.since = time.Now().Add(-time.Second)
	q.Add(CopyStep)
	if q.Slept() != 0 {
		t.Errorf("slept %v with no headroom", q.Slept())
	}
}
