package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
)

// MetricsEndpointEnv names an OTLP endpoint for metrics only.
const MetricsEndpointEnv = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"

// MetricsPath is where every brook service serves its metrics, on its
// existing HTTP address.
const MetricsPath = "/metrics"

// DefaultExportInterval is how often metrics are pushed over OTLP when an
// endpoint is set; ExportIntervalEnv (milliseconds), read by the SDK,
// overrides it.
const DefaultExportInterval = 15 * time.Second

// ExportIntervalEnv is the standard variable of the OTLP push period.
const ExportIntervalEnv = "OTEL_METRIC_EXPORT_INTERVAL"

// MetricsExporterEnv is the standard variable naming the metrics
// exporters: unset or a list holding "otlp" lets an endpoint turn the OTLP
// push on; anything else ("none", "prometheus") keeps it off, for example
// when the endpoint is a trace-only collector. /metrics is served either
// way.
const MetricsExporterEnv = "OTEL_METRICS_EXPORTER"

// Histogram bucket boundaries shared by the services' instruments, in the
// instruments' units.
var (
	// LatencyBuckets are for request-scale durations in seconds (a
	// confirm, an fsync, a Raft proposal): 100 µs to 10 s.
	LatencyBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	// FailoverBuckets are for failover durations in seconds: 50 ms to
	// 5 min.
	FailoverBuckets = []float64{0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 20, 30, 60, 120, 300}
	// CountBuckets are for small counts (writes per group commit).
	CountBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}
)

// Metrics is the meter provider of one process with its two ways out: a
// Prometheus registry served by Handler (text format, at MetricsPath), and,
// when an OTLP endpoint variable is set, a periodic OTLP/HTTP push. The
// provider is never installed globally; callers pass it (or MeterProvider)
// to what records metrics.
type Metrics struct {
	provider *sdkmetric.MeterProvider
	handler  http.Handler
	otlp     bool
}

// NewMetrics builds the meter provider o describes (Service and Instance
// become the resource, SDKResource merges the SDK's default resource;
// MetricsEndpointEnvs, nil meaning EndpointEnv and MetricsEndpointEnv,
// turn the OTLP push on). The Prometheus registry also holds the Go
// runtime and process collectors (go_*, process_*).
func NewMetrics(ctx context.Context, o Options) (*Metrics, error) {
	attrs := []attribute.KeyValue{attribute.String("service.name", o.Service)}
	if o.Instance != "" {
		attrs = append(attrs, attribute.String("service.instance.id", o.Instance))
	}
	res := resource.NewSchemaless(attrs...)
	if o.SDKResource {
		merged, err := resource.Merge(resource.Default(), res)
		if err != nil {
			return nil, fmt.Errorf("metrics resource: %w", err)
		}
		res = merged
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, fmt.Errorf("register go collector: %w", err)
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, fmt.Errorf("register process collector: %w", err)
	}
	exp, err := otelprom.New(
		otelprom.WithRegisterer(reg),
		// Prometheus names: dots become underscores, the unit and
		// _total are appended (brook.host.publish.duration in s is
		// brook_host_publish_duration_seconds).
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
		// The instrumentation scope is in every metric's name already.
		otelprom.WithoutScopeInfo(),
	)
	if err != nil {
		return nil, fmt.Errorf("create prometheus exporter: %w", err)
	}
	opts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithReader(exp)}
	envs := o.MetricsEndpointEnvs
	if envs == nil {
		envs = []string{EndpointEnv, MetricsEndpointEnv}
	}
	otlp := exporting(envs) && otlpWanted()
	if otlp {
		oexp, err := otlpmetrichttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("create OTLP/HTTP metric exporter: %w", err)
		}
		var ropts []sdkmetric.PeriodicReaderOption
		if os.Getenv(ExportIntervalEnv) == "" {
			// An explicit interval would override the variable.
			ropts = append(ropts, sdkmetric.WithInterval(DefaultExportInterval))
		}
		opts = append(opts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(oexp, ropts...)))
	}
	return &Metrics{
		provider: sdkmetric.NewMeterProvider(opts...),
		handler:  promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
		otlp:     otlp,
	}, nil
}

// otlpWanted reads MetricsExporterEnv.
func otlpWanted() bool {
	v := strings.TrimSpace(os.Getenv(MetricsExporterEnv))
	if v == "" {
		return true
	}
	for _, e := range strings.Split(v, ",") {
		if strings.EqualFold(strings.TrimSpace(e), "otlp") {
			return true
		}
	}
	return false
}

// MeterProvider is the provider instruments are created from.
func (m *Metrics) MeterProvider() metric.MeterProvider { return m.provider }

// Handler serves the metrics in the Prometheus text format (or the format
// the scraper asks for).
func (m *Metrics) Handler() http.Handler { return m.handler }

// Mount serves Handler at GET MetricsPath on mux.
func (m *Metrics) Mount(mux *http.ServeMux) { mux.Handle("GET "+MetricsPath, m.handler) }

// OTLP reports whether metrics are also pushed over OTLP.
func (m *Metrics) OTLP() bool { return m.otlp }

// Shutdown pushes what is not exported yet (OTLP) and stops the provider.
// A nil Metrics has nothing to stop.
func (m *Metrics) Shutdown(ctx context.Context) error {
	if m == nil {
		return nil
	}
	err := m.provider.Shutdown(ctx)
	if errors.Is(err, sdkmetric.ErrReaderShutdown) {
		return nil
	}
	return err
}

// Meter returns the named meter of mp, or of a no-op provider when mp is
// nil (unit tests and callers that record nothing).
func Meter(mp metric.MeterProvider, name string) metric.Meter {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	return mp.Meter(name)
}

// AttrOptions builds the measurement option of one attribute once and
// reuses it, so that counting by a code or a reason allocates nothing per
// measurement. The zero value is ready; it is safe for concurrent use.
type AttrOptions struct {
	m sync.Map // "key=value" -> metric.MeasurementOption
}

// Of returns the option carrying kv alone.
func (a *AttrOptions) Of(kv attribute.KeyValue) metric.MeasurementOption {
	key := string(kv.Key) + "=" + kv.Value.String()
	if v, ok := a.m.Load(key); ok {
		return v.(metric.MeasurementOption)
	}
	v, _ := a.m.LoadOrStore(key, metric.WithAttributeSet(attribute.NewSet(kv)))
	return v.(metric.MeasurementOption)
}
