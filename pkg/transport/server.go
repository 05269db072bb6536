package transport

import (
	"errors"
	"fmt"
	"hash"
	"io"
	"math"
	"strconv"
	"sync"
	"sync/atomic"

	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
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
	ack := []byte(t.cfg.Features)
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
	if t.cfg.ReceiveSnapshot == nil {
		return status.Errorf(codes.FailedPrecondition, "transport: member %x accepts no snapshots", t.cfg.ID)
	}
	md, _ := metadata.FromIncomingContext(ss.Context())
	// A sender streaming a dump as it is made cannot announce its size.
	size := int64(-1)
	if len(md.Get(mdSnapSize)) > 0 {
		n, err := mdUint(md, mdSnapSize)
		if err != nil {
			return err
		}
		if n > math.MaxInt64 {
			return status.Errorf(codes.InvalidArgument, "transport: stream metadata %s=%x: too large", mdSnapSize, n)
		}
		size = int64(n)
	}
	m, frames, err := t.snapshotHeader(ss, from, size)
	if err == nil {
		// The receiver reads on a goroutine of its own while this one
		// receives and checks frames ahead of it, so the network and the
		// receiver's work (a backend load) overlap.
		data := newAheadReader(snapReadAhead)
		accepted := make(chan error, 1)
		go func() {
			err := t.cfg.ReceiveSnapshot(m, data)
			data.stop()
			accepted <- err
		}()
		streamErr := frames.pump(data)
		err = <-accepted
		if err == nil && !data.ended() {
			err = errors.New("the receiver accepted the snapshot before reading all of it")
		}
		if err != nil && streamErr == nil {
			t.lg.Warn("rejected snapshot", zap.String("from", fmt.Sprintf("%x", from)), zap.Error(err))
			return status.Errorf(codes.Aborted, "transport: member %x rejected snapshot at index %d: %v",
				t.cfg.ID, m.GetSnapshot().GetMetadata().GetIndex(), err)
		}
		if streamErr != nil {
			err = streamErr
		}
	}
	if err != nil {
		t.lg.Warn("receive snapshot", zap.String("from", fmt.Sprintf("%x", from)), zap.Error(err))
		if _, ok := status.FromError(err); ok {
			return err
		}
		return status.Errorf(codes.Aborted, "transport: %v", err)
	}
	resp := []byte{}
	return ss.SendMsg(&resp)
}

// snapshotHeader reads the MsgSnap that opens a snapshot stream and returns
// it with a reader of the data frames that follow.
func (t *Transport) snapshotHeader(ss grpc.ServerStream, from uint64, size int64) (*raftpb.Message, *snapFrames, error) {
	recvBytes := t.recvBytes(from)
	var frame []byte
	if err := ss.RecvMsg(&frame); err != nil {
		return nil, nil, fmt.Errorf("read snapshot header from %x: %w", from, err)
	}
	recvBytes.Add(uint64(len(frame)))
	if len(frame) == 0 || frame[0] != snapHeader {
		return nil, nil, fmt.Errorf("read snapshot header from %x: bad frame", from)
	}
	m := &raftpb.Message{}
	if err := proto.Unmarshal(frame[1:], m); err != nil {
		return nil, nil, fmt.Errorf("decode snapshot message from %x: %w", from, err)
	}
	if m.GetType() != raftpb.MsgSnap {
		return nil, nil, fmt.Errorf("snapshot stream from %x carries %v, not MsgSnap", from, m.GetType())
	}
	return m, &snapFrames{ss: ss, from: from, size: size, h: newSnapSum(), recvBytes: recvBytes}, nil
}

// snapReadAhead is how many data frames (of up to ChunkSize bytes) the
// stream may receive ahead of the receiver.
const snapReadAhead = 16

// snapFrames receives a snapshot's data frames. Each frame counts in the
// peer's received bytes, as etcd counts a snapshot's.
type snapFrames struct {
	ss        grpc.ServerStream
	from      uint64
	size      int64 // -1: not announced
	n         int64
	h         hash.Hash
	recvBytes *atomic.Uint64
}

// pump hands the data frames to r until the trailer, whose CRC-32C must
// match the data (and the data its announced size), or until r stopped
// reading. It returns the stream's failure, which r's reader also gets;
// nil when the data checked out or r stopped first.
func (f *snapFrames) pump(r *aheadReader) error {
	for {
		data, last, err := f.next()
		if err != nil {
			r.finish(err)
			return err
		}
		if last {
			r.finish(io.EOF)
			return nil
		}
		if !r.put(data) {
			return nil
		}
	}
}

// next receives one frame: its data, or last for the verified trailer.
func (f *snapFrames) next() (data []byte, last bool, err error) {
	var frame []byte
	if err := f.ss.RecvMsg(&frame); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, false, fmt.Errorf("read snapshot data from %x after %d bytes: %w", f.from, f.n, err)
	}
	f.recvBytes.Add(uint64(len(frame)))
	if len(frame) == 0 {
		return nil, false, fmt.Errorf("read snapshot data from %x: empty frame", f.from)
	}
	switch frame[0] {
	case snapTrailer:
		if f.size >= 0 && f.n != f.size {
			return nil, false, fmt.Errorf("snapshot from %x has %d bytes, announced %d", f.from, f.n, f.size)
		}
		if sum := f.h.Sum(nil); string(sum) != string(frame[1:]) {
			return nil, false, fmt.Errorf("snapshot from %x: checksum mismatch", f.from)
		}
		return nil, true, nil
	case snapData:
		data := frame[1:]
		if f.n += int64(len(data)); f.size >= 0 && f.n > f.size {
			return nil, false, fmt.Errorf("snapshot from %x exceeds its size %d", f.from, f.size)
		}
		f.h.Write(data)
		return data, false, nil
	}
	return nil, false, fmt.Errorf("read snapshot data from %x: frame kind %q", f.from, frame[0])
}

// aheadReader is the receiver's end of a snapshot stream: the frames the
// stream goroutine received ahead. It returns io.EOF only after the
// stream's trailer checked out; every failure of the stream sticks.
type aheadReader struct {
	frames chan []byte
	quit   chan struct{} // closed by stop: the receiver reads no more
	once   sync.Once
	final  error // io.EOF or the stream's failure; set before frames closes
	rest   []byte
	eof    bool
}

func newAheadReader(n int) *aheadReader {
	return &aheadReader{frames: make(chan []byte, n), quit: make(chan struct{})}
}

// put queues one frame's data; false once the receiver stopped.
func (r *aheadReader) put(data []byte) bool {
	select {
	case r.frames <- data:
		return true
	case <-r.quit:
		return false
	}
}

// finish ends the stream with io.EOF or its failure.
func (r *aheadReader) finish(err error) {
	r.final = err
	close(r.frames)
}

// stop tells the stream goroutine the receiver reads no more.
func (r *aheadReader) stop() { r.once.Do(func() { close(r.quit) }) }

// ended reports whether the receiver read to the verified end.
func (r *aheadReader) ended() bool { return r.eof }

func (r *aheadReader) Read(p []byte) (int, error) {
	for len(r.rest) == 0 {
		data, ok := <-r.frames
		if !ok {
			r.eof = errors.Is(r.final, io.EOF)
			return 0, r.final
		}
		r.rest = data
	}
	n := copy(p, r.rest)
	r.rest = r.rest[n:]
	return n, nil
}
