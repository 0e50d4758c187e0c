// Package telemetry builds brook-coordinator's OpenTelemetry tracer
// provider with pkg/telemetry. Spans leave the process over OTLP/HTTP only
// when OTEL_EXPORTER_OTLP_ENDPOINT (or the traces-specific variable) is set;
// otherwise the provider records no span but still assigns ids, so a
// failover's trace id can be logged and shown in stream.info without any
// collector (pkg/telemetry).
package telemetry

import (
	"context"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/brook-streams/brook/pkg/telemetry"
)

// TracerName is the instrumentation name of the coordinator's spans.
const TracerName = "github.com/brook-streams/brook/services/coordinator"

// Setup returns the provider for one coordinator process; Shutdown flushes
// it. It is not installed as the global provider: the coordinator passes it
// to what needs it.
func Setup(ctx context.Context, instance string) (*sdktrace.TracerProvider, error) {
	return telemetry.NewProvider(ctx, telemetry.Options{
		Service:  "brook-coordinator",
		Instance: instance,
		// While exporting, every span is sampled, even under an unsampled
		// caller, so that every failover's trace is complete.
		Sampler: sdktrace.AlwaysSample(),
	})
}
