package raftnode

import (
	"context"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// do runs f on the driver goroutine and waits for it.
func (n *Node) do(ctx context.Context, f func()) error {
	done := make(chan struct{})
	n.ctlc.Put(func() { f(); close(done) })
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stopped:
		return ErrStopped
	}
}

// ReportUnreachable tells raft that messages to id were dropped, so it
// probes instead of streaming appends. It never blocks.
func (n *Node) ReportUnreachable(id uint64) {
	n.ctlc.Put(func() { n.rn.ReportUnreachable(id) })
}

// ReportSnapshot tells raft how sending a snapshot to id ended. It never
// blocks.
func (n *Node) ReportSnapshot(id uint64, ok bool) {
	st := raft.SnapshotFinish
	if !ok {
		st = raft.SnapshotFailure
	}
	n.ctlc.Put(func() { n.rn.ReportSnapshot(id, st) })
}

// ProposeConfChange hands a configuration change to raft; like Propose it
// returns once raft accepted or refused it. The change takes effect when its
// entry is applied.
func (n *Node) ProposeConfChange(ctx context.Context, cc raftpb.ConfChangeI) error {
	var err error
	// A held change counts as accepted; like any proposal it may still be
	// lost (leader change) and then its proposer times out.
	if derr := n.do(ctx, func() { err = n.proposeConf(func() error { return n.rn.ProposeConfChange(cc) }) }); derr != nil {
		return derr
	}
	return err
}

// Status is raft's view: role, leader, term, commit and applied indexes,
// and on the leader every member's progress.
func (n *Node) Status(ctx context.Context) (raft.Status, error) {
	var st raft.Status
	err := n.do(ctx, func() { st = n.rn.Status() })
	return st, err
}

// TransferLeadership asks the leader (this member) to hand leadership to
// to, and waits until a leader other than this member is known or ctx ends.
func (n *Node) TransferLeadership(ctx context.Context, to uint64) error {
	if err := n.do(ctx, func() { n.rn.TransferLeader(to) }); err != nil {
		return err
	}
	tick := time.NewTicker(n.cfg.TickInterval)
	defer tick.Stop()
	for {
		if l := n.Leader(); l == to {
			return nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		case <-n.stopped:
			return ErrStopped
		}
	}
}
