// Package tracing sets up OpenTelemetry trace export for a kvd member.
//
// Tracing is off unless the config's tracing.enabled is true or one of the
// standard OTLP endpoint variables (OTEL_EXPORTER_OTLP_ENDPOINT,
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set. Where a standard OTEL_*
// variable is set it wins over the config file, so an operator can redirect
// a deployed member without editing its file:
//
//   - endpoint: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_ENDPOINT, then tracing.endpoint
//   - protocol: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, OTEL_EXPORTER_OTLP_PROTOCOL, then tracing.protocol (grpc)
//   - service.name: OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES, then tracing.service-name ("kvd")
//   - sampler: OTEL_TRACES_SAMPLER(_ARG), then parent-based tracing.sampling-ratio,
//     under which a new root span that links to a sampled span (the backend
//     commit's) is sampled too
//
// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turn tracing off.
package tracing

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/config"
)

// DefaultServiceName is the service.name of kvd's spans when neither the
// config nor OTEL_SERVICE_NAME names one.
const DefaultServiceName = "kvd"

// Setup returns the member's tracer provider and the function that flushes
// and stops it; shutdown is never nil and is safe to call when tracing is off.
// It sets the global text-map propagator to W3C TraceContext (plus Baggage)
// either way, so trace context crosses process boundaries even through a
// member that does not export. It does not set the global tracer provider:
// the caller decides (otel.SetTracerProvider).
//
// Export failures after Setup are logged through lg, not returned.
func Setup(ctx context.Context, c config.Tracing, lg *zap.Logger) (trace.TracerProvider, func(context.Context) error, error) {
	if lg == nil {
		lg = zap.NewNop()
	}
	otel.SetTextMapPropagator(Propagator())
	noShutdown := func(context.Context) error { return nil }

	if !enabled(c) {
		return noop.NewTracerProvider(), noShutdown, nil
	}

	exp, protocol, endpoint, err := newExporter(ctx, c)
	if err != nil {
		return nil, noShutdown, err
	}

	serviceName := c.ServiceName
	if serviceName == "" {
		serviceName = DefaultServiceName
	}
	// WithFromEnv comes after the config's name so OTEL_SERVICE_NAME wins.
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", serviceName)),
		resource.WithFromEnv(),
	)
	if err != nil {
		// resource.New returns what it could build alongside a partial
		// error, e.g. a malformed OTEL_RESOURCE_ATTRIBUTES.
		lg.Warn("tracing: incomplete resource", zap.Error(err))
		if res == nil {
			res = resource.NewSchemaless(attribute.String("service.name", serviceName))
		}
	}

	opts := []sdktrace.TracerProviderOption{
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
	}
	sampler := "env " + os.Getenv("OTEL_TRACES_SAMPLER")
	if os.Getenv("OTEL_TRACES_SAMPLER") == "" {
		// Without the option the SDK reads OTEL_TRACES_SAMPLER itself.
		opts = append(opts, sdktrace.WithSampler(linkedSampler{sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.SamplingRatio))}))
		sampler = fmt.Sprintf("parent-based ratio %g", c.SamplingRatio)
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		lg.Warn("tracing: export error", zap.Error(err))
	}))
	tp := sdktrace.NewTracerProvider(opts...)

	var svc string
	for _, kv := range res.Attributes() {
		if kv.Key == "service.name" {
			svc = kv.Value.AsString()
		}
	}
	lg.Info("tracing enabled",
		zap.String("protocol", protocol),
		zap.String("endpoint", endpoint),
		zap.String("service-name", svc),
		zap.String("sampler", sampler),
	)
	return tp, tp.Shutdown, nil
}

// Propagator is the text-map propagator of kvd's trace context: W3C Trace
// Context (traceparent, tracestate) and Baggage. A malformed traceparent is
// ignored by it: the request then starts a new trace.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// Enabled reports whether tp is a provider Setup built to export spans;
// false for the noop provider it returns when tracing is off (or nil), so
// callers can leave out span work entirely.
func Enabled(tp trace.TracerProvider) bool {
	if tp == nil {
		return false
	}
	_, off := tp.(noop.TracerProvider)
	return !off
}

// linkedSampler samples every new root span that links to a sampled span,
// and leaves all other decisions to base. The backend commit span is such a
// root (it commits the writes of many proposals, each in its own trace):
// whenever one of its proposals is sampled, so is the commit that made that
// proposal's write durable in the backend, whatever the ratio.
type linkedSampler struct{ base sdktrace.Sampler }

func (s linkedSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if !trace.SpanContextFromContext(p.ParentContext).IsValid() {
		for _, l := range p.Links {
			if l.SpanContext.IsSampled() {
				return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample}
			}
		}
	}
	return s.base.ShouldSample(p)
}

func (s linkedSampler) Description() string {
	return "LinkedSampled{" + s.base.Description() + "}"
}

func enabled(c config.Tracing) bool {
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") ||
		strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")), "none") {
		return false
	}
	return c.Enabled || envEndpoint() != ""
}

func envEndpoint() string {
	if v := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); v != "" {
		return v
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
}

func protocolOf(c config.Tracing) string {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if v := strings.TrimSpace(os.Getenv(k)); v != "" {
			return v
		}
	}
	if c.Protocol != "" {
		return c.Protocol
	}
	return config.ProtocolGRPC
}

// newExporter builds the OTLP exporter. Endpoint variables in the environment
// are read by the exporter itself; the config's endpoint is passed only when
// none is set, because an explicit option would override them.
func newExporter(ctx context.Context, c config.Tracing) (sdktrace.SpanExporter, string, string, error) {
	protocol := protocolOf(c)
	endpoint := envEndpoint()
	useConfig := endpoint == "" && c.Endpoint != ""
	if useConfig {
		endpoint = c.Endpoint
	}
	switch protocol {
	case config.ProtocolGRPC:
		var opts []otlptracegrpc.Option
		if useConfig {
			opts = append(opts, otlptracegrpc.WithEndpointURL(c.Endpoint))
		}
		exp, err := otlptracegrpc.New(ctx, opts...)
		if err != nil {
			return nil, "", "", fmt.Errorf("create otlp grpc exporter for %q: %w", endpoint, err)
		}
		return exp, protocol, endpoint, nil
	case config.ProtocolHTTPProtobuf, "http/json":
		var opts []otlptracehttp.Option
		if useConfig {
			u, err := url.Parse(c.Endpoint)
			if err != nil {
				return nil, "", "", fmt.Errorf("tracing endpoint %q: %w", c.Endpoint, err)
			}
			// A bare collector address means the standard traces path, as
			// it does for OTEL_EXPORTER_OTLP_ENDPOINT.
			if u.Path == "" || u.Path == "/" {
				u.Path = "/v1/traces"
			}
			opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
		}
		exp, err := otlptracehttp.New(ctx, opts...)
		if err != nil {
			return nil, "", "", fmt.Errorf("create otlp http exporter for %q: %w", endpoint, err)
		}
		return exp, protocol, endpoint, nil
	default:
		return nil, "", "", fmt.Errorf("tracing protocol %q: want grpc or http/protobuf", protocol)
	}
}
