package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"strconv"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

func fuzzMessages() []*raftpb.Message {
	return []*raftpb.Message{
		{Type: raftpb.MsgApp.Enum(), From: proto.Uint64(1), To: proto.Uint64(2), Term: proto.Uint64(3), Index: proto.Uint64(10), LogTerm: proto.Uint64(2), Commit: proto.Uint64(9),
			Entries: []*raftpb.Entry{{Index: proto.Uint64(11), Term: proto.Uint64(3), Data: []byte("put k v")}}},
		{Type: raftpb.MsgHeartbeat.Enum(), From: proto.Uint64(1), To: proto.Uint64(2), Term: proto.Uint64(3), Commit: proto.Uint64(9), Context: []byte("ctx")},
		{Type: raftpb.MsgVoteResp.Enum(), From: proto.Uint64(2), To: proto.Uint64(1), Term: proto.Uint64(4), Reject: proto.Bool(true)},
		snapMsg(1, 2, 10),
	}
}

func encodeFrame(t testing.TB, msgs []*raftpb.Message) []byte {
	var frame []byte
	for _, m := range msgs {
		n, _ := frameSize(m)
		var err error
		if frame, err = appendMessage(frame, m, n); err != nil {
			t.Fatal(err)
		}
	}
	return frame
}

// FuzzDecodeFrame: a raft frame from the network decodes to messages or an
// error, never a panic, and what decodes re-encodes to a frame that decodes
// to the same messages.
func FuzzDecodeFrame(f *testing.F) {
	msgs := fuzzMessages()
	f.Add(encodeFrame(f, msgs))
	f.Add(encodeFrame(f, msgs[:1]))
	f.Add(encodeFrame(f, msgs[3:]))
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, frame []byte) {
		msgs, err := decodeFrame(frame)
		if err != nil {
			return
		}
		again, err := decodeFrame(encodeFrame(t, msgs))
		if err != nil {
			t.Fatalf("re-encoded frame does not decode: %v", err)
		}
		if len(again) != len(msgs) {
			t.Fatalf("re-encoded frame has %d messages, want %d", len(again), len(msgs))
		}
		for i := range msgs {
			if !proto.Equal(msgs[i], again[i]) {
				t.Fatalf("message %d changed in a round trip:\n%v\n%v", i, msgs[i], again[i])
			}
		}
	})
}

// fakeServerStream feeds a handler the frames of one fuzzed stream.
type fakeServerStream struct {
	ctx    context.Context
	frames [][]byte
	sent   [][]byte
}

func (s *fakeServerStream) SetHeader(metadata.MD) error  { return nil }
func (s *fakeServerStream) SendHeader(metadata.MD) error { return nil }
func (s *fakeServerStream) SetTrailer(metadata.MD)       {}
func (s *fakeServerStream) Context() context.Context     { return s.ctx }
func (s *fakeServerStream) SendMsg(m any) error {
	s.sent = append(s.sent, *(m.(*[]byte)))
	return nil
}

func (s *fakeServerStream) RecvMsg(m any) error {
	if len(s.frames) == 0 {
		return io.EOF
	}
	*(m.(*[]byte)) = s.frames[0]
	s.frames = s.frames[1:]
	return nil
}

// splitFrames cuts fuzz input into stream messages, each a uvarint length
// and that many bytes (the last one takes what is left).
func splitFrames(data []byte) [][]byte {
	var out [][]byte
	for len(data) > 0 {
		n, k := binary.Uvarint(data)
		if k <= 0 || uint64(len(data)-k) < n {
			out = append(out, data)
			break
		}
		out = append(out, data[k:k+int(n)])
		data = data[k+int(n):]
	}
	return out
}

func joinFrames(frames ...[]byte) []byte {
	var out []byte
	for _, f := range frames {
		out = binary.AppendUvarint(out, uint64(len(f)))
		out = append(out, f...)
	}
	return out
}

// FuzzReceiveSnapshot runs the snapshot receive handler on a fuzzed stream
// (metadata size and frames). It must not panic; the receiver must see its
// reader end in io.EOF only for a stream that checks out; on success it
// read the data the stream carried, whose checksum the trailer gave.
func FuzzReceiveSnapshot(f *testing.F) {
	hdr, err := proto.Marshal(snapMsg(1, 2, 10))
	if err != nil {
		f.Fatal(err)
	}
	data := []byte("0123456789abcdef-snapshot-data")
	sum := snapSum(data)
	good := joinFrames(append([]byte{snapHeader}, hdr...),
		append([]byte{snapData}, data[:10]...), append([]byte{snapData}, data[10:]...),
		append([]byte{snapTrailer}, sum[:]...))
	f.Add(good, strconv.FormatUint(uint64(len(data)), 16))
	f.Add(good, "ffffffffffffffff")
	f.Add(good[:len(good)-4], strconv.FormatUint(uint64(len(data)), 16))
	f.Add(joinFrames(append([]byte{snapHeader}, hdr...), []byte{snapTrailer}), "0")
	f.Add([]byte{}, "")
	f.Add(good, "")

	var got struct {
		m    *raftpb.Message
		data []byte
	}
	tr, err := New(Config{ID: 2, ClusterID: 7, Receive: func([]*raftpb.Message) {},
		ReceiveSnapshot: func(m *raftpb.Message, data io.Reader) error {
			b, err := io.ReadAll(data)
			if err != nil {
				return err
			}
			got.m, got.data = m, b
			return nil
		}})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(tr.Stop)
	f.Fuzz(func(t *testing.T, stream []byte, size string) {
		got.m, got.data = nil, nil
		md := metadata.Pairs(mdClusterID, "7", mdFrom, "1", mdTo, "2")
		if size != "" { // "": a streamed dump, size not announced
			md.Set(mdSnapSize, size)
		}
		frames := splitFrames(stream)
		ss := &fakeServerStream{ctx: metadata.NewIncomingContext(context.Background(), md), frames: frames}
		err := tr.handleSnapshot(ss)
		if err != nil {
			if got.m != nil {
				t.Fatalf("snapshot handed over, then error %v", err)
			}
			return
		}
		if got.m == nil || got.m.GetType() != raftpb.MsgSnap {
			t.Fatalf("accepted stream handed over %v", got.m)
		}
		var want []byte
		for _, fr := range frames[1:] {
			if fr[0] == snapTrailer {
				if s := snapSum(want); !bytes.Equal(fr[1:], s) {
					t.Fatalf("accepted trailer %x, data checksum %x", fr[1:], s)
				}
				break
			}
			want = append(want, fr[1:]...)
		}
		if !bytes.Equal(got.data, want) {
			t.Fatalf("receiver read %q, stream carried %q", got.data, want)
		}
		if n, _ := strconv.ParseUint(size, 16, 64); size != "" && n != uint64(len(want)) {
			t.Fatalf("accepted %d bytes, announced %d", len(want), n)
		}
	})
}

func snapSum(data []byte) []byte {
	h := newSnapSum()
	h.Write(data)
	return h.Sum(nil)
}
