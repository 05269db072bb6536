package entrybatch

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
)

type peers struct {
	mu       sync.Mutex
	members  []uint64
	features map[uint64]string // absent: no open stream
}

func (p *peers) Members() []uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]uint64(nil), p.members...)
}

func (p *peers) Features(id uint64) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, ok := p.features[id]
	return f, ok
}

func (p *peers) set(fn func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fn()
}

func TestGateOpensOnlyWhileEveryPeerReadsBatches(t *testing.T) {
	p := &peers{members: []uint64{1, 2, 3}, features: map[uint64]string{2: Feature, 3: "x," + Feature}}
	g := &Gate{Self: 1, Members: p.Members, Features: p.Features, Logger: zap.NewNop()}
	if !g.Open() {
		t.Fatal("closed with every peer reading batches")
	}
	for name, change := range map[string]func(){
		"a peer without the feature":  func() { p.features[3] = "other" },
		"a peer without a stream":     func() { delete(p.features, 2) },
		"a member added, not heard":   func() { p.members = append(p.members, 4) },
		"a prefix is not the feature": func() { p.features[3] = Feature + "0" },
	} {
		p.set(func() { p.members, p.features = []uint64{1, 2, 3}, map[uint64]string{2: Feature, 3: Feature} })
		p.set(change)
		if g.Open() {
			t.Errorf("%s: open", name)
		}
	}
	// A single member has nobody to wait for.
	alone := &Gate{Self: 1, Members: func() []uint64 { return []uint64{1} }, Features: p.Features}
	if !alone.Open() {
		t.Error("a single member's gate is closed")
	}
}

func TestGateRunFollowsThePeersAndEndsOff(t *testing.T) {
	p := &peers{members: []uint64{1, 2}, features: map[uint64]string{}}
	var mu sync.Mutex
	var sets []bool
	g := &Gate{Self: 1, Members: p.Members, Features: p.Features, Logger: zap.NewNop(),
		Set: func(on bool) { mu.Lock(); sets = append(sets, on); mu.Unlock() }}
	last := func() (bool, int) {
		mu.Lock()
		defer mu.Unlock()
		if len(sets) == 0 {
			return false, 0
		}
		return sets[len(sets)-1], len(sets)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- g.Run(ctx) }()
	wait := func(want bool, n int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			if on, got := last(); on == want && got == n {
				return
			}
			if time.Now().After(deadline) {
				on, got := last()
				t.Fatalf("gate set %v after %d changes, want %v after %d", on, got, want, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	time.Sleep(3 * GateInterval)
	if _, n := last(); n != 0 {
		t.Fatalf("gate set %d times with the peer silent", n)
	}
	p.set(func() { p.features[2] = Feature })
	wait(true, 1)
	p.set(func() { delete(p.features, 2) })
	wait(false, 2)
	p.set(func() { p.features[2] = Feature })
	wait(true, 3)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	wait(false, 4)
}
