package host

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/telemetry"
	"github.com/brook-streams/brook/pkg/telemetry/metricstest"
	"github.com/brook-streams/brook/pkg/wire"
)

// withMetrics gives a host of the mini cluster a meter provider and
// returns the URL of its /metrics.
func withMetrics(t *testing.T) (func(*Config), string) {
	t.Helper()
	t.Setenv(telemetry.EndpointEnv, "")
	m, err := telemetry.NewMetrics(context.Background(), telemetry.Options{Service: "brook-streamhost"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	mux := http.NewServeMux()
	m.Mount(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return func(cfg *Config) { cfg.MeterProvider = m.MeterProvider() }, srv.URL + telemetry.MetricsPath
}

// TestHostMetrics publishes to an owner whose second follower never runs,
// refuses a publish and answers seals, and reads the host's /metrics: the
// confirms, refusals, appends, group commits, copies by role, follower
// lag (records and age, per follower and per stream), seals and the
// replication messages received all show.
func TestHostMetrics(t *testing.T) {
	const stream, id = "metered", 21
	c := newMiniCluster(t)
	c.assign(assignment(stream, id, 1, "n1", []string{"n2", "n3"})) // W = 2; n3 never runs
	m1, url1 := withMetrics(t)
	m2, url2 := withMetrics(t)
	c.start("n1", func(cfg *Config) {
		m1(cfg)
		cfg.MaxPayload = 64
	})
	c.start("n2", m2)
	c.waitCopy("n1", stream, "owner", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner })
	c.waitCopy("n2", stream, "follower", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleFollower })
	for i := range 5 {
		c.mustPublish(stream, payload(i))
	}
	if _, e := c.publish(stream, make([]byte, 100), "", 0); e == nil || e.Code != wire.CodePayloadTooLarge {
		t.Fatalf("publish over the limit: %v", e)
	}
	if _, e := c.seal("n1", stream, id+1, 2, 1); e == nil || e.Code != wire.CodeNotFound {
		t.Fatalf("seal of another stream id: %v", e)
	}
	time.Sleep(20 * time.Millisecond) // the lag's age is measurable
	// Changes that found the marking queue full (a burst the test cannot
	// time) are counted by the idle sets; the counter exports their count.
	c.mu.Lock()
	c.hosts["n1"].h.parked.overflows.Add(3)
	c.mu.Unlock()

	ctx := context.Background()
	f, err := metricstest.Scrape(ctx, url1)
	if err != nil {
		t.Fatal(err)
	}
	want := func(name string, want float64, pairs ...string) {
		t.Helper()
		if got, ok := f.Value(name, pairs...); !ok || got != want {
			t.Errorf("%s%v = %v (present %v), want %v", name, pairs, got, ok, want)
		}
	}
	atLeast := func(name string, min float64, pairs ...string) {
		t.Helper()
		if got, ok := f.Value(name, pairs...); !ok || got < min {
			t.Errorf("%s%v = %v (present %v), want at least %v", name, pairs, got, ok, min)
		}
	}
	want("brook_host_publish_confirmed_total", 5)
	want("brook_host_publish_refused_total", 1, "error_type", wire.CodePayloadTooLarge)
	want("brook_host_publish_duration_seconds", 5)
	want("brook_host_append_records_total", 5)
	want("brook_host_append_payload_bytes_total", float64(5*len(payload(0))))
	atLeast("brook_host_store_fsync_duration_seconds", 1)
	atLeast("brook_host_store_group_commit_size", 1)
	// n2's requests and its standalone acks of what they brought.
	atLeast("brook_host_replication_received_total", 1, "brook_replication_kind", replKindRequest)
	atLeast("brook_host_replication_received_total", 1, "brook_replication_kind", replKindAck)
	want("brook_host_copy_count", 1, "brook_copy_role", wire.RoleOwner)
	want("brook_host_copy_count", 0, "brook_copy_role", wire.RoleFollower)
	want("brook_host_follower_lag_records", 5, "brook_follower", "n3")
	want("brook_host_follower_lag_records", 0, "brook_follower", "n2")
	want("brook_host_stream_lag_records", 5, "brook_stream", stream, "brook_follower", "n3")
	if _, ok := f.Value("brook_host_stream_lag_records", "brook_follower", "n2"); ok {
		t.Error("a follower that lacks nothing has a per-stream lag series")
	}
	if age, _ := f.Value("brook_host_follower_lag_time_seconds", "brook_follower", "n3"); age < 0.01 || age > 60 {
		t.Errorf("n3's lag age %vs; want the age of the first record", age)
	}
	want("brook_host_seal_answered_total", 1, "error_type", wire.CodeNotFound)
	want("brook_host_idle_mark_overflows_total", 3)
	if s := f.Sum("brook_host_publish_duration_seconds"); s <= 0 {
		t.Errorf("confirm latency sum %v", s)
	}

	// A seal that fences n2's copy is answered and counted there.
	if _, e := c.seal("n2", stream, id, 2, 1); e != nil {
		t.Fatalf("seal n2: %v", e)
	}
	f2, err := metricstest.Scrape(ctx, url2)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := f2.Value("brook_host_seal_answered_total", "error_type", ""); got != 1 {
		t.Errorf("n2 seals answered: %v", got)
	}
	if got, _ := f2.Value("brook_host_copy_count", "brook_copy_role", wire.RoleNone); got != 1 {
		t.Errorf("n2's sealed copy plays no role: %v", got)
	}
}

// BenchmarkMetricsSent is what the metrics add to each batch of confirms
// the owner sends (a counter add per batch, a histogram record per
// confirm), with the real SDK behind them; per op is one batch of 16.
func BenchmarkMetricsSent(b *testing.B) {
	b.Setenv(telemetry.EndpointEnv, "")
	m, err := telemetry.NewMetrics(context.Background(), telemetry.Options{Service: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = m.Shutdown(context.Background()) }()
	met, err := newMetrics(m.MeterProvider())
	if err != nil {
		b.Fatal(err)
	}
	out := make([]outgoing, 16)
	start := time.Now()
	for i := range out {
		out[i] = outgoing{ok: &wire.PublishConfirm{}, start: start}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		met.sent(out)
		met.appended(16, 4096)
	}
}
