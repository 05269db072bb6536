package transport

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash"
	"hash/crc32"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// codecName is the gRPC content-subtype of the peer service. Frames are raw
// bytes whose layout this package defines, so no generated stubs are needed;
// the codec is looked up by content-subtype, which lets the service live on a
// gRPC server that also serves proto services.
const codecName = "kvdpeer"

func init() { encoding.RegisterCodecV2(rawCodec{}) }

// rawCodec moves *[]byte frames without transformation.
type rawCodec struct{}

func (rawCodec) Name() string { return codecName }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("kvdpeer codec: marshal %T: want *[]byte", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(*b)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("kvdpeer codec: unmarshal %T: want *[]byte", v)
	}
	// Materialize copies: grpc frees data when Unmarshal returns.
	*b = data.Materialize()
	return nil
}

const serviceName = "kvd.transport.Peer"

var (
	raftStreamDesc = grpc.StreamDesc{StreamName: "Raft", ServerStreams: true, ClientStreams: true}
	snapStreamDesc = grpc.StreamDesc{StreamName: "Snapshot", ClientStreams: true}

	raftMethod    = "/" + serviceName + "/Raft"
	snapMethod    = "/" + serviceName + "/Snapshot"
	membersMethod = "/" + serviceName + "/Members"
	hashKVMethod  = "/" + serviceName + "/HashKV"
	probeMethod   = "/" + serviceName + "/Probe"
)

// peerService is the handler type of serviceDesc; grpc checks the registered
// implementation against it.
type peerService interface {
	handleRaft(grpc.ServerStream) error
	handleSnapshot(grpc.ServerStream) error
	handleMembers() ([]byte, error)
	handleHashKV(ctx context.Context, req []byte) ([]byte, error)
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*peerService)(nil),
	Streams: []grpc.StreamDesc{
		{
			StreamName: raftStreamDesc.StreamName, ServerStreams: true, ClientStreams: true,
			Handler: func(srv any, ss grpc.ServerStream) error { return srv.(peerService).handleRaft(ss) },
		},
		{
			StreamName: snapStreamDesc.StreamName, ClientStreams: true,
			Handler: func(srv any, ss grpc.ServerStream) error { return srv.(peerService).handleSnapshot(ss) },
		},
	},
	Methods: []grpc.MethodDesc{{
		MethodName: "Members",
		Handler: func(srv any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var req []byte
			if err := dec(&req); err != nil {
				return nil, err
			}
			b, err := srv.(peerService).handleMembers()
			if err != nil {
				return nil, err
			}
			return &b, nil
		},
	}, {
		MethodName: "HashKV",
		Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var req []byte
			if err := dec(&req); err != nil {
				return nil, err
			}
			b, err := srv.(peerService).handleHashKV(ctx, req)
			if err != nil {
				return nil, err
			}
			return &b, nil
		},
	}, {
		// Probe answers at once: the sender times it (peer round trip).
		MethodName: "Probe",
		Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var req []byte
			if err := dec(&req); err != nil {
				return nil, err
			}
			return &[]byte{}, nil
		},
	}},
	Metadata: "kvd/pkg/transport",
}

// Metadata keys sent when a stream opens.
const (
	mdClusterID = "kvd-cluster-id"
	mdFrom      = "kvd-from"
	mdTo        = "kvd-to"
	mdSnapSize  = "kvd-snapshot-size"
)

// A raft frame is a batch of messages, each a uvarint length then the
// proto encoding of one raftpb.Message, in send order.

// frameSize returns the proto size of m and the bytes m takes in a raft
// frame. It caches the size in m for appendMessage.
func frameSize(m *raftpb.Message) (msgSize, inFrame int) {
	n := proto.Size(m)
	k := 1
	for x := uint64(n); x >= 0x80; x >>= 7 {
		k++
	}
	return n, n + k
}

// appendMessage appends m, of proto size n as frameSize returned it, to a
// raft frame.
func appendMessage(frame []byte, m *raftpb.Message, n int) ([]byte, error) {
	frame = binary.AppendUvarint(frame, uint64(n))
	return proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(frame, m)
}

// decodeFrame returns the messages of a raft frame in order.
func decodeFrame(frame []byte) ([]*raftpb.Message, error) {
	var msgs []*raftpb.Message
	for len(frame) > 0 {
		n, k := binary.Uvarint(frame)
		if k <= 0 || uint64(len(frame)-k) < n {
			return nil, fmt.Errorf("decode raft frame: bad length at message %d", len(msgs))
		}
		m := &raftpb.Message{}
		if err := proto.Unmarshal(frame[k:k+int(n)], m); err != nil {
			return nil, fmt.Errorf("decode raft frame: message %d: %w", len(msgs), err)
		}
		msgs = append(msgs, m)
		frame = frame[k+int(n):]
	}
	return msgs, nil
}

// Snapshot stream frames start with a kind byte.
const (
	snapHeader  byte = 'h' // proto encoding of the MsgSnap message
	snapData    byte = 'd' // a chunk of the snapshot data
	snapTrailer byte = 't' // CRC-32C (Castagnoli) of all data chunks, big-endian
)

// newSnapSum returns the checksum of a snapshot stream's data: CRC-32C, which
// costs next to nothing at a GiB, where SHA-256 cost a second of CPU on each
// side.
func newSnapSum() hash.Hash32 { return crc32.New(crc32.MakeTable(crc32.Castagnoli)) }
