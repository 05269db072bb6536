// Package snapship ships a member's backend to a follower that raft can no
// longer catch up from its log, and makes the shipped backend the follower's
// own.
//
// The leader streams a dump of its backend (pkg/backend's engine-neutral
// format) straight into the peer transport as it reads it; the follower
// loads the records into a new backend as they arrive, beside its live one.
// Dump, network and load overlap, and nothing is written to disk twice: the
// old way, a dump file on the leader and a received file on the follower,
// read again to load it, took three times as long at 1 GiB.
//
// Only once the new backend is complete and synced does raft see the
// snapshot; installing it is then a rename (see Installer).
package snapship

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/mvcc"
	"github.com/kvd-dev/kvd/pkg/transport"
)

// Sender sends this member's backend for the MsgSnap raft addresses to a
// follower.
type Sender struct {
	Store *mvcc.Store
	// Point is the applier's SnapshotPoint: it runs its function between
	// two applied batches, with the configuration as of that point.
	Point func(context.Context, func(*raftpb.ConfState) error) error
	// Report tells raft a send failed before the transport took it.
	Report func(id uint64, ok bool)
	// Duration, if set, observes each send from the read view opening to
	// the transport closing the stream (etcd_disk_backend_snapshot_duration_seconds).
	Duration prometheus.Observer
	Logger   *zap.Logger
}

// Send sends the backend as the applier has it now, and rewrites the raft
// snapshot's metadata to match it: its applied index and term and the
// configuration as of that index (a member added after raft's last snapshot
// must find itself in it), as etcd does. The receiver skips the entries it
// then gets again. Send returns once the transport owns the stream.
func (s *Sender) Send(tr *transport.Transport, m *raftpb.Message) {
	to := m.GetTo()
	var (
		tx backend.ReadTx
		md *raftpb.SnapshotMetadata
	)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := s.Point(ctx, func(cs *raftpb.ConfState) error {
		// Everything applied goes to the backend, so the view below holds
		// exactly the applied state.
		if err := s.Store.Flush(); err != nil {
			return err
		}
		err := s.Store.WholeView(func(be backend.Backend) error {
			var err error
			tx, err = be.ReadTx()
			return err
		})
		if err != nil {
			return err
		}
		md = &raftpb.SnapshotMetadata{Index: new(s.Store.ConsistentIndex()), Term: new(s.Store.ConsistentTerm()), ConfState: cs}
		return nil
	})
	if err != nil {
		s.Logger.Warn("send snapshot", zap.String("to", fmt.Sprintf("%x", to)), zap.Error(fmt.Errorf("snapshot point: %w", err)))
		s.Report(to, false)
		return
	}
	start := time.Now()
	// The dump is made as the transport reads it. Closing the reader, which
	// the transport does when the send ends for any reason, fails the
	// dump's next write, so the goroutine ends and releases the view.
	pr, pw := io.Pipe()
	go func() {
		_, err := backend.DumpTx(tx, pw)
		tx.Release()
		pw.CloseWithError(err)
	}()
	m = proto.Clone(m).(*raftpb.Message)
	m.Snapshot = &raftpb.Snapshot{Metadata: md}
	s.Logger.Info("sending snapshot", zap.String("to", fmt.Sprintf("%x", to)), zap.Uint64("index", md.GetIndex()))
	tr.SendSnapshot(m, &timedStream{ReadCloser: pr, start: start, observe: s.Duration}, -1)
}

// timedStream is a dump being sent; closing it, which the transport does
// once the send ended, observes the time since the read view opened.
type timedStream struct {
	io.ReadCloser
	start   time.Time
	observe prometheus.Observer
}

func (d *timedStream) Close() error {
	if d.observe != nil {
		d.observe.Observe(time.Since(d.start).Seconds())
	}
	return d.ReadCloser.Close()
}
