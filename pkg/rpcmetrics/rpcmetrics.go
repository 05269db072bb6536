// Package rpcmetrics counts a gRPC server's calls in the families of
// go-grpc-middleware's Prometheus provider, the ones etcd exports:
// grpc_server_started_total, grpc_server_handled_total,
// grpc_server_msg_received_total and grpc_server_msg_sent_total, by
// grpc_type, grpc_service and grpc_method (and grpc_code for handled), and
// optionally grpc_server_handling_seconds.
//
// The counts are the provider's, call for call. What differs is the cost:
// the provider resolves four labelled children per call (hashing the label
// values each time) and allocates a reporter; here a method's children are
// resolved once and a call costs a map read and atomic adds.
package rpcmetrics

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// numCodes is the number of gRPC status codes (OK through Unauthenticated).
const numCodes = int(codes.Unauthenticated) + 1

// Metrics is a prometheus.Collector and the interceptors that feed it.
type Metrics struct {
	started, handled, received, sent *prometheus.CounterVec
	handling                         *prometheus.HistogramVec // nil: not measured
	methods                          sync.Map                 // full method name -> *method
}

// method is one method's children, resolved once.
type method struct {
	started, received, sent prometheus.Counter
	handled                 [numCodes]prometheus.Counter
	handling                prometheus.Observer // nil: not measured
}

// New returns the metrics; handlingTime adds grpc_server_handling_seconds
// with Prometheus' default buckets (the provider's
// WithServerHandlingTimeHistogram).
func New(handlingTime bool) *Metrics {
	labels := []string{"grpc_type", "grpc_service", "grpc_method"}
	counter := func(name, help string, labels []string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	m := &Metrics{
		started:  counter("grpc_server_started_total", "Total number of RPCs started on the server.", labels),
		handled:  counter("grpc_server_handled_total", "Total number of RPCs completed on the server, regardless of success or failure.", append(labels[:3:3], "grpc_code")),
		received: counter("grpc_server_msg_received_total", "Total number of RPC stream messages received on the server.", labels),
		sent:     counter("grpc_server_msg_sent_total", "Total number of gRPC stream messages sent by the server.", labels),
	}
	if handlingTime {
		m.handling = prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "grpc_server_handling_seconds",
			Help:    "Histogram of response latency (seconds) of gRPC that had been application-level handled by the server.",
			Buckets: prometheus.DefBuckets,
		}, labels)
	}
	return m
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

func (m *Metrics) collectors() []prometheus.Collector {
	cs := []prometheus.Collector{m.started, m.handled, m.received, m.sent}
	if m.handling != nil {
		cs = append(cs, m.handling)
	}
	return cs
}

// Initialize creates every registered method's series at zero, every code
// of handled included, as the provider's InitializeMetrics does, so the
// families are there before any call.
func (m *Metrics) Initialize(server interface {
	GetServiceInfo() map[string]grpc.ServiceInfo
}) {
	for service, info := range server.GetServiceInfo() {
		for _, mi := range info.Methods {
			m.method("/"+service+"/"+mi.Name, callType(mi.IsClientStream, mi.IsServerStream))
		}
	}
}

// callType is the grpc_type label of a method.
func callType(clientStream, serverStream bool) string {
	switch {
	case !clientStream && !serverStream:
		return "unary"
	case clientStream && !serverStream:
		return "client_stream"
	case !clientStream && serverStream:
		return "server_stream"
	}
	return "bidi_stream"
}

// method returns the children of fullMethod ("/service/method"), resolving
// them on its first call. A server's methods are a fixed set, so the map
// stays small.
func (m *Metrics) method(fullMethod, typ string) *method {
	if v, ok := m.methods.Load(fullMethod); ok {
		return v.(*method)
	}
	service, name := "unknown", "unknown"
	if s, n, ok := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/"); ok {
		service, name = s, n
	}
	mm := &method{
		started:  m.started.WithLabelValues(typ, service, name),
		received: m.received.WithLabelValues(typ, service, name),
		sent:     m.sent.WithLabelValues(typ, service, name),
	}
	for c := range mm.handled {
		mm.handled[c] = m.handled.WithLabelValues(typ, service, name, codes.Code(c).String())
	}
	if m.handling != nil {
		mm.handling = m.handling.WithLabelValues(typ, service, name)
	}
	v, _ := m.methods.LoadOrStore(fullMethod, mm)
	return v.(*method)
}

// done counts a finished call with its error's code: a status error's own,
// a context error's as gRPC maps it, Unknown for any other.
func (mm *method) done(err error, start time.Time) {
	s, ok := status.FromError(err)
	if !ok {
		s = status.FromContextError(err)
	}
	c := s.Code()
	if int(c) < numCodes {
		mm.handled[c].Inc()
	}
	if mm.handling != nil {
		mm.handling.Observe(time.Since(start).Seconds())
	}
}

// start counts a call starting and returns the time the histogram, if
// any, measures from.
func (mm *method) start() time.Time {
	mm.started.Inc()
	if mm.handling != nil {
		return time.Now()
	}
	return time.Time{}
}

// Unary is the interceptor for unary calls. As the provider, it counts
// the request as received and a response as sent, error or not.
func (m *Metrics) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	mm := m.method(info.FullMethod, "unary")
	start := mm.start()
	mm.received.Inc()
	resp, err := handler(ctx, req)
	mm.sent.Inc()
	mm.done(err, start)
	return resp, err
}

// Stream is the interceptor for streaming calls: each message received or
// sent (successfully or not) is counted.
func (m *Metrics) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	mm := m.method(info.FullMethod, callType(info.IsClientStream, info.IsServerStream))
	start := mm.start()
	err := handler(srv, &countedStream{ServerStream: ss, m: mm})
	mm.done(err, start)
	return err
}

type countedStream struct {
	grpc.ServerStream
	m *method
}

func (s *countedStream) SendMsg(msg any) error {
	err := s.ServerStream.SendMsg(msg)
	s.m.sent.Inc()
	return err
}

func (s *countedStream) RecvMsg(msg any) error {
	err := s.ServerStream.RecvMsg(msg)
	s.m.received.Inc()
	return err
}
