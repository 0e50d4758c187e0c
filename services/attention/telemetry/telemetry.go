// Package telemetry sets up OpenTelemetry tracing for brook-attention with
// pkg/telemetry and carries W3C trace context across NATS headers.
//
// Spans are exported over OTLP/HTTP only when OTEL_EXPORTER_OTLP_ENDPOINT is
// set (the exporter reads the standard OTEL_* variables itself); otherwise
// the provider records no span but still assigns ids, so trace ids still
// propagate (pkg/telemetry). No global provider or propagator is installed:
// callers pass the provider they get here.
package telemetry

import (
	"context"

	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/brook-streams/brook/pkg/telemetry"
	"github.com/brook-streams/brook/pkg/telemetry/tracecontext"
)

// EndpointEnv turns exporting on.
const EndpointEnv = telemetry.EndpointEnv

// Setup returns a tracer provider for service and a function that flushes
// and stops it.
func Setup(ctx context.Context, service string) (*sdktrace.TracerProvider, func(context.Context) error, error) {
	tp, err := telemetry.NewProvider(ctx, telemetry.Options{
		Service:      service,
		SDKResource:  true,
		EndpointEnvs: []string{EndpointEnv},
	})
	if err != nil {
		return nil, nil, err
	}
	return tp, tp.Shutdown, nil
}

// HeaderCarrier adapts NATS message headers to the W3C propagator.
type HeaderCarrier = tracecontext.HeaderCarrier

// Inject writes ctx's trace context into msg's headers.
func Inject(ctx context.Context, msg *nats.Msg) { tracecontext.Inject(ctx, msg) }

// Extract returns ctx with the trace context of msg's headers, if any.
func Extract(ctx context.Context, msg *nats.Msg) context.Context {
	return tracecontext.Extract(ctx, msg)
}
