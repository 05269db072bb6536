package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// SendSnapshot streams the MsgSnap m and size bytes of data (-1: as many as
// data yields until io.EOF) to m.To on a goroutine of its own, and closes
// data when done, or at Stop to unblock a Read in progress. The outcome goes to
// Config.SnapshotStatus: ok once the receiver has synced the data and its
// ReceiveSnapshot returned nil. It never blocks on the network.
func (t *Transport) SendSnapshot(m *raftpb.Message, data io.ReadCloser, size int64) {
	to := m.GetTo()
	t.mu.RLock()
	p, ok := t.peers[to]
	if t.stopped || !ok {
		t.mu.RUnlock()
		data.Close()
		t.lg.Warn("drop snapshot to unknown peer", zap.String("to", fmt.Sprintf("%x", to)))
		t.cfg.SnapshotStatus(to, false)
		return
	}
	p.mu.Lock()
	targets := append([]target(nil), p.targets...)
	p.mu.Unlock()
	t.wg.Add(1)
	t.mu.RUnlock()
	// Stop closes data, which must unblock a Read in progress.
	var closeOnce sync.Once
	closeData := func() { closeOnce.Do(func() { data.Close() }) }
	stopClose := context.AfterFunc(t.ctx, closeData)
	go func() {
		defer t.wg.Done()
		defer closeData()
		defer stopClose()
		var (
			err  error
			sent int64
		)
		start := time.Now()
		for _, target := range targets {
			if sent, err = t.sendSnapshot(target, m, data, size, &p.sentBytes); err == nil || !errors.Is(err, errNotConnected) {
				break
			}
		}
		if err != nil {
			t.lg.Warn("send snapshot", zap.String("to", fmt.Sprintf("%x", to)), zap.Error(err))
			t.cfg.SnapshotStatus(to, false)
			return
		}
		t.lg.Info("sent snapshot", zap.String("to", fmt.Sprintf("%x", to)),
			zap.Uint64("index", m.GetSnapshot().GetMetadata().GetIndex()), zap.Int64("bytes", sent),
			zap.Duration("took", time.Since(start)))
		t.cfg.SnapshotStatus(to, true)
	}()
}

// errNotConnected marks failures before any data was read, when another URL
// of the peer may be tried.
var errNotConnected = errors.New("not connected")

// sendSnapshot sends the snapshot to one URL of the peer; each frame sent
// (header, data chunks, trailer) counts in sentBytes, the peer's
// etcd_network_peer_sent_bytes_total, as etcd counts a snapshot's bytes.
func (t *Transport) sendSnapshot(target target, m *raftpb.Message, data io.Reader, size int64, sentBytes *atomic.Uint64) (sent int64, err error) {
	to := m.GetTo()
	hdr, err := proto.Marshal(m)
	if err != nil {
		return sent, fmt.Errorf("encode snapshot message to %x: %w", to, err)
	}
	cc, err := target.dial(t.dialOptions())
	if err != nil {
		return sent, fmt.Errorf("dial peer %x at %s: %w: %w", to, target, errNotConnected, err)
	}
	defer cc.Close()
	// Ending ctx on every return tells the receiver to drop what it has.
	ctx, cancel := context.WithCancel(t.ctx)
	defer cancel()
	md := t.streamMD(to)
	if size >= 0 {
		md.Set(mdSnapSize, strconv.FormatUint(uint64(size), 16))
	}
	ctx = metadata.NewOutgoingContext(ctx, md)
	stream, err := cc.NewStream(ctx, &snapStreamDesc, snapMethod, grpc.CallContentSubtype(codecName))
	if err != nil {
		return sent, fmt.Errorf("open snapshot stream to %x at %s: %w: %w", to, target, errNotConnected, err)
	}
	hdr = append([]byte{snapHeader}, hdr...)
	if err := stream.SendMsg(&hdr); err != nil {
		return sent, fmt.Errorf("send snapshot header to %x: %w", to, sendErr(stream, err))
	}
	sentBytes.Add(uint64(len(hdr)))
	h := newSnapSum()
	for {
		// A fresh buffer per chunk: grpc may still hold the last one.
		want := int64(t.cfg.ChunkSize)
		if size >= 0 {
			want = min(want, max(size-sent, 0)+1)
		}
		chunk := make([]byte, 1+want)
		chunk[0] = snapData
		n, rerr := io.ReadFull(data, chunk[1:])
		if n > 0 {
			if sent += int64(n); size >= 0 && sent > size {
				return sent, fmt.Errorf("snapshot data to %x exceeds its size %d", to, size)
			}
			chunk = chunk[:1+n]
			h.Write(chunk[1:])
			if err := stream.SendMsg(&chunk); err != nil {
				return sent, fmt.Errorf("send snapshot data to %x after %d bytes: %w", to, sent, sendErr(stream, err))
			}
			sentBytes.Add(uint64(len(chunk)))
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			return sent, fmt.Errorf("read snapshot data for %x after %d bytes: %w", to, sent, rerr)
		}
	}
	if size >= 0 && sent != size {
		return sent, fmt.Errorf("snapshot data for %x has %d bytes, announced %d", to, sent, size)
	}
	trailer := append([]byte{snapTrailer}, h.Sum(nil)...)
	if err := stream.SendMsg(&trailer); err != nil {
		return sent, fmt.Errorf("send snapshot trailer to %x: %w", to, sendErr(stream, err))
	}
	sentBytes.Add(uint64(len(trailer)))
	if err := stream.CloseSend(); err != nil {
		return sent, fmt.Errorf("close snapshot stream to %x: %w", to, err)
	}
	var resp []byte
	if err := stream.RecvMsg(&resp); err != nil {
		return sent, fmt.Errorf("snapshot to %x: %w", to, err)
	}
	return sent, nil
}

// sendErr turns the io.EOF of a stream that ended into the stream's status.
func sendErr(stream grpc.ClientStream, err error) error {
	if errors.Is(err, io.EOF) {
		var b []byte
		if rerr := stream.RecvMsg(&b); rerr != nil && !errors.Is(rerr, io.EOF) {
			return rerr
		}
	}
	return err
}
