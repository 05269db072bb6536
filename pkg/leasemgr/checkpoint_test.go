package leasemgr

import (
	"context"
	"slices"
	"testing"
	"time"
)

func TestCheckpoints(t *testing.T) {
	m, c := newTestManager(Config{})
	m.Grant(1, 600)
	m.Grant(2, 30) // shorter than the interval: never checkpointed
	m.Grant(3, 600)
	if cps := m.Checkpoints(time.Minute); cps != nil {
		t.Fatalf("checkpoints while not primary: %v", cps)
	}
	m.Promote(0)
	if cps := m.Checkpoints(time.Minute); len(cps) != 0 {
		t.Fatalf("checkpoints of fresh leases: %v", cps)
	}
	c.advance(100*time.Second + 500*time.Millisecond)
	if _, err := m.Renew(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
	cps := m.Checkpoints(time.Minute)
	if want := []Checkpoint{{ID: 1, RemainingTTL: 500}}; !slices.Equal(cps, want) {
		t.Fatalf("checkpoints %v, want %v", cps, want)
	}
	rec, ok := m.Checkpoint(1, 500)
	if !ok || rec != (Record{ID: 1, TTL: 600, RemainingTTL: 500}) {
		t.Fatalf("Checkpoint = %+v, %v", rec, ok)
	}
	if _, ok := m.Checkpoint(9, 5); ok {
		t.Fatal("checkpoint of a missing lease applied")
	}
	if cps := m.Checkpoints(time.Minute); len(cps) != 0 {
		t.Fatalf("checkpoint proposed again without a change: %v", cps)
	}
	// A new leader starts the lease from its checkpoint.
	m.Demote()
	m.Promote(0)
	if st, _ := m.TimeToLive(1, false); st.TTL != 500 {
		t.Fatalf("TTL after re-promotion %d, want the checkpointed 500", st.TTL)
	}
	if m.CheckpointedTTL(1) != 500 {
		t.Fatal("CheckpointedTTL lost the checkpoint")
	}
	m.Checkpoint(1, 0)
	if m.CheckpointedTTL(1) != 0 {
		t.Fatal("a zero checkpoint did not clear it")
	}
}

func TestExpirerProposesCheckpoints(t *testing.T) {
	m, c := newTestManager(Config{})
	var got [][]Checkpoint
	e := NewExpirer(ExpirerConfig{
		Manager:            m,
		IsLeader:           func() bool { return true },
		Revoke:             func(context.Context, int64) error { return nil },
		CheckpointInterval: time.Minute,
		Checkpoint: func(_ context.Context, cps []Checkpoint) error {
			got = append(got, cps)
			return nil
		},
	})
	for id := int64(1); id <= MaxCheckpointBatch+5; id++ {
		m.Grant(id, 3600)
	}
	ctx := context.Background()
	e.step(ctx, 10)
	c.advance(30 * time.Second)
	e.step(ctx, 10)
	if len(got) != 0 {
		t.Fatalf("checkpoints before the interval: %d batches", len(got))
	}
	c.advance(30 * time.Second)
	e.step(ctx, 10)
	if len(got) != 2 || len(got[0]) != MaxCheckpointBatch || len(got[1]) != 5 {
		t.Fatalf("checkpoint batches %d", len(got))
	}
}
