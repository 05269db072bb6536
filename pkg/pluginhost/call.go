package pluginhost

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// call runs fn against the plugin's running process with the plugin's
// timeout, inside a span, and counts it. fn returns the result label
// (accept, deny, ...). A failure (down, timeout, transport error) is
// returned as such for the caller to apply on-failure.
func (h *Host) call(ctx context.Context, p *proc, op string, fn func(ctx context.Context, r *running) (string, error)) (string, error) {
	ctx, span := h.tr.Start(ctx, "authplugin."+op, trace.WithAttributes(
		attribute.String("kvd.auth_plugin.name", p.spec.Name),
		attribute.String("kvd.auth_plugin.kind", p.spec.Kind)))
	defer span.End()
	result, err := h.invoke(ctx, p, fn)
	if err != nil {
		result = "failure"
		span.SetStatus(codes.Error, err.Error())
	}
	span.SetAttributes(attribute.String("kvd.auth_plugin.result", result))
	h.m.calls.WithLabelValues(p.spec.Name, p.spec.Kind, result).Inc()
	return result, err
}

func (h *Host) invoke(ctx context.Context, p *proc, fn func(ctx context.Context, r *running) (string, error)) (string, error) {
	r := p.cur.Load()
	if r == nil {
		return "", p.downErr()
	}
	cctx, cancel := context.WithTimeout(ctx, p.spec.Timeout)
	defer cancel()
	start := time.Now()
	result, err := fn(cctx, r)
	h.m.latency.WithLabelValues(p.spec.Name, p.spec.Kind).Observe(time.Since(start).Seconds())
	switch {
	case err == nil:
		return result, nil
	case ctx.Err() != nil:
		// The caller went away; not the plugin's failure.
		return "", ctx.Err()
	case errors.Is(cctx.Err(), context.DeadlineExceeded) || status.Code(err) == grpccodes.DeadlineExceeded:
		return "", fmt.Errorf("timed out after %v", p.spec.Timeout)
	case status.Code(err) == grpccodes.Unavailable:
		p.check()
		return "", fmt.Errorf("unavailable: %s", status.Convert(err).Message())
	default:
		return "", fmt.Errorf("call failed: %s", status.Convert(err).Message())
	}
}

// failure is what a call that failed gets under on-failure: deny. code is
// the gRPC code the client sees; the message says which plugin and why.
func failure(p *proc, code grpccodes.Code, err error) error {
	return status.Errorf(code, "kvd: auth plugin %q failed (on-failure: deny): %v", p.spec.Name, err)
}
