package server

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/fx"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"

	"github.com/kvd-dev/kvd/pkg/config"
	"github.com/kvd-dev/kvd/pkg/tracing"
)

// memberTracing is the member's tracer provider (pkg/tracing, from the
// config and the OTEL_* variables). When tracing is off, enabled is false
// and tp a noop provider: nothing then starts a span.
type memberTracing struct {
	tp      trace.TracerProvider
	enabled bool
}

func newTracing(lc fx.Lifecycle, c *config.Config, lg *zap.Logger) (*memberTracing, error) {
	tp, shutdown, err := tracing.Setup(context.Background(), c.Tracing, lg)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	otel.SetTracerProvider(tp)
	lc.Append(fx.Hook{OnStop: shutdown})
	return &memberTracing{tp: tp, enabled: tracing.Enabled(tp)}, nil
}

// newTracer is the tracer of kvd's own spans (kv.*, raft.*, apply, ...);
// nil when tracing is off: the API and the actors then skip their span
// bookkeeping.
func newTracer(mt *memberTracing) trace.Tracer {
	if !mt.enabled {
		return nil
	}
	return mt.tp.Tracer("kvd")
}

// tracingServerOptions is what the client gRPC server needs for tracing:
// otelgrpc's server stats handler, which continues the caller's W3C trace
// context (traceparent and tracestate in the request metadata; a malformed
// one is ignored and the call starts a new trace) and starts the server
// span of every call, named and attributed after OpenTelemetry's RPC
// conventions ("etcdserverpb.KV/Put"). kvd's own spans of the call are its
// children. None when tracing is off: then no stats handler runs at all.
func tracingServerOptions(mt *memberTracing) []grpc.ServerOption {
	if mt == nil || !mt.enabled {
		return nil
	}
	h := otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(mt.tp),
		otelgrpc.WithPropagators(tracing.Propagator()),
		// Metrics are the Prometheus registry's job (etcd's names).
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
	)
	return []grpc.ServerOption{grpc.StatsHandler(rpcAttrs{h})}
}

// rpcAttrs adds to otelgrpc's server span the attributes of the RPC
// conventions before their stabilization, rpc.system and rpc.service,
// beside the current rpc.system.name and the fully qualified rpc.method
// (otelgrpc's OTEL_SEMCONV_STABILITY_OPT_IN=rpc/dup puts the same on spans,
// but doubles its metrics too): backends and queries written for either
// find the call.
type rpcAttrs struct{ stats.Handler }

func (h rpcAttrs) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	ctx = h.Handler.TagRPC(ctx, info)
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		// FullMethodName is "/package.Service/Method".
		service, _, ok := strings.Cut(strings.TrimPrefix(info.FullMethodName, "/"), "/")
		if ok {
			span.SetAttributes(attribute.String("rpc.system", "grpc"), attribute.String("rpc.service", service))
		}
	}
	return ctx
}
