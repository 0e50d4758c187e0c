// Package telemetry sets up OpenTelemetry tracing for brook-attention and
// carries W3C trace context across NATS headers.
//
// Spans are exported over OTLP/HTTP only when OTEL_EXPORTER_OTLP_ENDPOINT is
// set (the exporter reads the standard OTEL_* variables itself); otherwise
// the provider records spans so that trace ids still propagate, but exports
// nothing. No global provider or propagator is installed: callers pass the
// provider they get here.
package telemetry

import (
	"context"
	"fmt"
	"os"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// EndpointEnv turns exporting on.
const EndpointEnv = "OTEL_EXPORTER_OTLP_ENDPOINT"

// Setup returns a tracer provider for service and a function that flushes
// and stops it.
func Setup(ctx context.Context, service string) (*sdktrace.TracerProvider, func(context.Context) error, error) {
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", service)))
	if err != nil {
		return nil, nil, fmt.Errorf("tracing resource: %w", err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if os.Getenv(EndpointEnv) != "" {
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("otlp/http trace exporter: %w", err)
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	return tp, tp.Shutdown, nil
}

// HeaderCarrier adapts NATS message headers to the propagator. NATS header
// names are case-sensitive, so the propagator's lower-case "traceparent" is
// kept as is (http.Header would canonicalise it to "Traceparent").
type HeaderCarrier nats.Header

// Get returns the first value of key.
func (h HeaderCarrier) Get(key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set replaces the values of key.
func (h HeaderCarrier) Set(key, value string) { h[key] = []string{value} }

// Keys lists the header names.
func (h HeaderCarrier) Keys() []string {
	out := make([]string, 0, len(h))
	for k := range h {
		out = append(out, k)
	}
	return out
}

// Inject writes ctx's trace context into msg's headers.
func Inject(ctx context.Context, msg *nats.Msg) {
	if msg.Header == nil {
		msg.Header = nats.Header{}
	}
	propagation.TraceContext{}.Inject(ctx, HeaderCarrier(msg.Header))
}

// Extract returns ctx with the trace context of msg's headers, if any.
func Extract(ctx context.Context, msg *nats.Msg) context.Context {
	if msg.Header == nil {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, HeaderCarrier(msg.Header))
}
