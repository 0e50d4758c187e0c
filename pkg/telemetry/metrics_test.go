package telemetry

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/brook-streams/brook/pkg/telemetry/metricstest"
)

// TestMetricsServedAsPrometheusText records one instrument of each kind
// and reads them back from the /metrics handler with expfmt's parser: OTel
// names become Prometheus names with their unit and _total suffixes, and
// the resource is in target_info.
func TestMetricsServedAsPrometheusText(t *testing.T) {
	t.Setenv(EndpointEnv, "")
	t.Setenv(MetricsEndpointEnv, "")
	ctx := context.Background()
	m, err := NewMetrics(ctx, Options{Service: "brook-test", Instance: "t-1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
	if m.OTLP() {
		t.Fatal("OTLP push on without an endpoint")
	}
	meter := Meter(m.MeterProvider(), "test")
	c, _ := meter.Int64Counter("brook.test.publish.confirmed", metric.WithUnit("{publish}"))
	c.Add(ctx, 3, metric.WithAttributes(attribute.String("error.type", "x")))
	h, _ := meter.Float64Histogram("brook.test.publish.duration", metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(LatencyBuckets...))
	h.Record(ctx, 0.002)
	h.Record(ctx, 0.2)
	by, _ := meter.Int64Counter("brook.test.append.payload", metric.WithUnit("By"))
	by.Add(ctx, 10)
	_, _ = meter.Int64ObservableGauge("brook.test.copy.count", metric.WithUnit("{copy}"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(2, metric.WithAttributes(attribute.String("brook.copy.role", "owner")))
			return nil
		}))

	mux := http.NewServeMux()
	m.Mount(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	fams, err := metricstest.Scrape(ctx, srv.URL+MetricsPath)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]float64{
		"brook_test_publish_confirmed_total":    3,
		"brook_test_publish_duration_seconds":   2,
		"brook_test_append_payload_bytes_total": 10,
		"brook_test_copy_count":                 2,
	} {
		if got, ok := fams.Value(name); !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v; families %v", name, got, ok, want, fams.Names())
		}
	}
	if got, _ := fams.Value("brook_test_publish_confirmed_total", "error_type", "x"); got != 3 {
		t.Errorf("by error_type: %v", got)
	}
	if got, _ := fams.Value("brook_test_copy_count", "brook_copy_role", "owner"); got != 2 {
		t.Errorf("by role: %v", got)
	}
	if typ := fams.Type("brook_test_publish_duration_seconds"); typ != "histogram" {
		t.Errorf("duration type %q", typ)
	}
	if got, ok := fams.Value("target_info", "service_name", "brook-test", "service_instance_id", "t-1"); !ok || got != 1 {
		t.Errorf("target_info: %v %v", got, ok)
	}
	if _, ok := fams.Value("go_goroutines"); !ok {
		t.Error("no go runtime metrics")
	}
}

// TestMetricsPushedOverOTLP checks that an endpoint turns the OTLP push on
// unless OTEL_METRICS_EXPORTER leaves otlp out, and that Shutdown flushes
// it to the collector.
func TestMetricsPushedOverOTLP(t *testing.T) {
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/metrics" {
			posts.Add(1)
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	t.Setenv(EndpointEnv, srv.URL)
	t.Setenv(MetricsEndpointEnv, "")
	ctx := context.Background()
	for _, v := range []string{"none", "prometheus"} {
		t.Setenv(MetricsExporterEnv, v)
		m, err := NewMetrics(ctx, Options{Service: "brook-test"})
		if err != nil {
			t.Fatal(err)
		}
		if m.OTLP() {
			t.Fatalf("OTLP push on with %s=%s", MetricsExporterEnv, v)
		}
		_ = m.Shutdown(ctx)
	}
	t.Setenv(MetricsExporterEnv, "console,otlp")
	m, err := NewMetrics(ctx, Options{Service: "brook-test"})
	if err != nil {
		t.Fatal(err)
	}
	if !m.OTLP() {
		t.Fatal("OTLP push off with an endpoint")
	}
	c, _ := Meter(m.MeterProvider(), "test").Int64Counter("brook.test.things")
	c.Add(ctx, 1)
	if err := m.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if posts.Load() == 0 {
		t.Fatal("nothing pushed to the collector on shutdown")
	}
}

// TestMeterNil is the no-op meter of callers without a provider.
func TestMeterNil(t *testing.T) {
	c, err := Meter(nil, "x").Int64Counter("brook.test.things")
	if err != nil {
		t.Fatal(err)
	}
	c.Add(context.Background(), 1)
	var m *Metrics
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestMetricsExportInterval checks that OTEL_METRIC_EXPORT_INTERVAL sets
// the push period (the default would not push within the test).
func TestMetricsExportInterval(t *testing.T) {
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/metrics" {
			posts.Add(1)
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	t.Setenv(EndpointEnv, srv.URL)
	t.Setenv(MetricsExporterEnv, "")
	t.Setenv(ExportIntervalEnv, "50")
	ctx := context.Background()
	m, err := NewMetrics(ctx, Options{Service: "brook-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Shutdown(ctx) }()
	c, _ := Meter(m.MeterProvider(), "test").Int64Counter("brook.test.things")
	c.Add(ctx, 1)
	deadline := time.Now().Add(5 * time.Second)
	for posts.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("nothing pushed within 5s at a 50ms interval")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// AttrOptions builds one option per attribute and hands it back without
// building it again: a lookup of a known attribute costs at most its key.
func TestAttrOptionsReusesOnePerAttribute(t *testing.T) {
	var a AttrOptions
	k := attribute.Key("error.type")
	if a.Of(k.String("x")) == a.Of(k.String("y")) {
		t.Error("two attributes share an option")
	}
	if n := testing.AllocsPerRun(100, func() { a.Of(k.String("x")) }); n > 1 {
		t.Errorf("%v allocations per lookup of a known attribute; building the option takes more", n)
	}
}
