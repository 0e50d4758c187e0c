// Package telemetry sets up OpenTelemetry tracing for brook-streamhost with
// pkg/telemetry. Spans are exported over OTLP/HTTP only when
// OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is
// set; otherwise the provider records no span but still assigns ids, so
// trace ids still flow through logs and NATS messages (pkg/telemetry).
package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/brook-streams/brook/pkg/telemetry"
	"github.com/brook-streams/brook/pkg/telemetry/tracecontext"
)

// Setup returns a tracer provider for service and a function that flushes
// and stops it. The provider is not installed globally: callers pass it on.
func Setup(ctx context.Context, service, instance string) (trace.TracerProvider, func(context.Context) error, error) {
	tp, err := telemetry.NewProvider(ctx, telemetry.Options{Service: service, Instance: instance})
	if err != nil {
		return nil, nil, err
	}
	return tp, tp.Shutdown, nil
}

// RemoteContext returns ctx carrying the remote span context of a W3C
// traceparent, or ctx unchanged when traceparent is empty or invalid.
func RemoteContext(ctx context.Context, traceparent string) context.Context {
	return tracecontext.WithTraceParent(ctx, traceparent)
}

// TraceParent renders the span context of ctx as a W3C traceparent, or ""
// when ctx carries no valid span.
func TraceParent(ctx context.Context) string { return tracecontext.TraceParent(ctx) }
