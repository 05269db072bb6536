package transport

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"

	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-dev/kvd/pkg/fsutil"
)

func mdUint(md metadata.MD, key string) (uint64, error) {
	v := md.Get(key)
	if len(v) != 1 {
		return 0, status.Errorf(codes.InvalidArgument, "transport: stream metadata %s missing", key)
	}
	n, err := strconv.ParseUint(v[0], 16, 64)
	if err != nil {
		return 0, status.Errorf(codes.InvalidArgument, "transport: stream metadata %s=%q: %v", key, v[0], err)
	}
	return n, nil
}

// removedText is what a refusal of a removed member says, as etcd's peers
// tell such a member; the member recognises its removal by it.
const removedText = "the member has been permanently removed from the cluster"

func removedError(from, cluster uint64) error {
	return status.Errorf(codes.PermissionDenied, "transport: member %x was removed from cluster %x: %s", from, cluster, removedText)
}

// admit checks who opened a stream: same cluster, addressed to this member,
// not from a removed member. It returns the sender's ID.
func (t *Transport) admit(ss grpc.ServerStream) (uint64, error) {
	md, _ := metadata.FromIncomingContext(ss.Context())
	cid, err := mdUint(md, mdClusterID)
	if err != nil {
		return 0, err
	}
	from, err := mdUint(md, mdFrom)
	if err != nil {
		return 0, err
	}
	to, err := mdUint(md, mdTo)
	if err != nil {
		return 0, err
	}
	switch {
	case cid != t.cfg.ClusterID:
		err = status.Errorf(codes.FailedPrecondition,
			"transport: cluster ID mismatch: member %x of cluster %x refuses member %x of cluster %x", t.cfg.ID, t.cfg.ClusterID, from, cid)
	case to != t.cfg.ID:
		err = status.Errorf(codes.FailedPrecondition,
			"transport: member ID mismatch: stream from %x for member %x reached member %x", from, to, t.cfg.ID)
	case t.knownRemoved(from):
		err = removedError(from, t.cfg.ClusterID)
	}
	if err != nil {
		t.lg.Warn("refused peer stream", zap.Error(err))
		return 0, err
	}
	return from, nil
}

func (t *Transport) handleRaft(ss grpc.ServerStream) error {
	from, err := t.admit(ss)
	if err != nil {
		return err
	}
	ack := []byte{}
	if err := ss.SendMsg(&ack); err != nil {
		return err
	}
	recvBytes := t.recvBytes(from)
	for {
		var frame []byte
		if err := ss.RecvMsg(&frame); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if t.knownRemoved(from) {
			return removedError(from, t.cfg.ClusterID)
		}
		recvBytes.Add(uint64(len(frame)))
		msgs, err := decodeFrame(frame)
		if err != nil {
			t.lg.Error("bad raft frame", zap.String("from", fmt.Sprintf("%x", from)), zap.Error(err))
			return status.Errorf(codes.InvalidArgument, "transport: %v", err)
		}
		t.cfg.Receive(msgs)
	}
}

// recvBytes is the counter of the bytes received from peer from
// (etcd_network_peer_received_bytes_total); a member not (yet) a peer gets
// one counted nowhere.
func (t *Transport) recvBytes(from uint64) *atomic.Uint64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if p := t.peers[from]; p != nil {
		return &p.recvBytes
	}
	return new(atomic.Uint64)
}

func (t *Transport) handleSnapshot(ss grpc.ServerStream) error {
	from, err := t.admit(ss)
	if err != nil {
		return err
	}
	if t.cfg.SnapshotDir == "" {
		return status.Errorf(codes.FailedPrecondition, "transport: member %x accepts no snapshots", t.cfg.ID)
	}
	md, _ := metadata.FromIncomingContext(ss.Context())
	size, err := mdUint(md, mdSnapSize)
	if err != nil {
		return err
	}
	m, path, err := t.receiveSnapshotFile(ss, from, int64(size))
	if err != nil {
		t.lg.Warn("receive snapshot", zap.String("from", fmt.Sprintf("%x", from)), zap.Error(err))
		if _, ok := status.FromError(err); ok {
			return err
		}
		return status.Errorf(codes.Aborted, "transport: %v", err)
	}
	if err := t.cfg.ReceiveSnapshot(m, path); err != nil {
		os.Remove(path)
		return status.Errorf(codes.Aborted, "transport: member %x rejected snapshot at index %d: %v",
			t.cfg.ID, m.GetSnapshot().GetMetadata().GetIndex(), err)
	}
	resp := []byte{}
	return ss.SendMsg(&resp)
}

// receiveSnapshotFile reads a snapshot stream into a synced file in
// SnapshotDir. On error no file is left behind.
// Each frame received counts in the peer's received bytes, as etcd counts a
// snapshot's.
func (t *Transport) receiveSnapshotFile(ss grpc.ServerStream, from uint64, size int64) (_ *raftpb.Message, path string, err error) {
	recvBytes := t.recvBytes(from)
	var frame []byte
	if err := ss.RecvMsg(&frame); err != nil {
		return nil, "", fmt.Errorf("read snapshot header from %x: %w", from, err)
	}
	recvBytes.Add(uint64(len(frame)))
	if len(frame) == 0 || frame[0] != snapHeader {
		return nil, "", fmt.Errorf("read snapshot header from %x: bad frame", from)
	}
	m := &raftpb.Message{}
	if err := proto.Unmarshal(frame[1:], m); err != nil {
		return nil, "", fmt.Errorf("decode snapshot message from %x: %w", from, err)
	}
	if m.GetType() != raftpb.MsgSnap {
		return nil, "", fmt.Errorf("snapshot stream from %x carries %v, not MsgSnap", from, m.GetType())
	}
	dir := t.cfg.SnapshotDir
	f, err := os.CreateTemp(dir, incomingPattern)
	if err != nil {
		return nil, "", fmt.Errorf("create snapshot file in %s: %w", dir, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	h := sha256.New()
	var n int64
	for {
		frame = nil
		if err := ss.RecvMsg(&frame); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, "", fmt.Errorf("read snapshot data from %x after %d bytes: %w", from, n, err)
		}
		recvBytes.Add(uint64(len(frame)))
		if len(frame) == 0 {
			return nil, "", fmt.Errorf("read snapshot data from %x: empty frame", from)
		}
		if frame[0] == snapTrailer {
			break
		}
		if frame[0] != snapData {
			return nil, "", fmt.Errorf("read snapshot data from %x: frame kind %q", from, frame[0])
		}
		data := frame[1:]
		if n += int64(len(data)); n > size {
			return nil, "", fmt.Errorf("snapshot from %x exceeds its size %d", from, size)
		}
		h.Write(data)
		if _, err := f.Write(data); err != nil {
			return nil, "", fmt.Errorf("write snapshot file %s: %w", f.Name(), err)
		}
	}
	if n != size {
		return nil, "", fmt.Errorf("snapshot from %x has %d bytes, announced %d", from, n, size)
	}
	if sum := h.Sum(nil); string(sum) != string(frame[1:]) {
		return nil, "", fmt.Errorf("snapshot from %x: sha256 mismatch", from)
	}
	if err := f.Sync(); err != nil {
		return nil, "", fmt.Errorf("sync snapshot file %s: %w", f.Name(), err)
	}
	if err := f.Close(); err != nil {
		return nil, "", fmt.Errorf("close snapshot file %s: %w", f.Name(), err)
	}
	meta := m.GetSnapshot().GetMetadata()
	path = filepath.Join(dir, fmt.Sprintf("%016x-%016x-from-%x.snap", meta.GetTerm(), meta.GetIndex(), from))
	if err := os.Rename(f.Name(), path); err != nil {
		return nil, "", fmt.Errorf("rename snapshot file to %s: %w", path, err)
	}
	if err := fsutil.SyncDir(dir); err != nil {
		os.Remove(path)
		return nil, "", err
	}
	return m, path, nil
}

// incomingPattern names snapshot files still being received; a crash leaves
// them behind, and New removes them.
const incomingPattern = ".incoming-*.snap"

func removeIncoming(dir string) error {
	partial, err := filepath.Glob(filepath.Join(dir, incomingPattern))
	if err != nil {
		return fmt.Errorf("list partial snapshots in %s: %w", dir, err)
	}
	for _, p := range partial {
		if err := os.Remove(p); err != nil {
			return fmt.Errorf("remove partial snapshot %s: %w", p, err)
		}
	}
	return nil
}
