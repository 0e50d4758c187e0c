// Package telemetry builds brook-coordinator's OpenTelemetry tracer
// provider. Spans leave the process over OTLP/HTTP only when
// OTEL_EXPORTER_OTLP_ENDPOINT (or the traces-specific variable) is set;
// otherwise the provider still samples and assigns ids, so a failover's
// trace id can be logged and shown in stream.info without any collector.
package telemetry

import (
	"context"
	"fmt"
	"os"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// TracerName is the instrumentation name of the coordinator's spans.
const TracerName = "github.com/brook-streams/brook/services/coordinator"

// Setup returns the provider for one coordinator process; Shutdown flushes
// it. It is not installed as the global provider: the coordinator passes it
// to what needs it.
func Setup(ctx context.Context, instance string) (*sdktrace.TracerProvider, error) {
	res := resource.NewSchemaless(
		attribute.String("service.name", "brook-coordinator"),
		attribute.String("service.instance.id", instance),
	)
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res), sdktrace.WithSampler(sdktrace.AlwaysSample())}
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" {
		// The exporter takes endpoint, headers and timeouts from the
		// standard OTEL_EXPORTER_OTLP_* variables.
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("create OTLP/HTTP exporter: %w", err)
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	return sdktrace.NewTracerProvider(opts...), nil
}
