package server

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/telemetry"
	"github.com/brook-streams/brook/pkg/telemetry/metricstest"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/attention/judge"
)

// TestAttentionMetrics lists an owner-only stream whose owner expired and
// reads /metrics from the service's handler: the entry is counted under
// its kind, the other kinds at 0, and the count drops when the entry
// clears.
func TestAttentionMetrics(t *testing.T) {
	t.Setenv(telemetry.EndpointEnv, "")
	m, err := telemetry.NewMetrics(context.Background(), telemetry.Options{Service: "brook-attention"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	ns := startNATS(t)
	fc := newFakeCoordinator(t, connect(t, ns, "coordinator"))
	svc := New(connect(t, ns, "brook-attention"), Options{
		Judge:          judge.Config{TTL: testTTL, LagWindow: 10 * time.Second},
		Refresh:        testRefresh,
		RequestTimeout: time.Second,
		Logger:         testLogger(t),
		MeterProvider:  m.MeterProvider(),
		MetricsHandler: m.Handler(),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	web := httptest.NewServer(svc.Handler())
	defer web.Close()
	url := web.URL + telemetry.MetricsPath

	if f, err := metricstest.Scrape(ctx, url); err != nil {
		t.Fatal(err)
	} else if _, ok := f.Value("brook_attention_entry_count"); ok {
		t.Fatal("entries counted before anything was judged")
	}

	solo := asg("solo", 3, 1, "majority_durable", "h1")
	fc.set(t, 1, []wire.StreamInfo{info(solo, wire.StatusWaiting)}, nodes("h1", wire.NodeExpired), true)
	count := func(kind string) float64 {
		f, err := metricstest.Scrape(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		v, _ := f.Value("brook_attention_entry_count", "brook_attention_kind", kind)
		return v
	}
	eventually(t, 5*time.Second, "the owner-only entry counted", func() (bool, string) {
		v := count(wire.AttentionOwnerOnly)
		return v == 1, fmt.Sprint("count ", v)
	})
	f, err := metricstest.Scrape(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if kinds := f.LabelValues("brook_attention_entry_count", "brook_attention_kind"); len(kinds) < len(knownKinds) {
		t.Errorf("kinds reported: %v; want every known kind", kinds)
	}
	reply, _, _ := svc.List()
	if v, _ := f.Value("brook_attention_entry_count"); v != float64(len(reply.Entries)) {
		t.Errorf("entries in all: %v; the list has %v", v, entryKinds(reply.Entries))
	}

	// h1 is back: it beats again and serves its copy. (Without its
	// beats the judge would rightly take it for down once it has listened
	// for a TTL.)
	startHeartbeats(t, connect(t, ns, "h1")).run("h1", cs(solo, wire.RoleOwner, 1, 0, false))
	fc.set(t, 2, []wire.StreamInfo{info(solo, wire.StatusServing)}, nodes("h1", wire.NodeLive), true)
	eventually(t, 5*time.Second, "the entry cleared", func() (bool, string) {
		v := count(wire.AttentionOwnerOnly)
		return v == 0, fmt.Sprint("count ", v)
	})
}
