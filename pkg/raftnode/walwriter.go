package raftnode

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.opentelemetry.io/otel/trace"

	"github.com/kvd-dev/kvd/pkg/raftlog"
)

// WALWriter is the actor that makes raft's log appends durable: it takes every
// MsgStorageAppend queued since its last turn, writes them with one fsync, and
// only then delivers their responses (to raft, or to peers).
type WALWriter struct {
	log    *raftlog.Log
	node   *Node
	tracer trace.Tracer
	// InstallSnapshot, if set before Run, makes the state machine hold a
	// raft snapshot received from the leader. It runs before the snapshot is
	// saved to the WAL: a crash in between leaves a backend ahead of the log,
	// which replay tolerates (applied entries are skipped), never a log
	// ahead of the backend.
	InstallSnapshot func(context.Context, *raftpb.Snapshot) error
}

// NewWALWriter returns the WAL writer for node.
func NewWALWriter(log *raftlog.Log, node *Node, tracer trace.Tracer) *WALWriter {
	return &WALWriter{log: log, node: node, tracer: tracer}
}

// Run is the writer loop.
func (w *WALWriter) Run(ctx context.Context) error {
	in := w.node.Appends
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-in.Ready():
		}
		batch := in.Take()
		if len(batch) == 0 {
			continue
		}
		if err := w.write(ctx, batch); err != nil {
			return err
		}
	}
}

func (w *WALWriter) write(ctx context.Context, batch []Append) error {
	start := time.Now()
	var (
		hs   *raftpb.HardState
		ents []*raftpb.Entry
	)
	// Under load a follower can be sent several snapshots while it installs
	// one. Only the newest of a batch is installed and saved: it replaces
	// the log, so the entries and snapshots before it need not be written.
	// Their hard state is kept, and saved after the snapshot, as a commit
	// index may point into it.
	newest := -1
	for i, a := range batch {
		if snap := a.Msg.GetSnapshot(); snap != nil && !raft.IsEmptySnap(snap) {
			newest = i
		}
	}
	for i, a := range batch {
		m := a.Msg
		if i == newest {
			snap := m.GetSnapshot()
			if w.InstallSnapshot != nil {
				if err := w.InstallSnapshot(ctx, snap); err != nil {
					return fmt.Errorf("install snapshot at index %d: %w", snap.GetMetadata().GetIndex(), err)
				}
			}
			if err := w.log.Save(nil, nil, snap); err != nil {
				return fmt.Errorf("save snapshot to wal: %w", err)
			}
		}
		if i >= newest {
			ents = mergeEntries(ents, m.GetEntries())
		}
		if m.Term != nil || m.Vote != nil || m.Commit != nil {
			hs = &raftpb.HardState{Term: m.Term, Vote: m.Vote, Commit: m.Commit}
		}
	}
	if err := w.log.Save(hs, ents, nil); err != nil {
		return fmt.Errorf("save wal: %w", err)
	}
	w.traceFsync(batch, start, time.Now())
	w.node.appendsWritten(len(batch))
	for _, a := range batch {
		w.node.deliver(a.Msg.GetResponses())
	}
	return nil
}

// mergeEntries appends next to ents; raft may rewrite a suffix, so entries at
// or after next's first index are replaced.
func mergeEntries(ents, next []*raftpb.Entry) []*raftpb.Entry {
	if len(next) == 0 {
		return ents
	}
	if len(ents) > 0 {
		first := ents[0].GetIndex()
		at := next[0].GetIndex()
		if at <= first {
			ents = ents[:0]
		} else if at <= ents[len(ents)-1].GetIndex() {
			ents = ents[:at-first]
		}
	}
	return append(ents, next...)
}

func (w *WALWriter) traceFsync(batch []Append, start, end time.Time) {
	if w.tracer == nil {
		return
	}
	for _, a := range batch {
		for _, ctx := range a.Traces {
			if !trace.SpanContextFromContext(ctx).IsSampled() {
				continue
			}
			_, span := w.tracer.Start(ctx, "raftlog.fsync", trace.WithTimestamp(start))
			span.End(trace.WithTimestamp(end))
		}
	}
}

// deliver routes storage responses: to this node's raft, or to peers.
func (n *Node) deliver(msgs []*raftpb.Message) {
	var remote []*raftpb.Message
	for _, m := range msgs {
		if m.GetTo() == n.cfg.ID || m.GetTo() == raft.LocalAppendThread || m.GetTo() == raft.LocalApplyThread {
			n.Step(m)
			continue
		}
		remote = append(remote, m)
	}
	if len(remote) > 0 && n.cfg.Send != nil {
		n.cfg.Send(remote)
	}
}

// Deliver is how the applier hands back its responses.
func (n *Node) Deliver(msgs []*raftpb.Message) { n.deliver(msgs) }
