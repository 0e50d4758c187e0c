package telemetry

import (
	"context"

	"github.com/brook-streams/brook/pkg/telemetry"
)

// SetupMetrics returns the meter provider of one coordinator process: its
// metrics are served at /metrics on the coordinator's HTTP address, and
// pushed over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT (or the
// metrics-specific variable) is set. Shutdown flushes and stops it.
func SetupMetrics(ctx context.Context, instance string) (*telemetry.Metrics, error) {
	return telemetry.NewMetrics(ctx, telemetry.Options{Service: "brook-coordinator", Instance: instance})
}
