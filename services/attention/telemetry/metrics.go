package telemetry

import (
	"context"

	"github.com/brook-streams/brook/pkg/telemetry"
)

// SetupMetrics returns the meter provider of the attention service: its
// metrics are served at /metrics on its HTTP address, and pushed over
// OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT (or the metrics-specific
// variable) is set. Shutdown flushes and stops it.
func SetupMetrics(ctx context.Context, service string) (*telemetry.Metrics, error) {
	return telemetry.NewMetrics(ctx, telemetry.Options{Service: service, SDKResource: true})
}
