// Package telemetry sets up OpenTelemetry tracing for brook-streamhost.
// Spans are exported over OTLP/HTTP only when OTEL_EXPORTER_OTLP_ENDPOINT
// (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set; otherwise the provider
// records spans without exporting them, so trace ids still flow through
// logs and NATS messages at almost no cost.
package telemetry

import (
	"context"
	"fmt"
	"os"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Setup returns a tracer provider for service and a function that flushes
// and stops it. The provider is not installed globally: callers pass it on.
func Setup(ctx context.Context, service, instance string) (trace.TracerProvider, func(context.Context) error, error) {
	res := resource.NewSchemaless(
		attribute.String("service.name", service),
		attribute.String("service.instance.id", instance),
	)
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" {
		// The exporter reads the endpoint and headers from the standard
		// OTEL_EXPORTER_OTLP_* variables itself.
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("create OTLP/HTTP trace exporter: %w", err)
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	return tp, tp.Shutdown, nil
}

// RemoteContext returns ctx carrying the remote span context of a W3C
// traceparent, or ctx unchanged when traceparent is empty or invalid.
func RemoteContext(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}

// TraceParent renders the span context of ctx as a W3C traceparent, or ""
// when ctx carries no valid span.
func TraceParent(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}
