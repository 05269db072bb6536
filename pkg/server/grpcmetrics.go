package server

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"

	"github.com/kvd-dev/kvd/pkg/config"
	"github.com/kvd-dev/kvd/pkg/fastpb"
	"github.com/kvd-dev/kvd/pkg/rpcmetrics"
)

// grpcMetrics are the client gRPC server's metrics, those of the middleware
// etcd v3.7.3 uses (v3rpc/grpc.go; pkg/rpcmetrics counts them): grpc_server_started_total,
// grpc_server_handled_total, grpc_server_msg_received_total and
// grpc_server_msg_sent_total, by service and method (and code for
// handled); with metrics: extensive also grpc_server_handling_seconds.
type grpcMetrics struct {
	server *rpcmetrics.Metrics
	// codec counts the client messages' bytes
	// (etcd_network_client_grpc_{sent,received}_bytes_total).
	codec *countingCodec
	// requests is etcd_server_client_requests_total.
	requests *clientRequests
}

func newGRPCMetrics(c *config.Config) *grpcMetrics {
	m := &grpcMetrics{
		// The handling time histogram with metrics: extensive, as etcd.
		server:   rpcmetrics.New(c.Metrics == config.MetricsExtensive),
		codec:    &countingCodec{base: encoding.GetCodecV2(proto.Name)},
		requests: newClientRequests(),
	}
	return m
}

// collectors are the families to register besides the middleware's.
func (m *grpcMetrics) collectors() []prometheus.Collector {
	counter := func(name, help string, v *atomic.Uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "etcd", Subsystem: "network", Name: name, Help: help},
			func() float64 { return float64(v.Load()) })
	}
	return []prometheus.Collector{
		counter("client_grpc_sent_bytes_total", "The total number of bytes sent to grpc clients.", &m.codec.sent),
		counter("client_grpc_received_bytes_total", "The total number of bytes received from grpc clients.", &m.codec.received),
		m.requests.vec,
	}
}

// countingCodec is the client gRPC server's codec: gRPC's proto codec,
// with pkg/fastpb's hand-written codec for the KV messages (put, range,
// delete-range and txn requests and responses), counting the bytes of
// each message it marshals and unmarshals, as etcd's v3rpc codec does (the
// encoded message, before compression and without gRPC's frame header).
// It costs two atomic adds per message.
type countingCodec struct {
	base           encoding.CodecV2
	sent, received atomic.Uint64
}

func (c *countingCodec) Marshal(v any) (mem.BufferSlice, error) {
	out := marshalFast(v)
	var err error
	if out == nil {
		out, err = c.base.Marshal(v)
	}
	if err == nil {
		c.sent.Add(uint64(out.Len()))
	}
	return out, err
}

// marshalFast encodes v with pkg/fastpb into a buffer as gRPC's proto
// codec would (pooled once it is big enough to be worth it); nil when
// fastpb does not encode v.
func marshalFast(v any) mem.BufferSlice {
	n, ok := fastpb.Size(v)
	if !ok {
		return nil
	}
	if mem.IsBelowBufferPoolingThreshold(n) {
		// The slice and its one Buffer in one allocation, not two.
		b := new(smallBuffer)
		b.data = fastpb.Append(make([]byte, 0, n), v)
		b.slice[0] = &b.data
		return b.slice[:]
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(n)
	*buf = fastpb.Append((*buf)[:0], v)
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}
}

// smallBuffer is a BufferSlice of one unpooled buffer.
type smallBuffer struct {
	slice [1]mem.Buffer
	data  mem.SliceBuffer
}

func (c *countingCodec) Unmarshal(data mem.BufferSlice, v any) error {
	c.received.Add(uint64(data.Len()))
	if len(data) == 1 && fastpb.Unmarshal(data[0].ReadOnlyData(), v) {
		return nil
	}
	// Anything else, a message fastpb left half decoded included (proto's
	// Unmarshal resets it first).
	return c.base.Unmarshal(data, v)
}

func (c *countingCodec) Name() string { return c.base.Name() }

// maxClientVersions bounds the versions clientRequests keeps resolved
// children for; calls from further versions resolve theirs per call.
const maxClientVersions = 64

// clientRequests is etcd_server_client_requests_total{type, client_api_version}.
// The children of the versions seen are kept in copy-on-write maps, so a
// call costs a map read and an atomic add, no allocation.
type clientRequests struct {
	vec           *prometheus.CounterVec
	mu            sync.Mutex // serialises adding versions
	unary, stream atomic.Pointer[map[string]prometheus.Counter]
}

func newClientRequests() *clientRequests {
	c := &clientRequests{vec: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "etcd", Subsystem: "server", Name: "client_requests_total",
		Help: "The total number of client requests per client version."}, []string{"type", "client_api_version"})}
	c.unary.Store(&map[string]prometheus.Counter{})
	c.stream.Store(&map[string]prometheus.Counter{})
	return c
}

// Inc counts one call of the client API version (api.Deps.ClientRequests).
func (c *clientRequests) Inc(stream bool, version string) {
	p, typ := &c.unary, "unary"
	if stream {
		p, typ = &c.stream, "stream"
	}
	if ctr, ok := (*p.Load())[version]; ok {
		ctr.Inc()
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := *p.Load()
	ctr, ok := cur[version]
	if !ok {
		ctr = c.vec.WithLabelValues(typ, version)
		if len(cur) < maxClientVersions {
			next := make(map[string]prometheus.Counter, len(cur)+1)
			for k, v := range cur {
				next[k] = v
			}
			// The version is the caller's metadata: keep a copy of its own.
			next[strings.Clone(version)] = ctr
			p.Store(&next)
		}
	}
	ctr.Inc()
}

// grpcMetricsOptions are the client gRPC server's options that count its
// calls. serveClients puts them first, so the counting interceptors wrap
// the API's (a call the API refuses is counted with its code, as in etcd,
// whose metrics interceptor runs before its own).
func grpcMetricsOptions(mt *Metrics) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(mt.grpc.codec),
		grpc.ChainUnaryInterceptor(mt.grpc.server.Unary),
		grpc.ChainStreamInterceptor(mt.grpc.server.Stream),
	}
}
