package server

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/telemetry"
	"github.com/brook-streams/brook/pkg/telemetry/metricstest"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/internal/testutil"
)

// testMetrics returns metrics with a Prometheus handler, exported nowhere
// else, shut down when the test ends.
func testMetrics(t *testing.T) *telemetry.Metrics {
	t.Setenv(telemetry.EndpointEnv, "")
	m, err := telemetry.NewMetrics(context.Background(), telemetry.Options{Service: "brook-coordinator"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	return m
}

// TestCoordinatorMetrics runs one coordinator with metrics, fails a
// stream's owner over and reads /metrics: the failover is counted started
// and completed with its duration, the stream is serving and
// under-replicated, the lost node counts as expired, the coordinator leads
// and its proposals are timed.
func TestCoordinatorMetrics(t *testing.T) {
	m := testMetrics(t)
	c := newCluster(t, 1, func(o *Options) {
		o.TTL = 5 * time.Second
		o.MeterProvider = m.MeterProvider()
		o.MetricsHandler = m.Handler()
		o.HTTPAddr = "127.0.0.1:0"
	})
	var url string
	for _, s := range c.servers {
		url = "http://" + s.HTTPAddr() + telemetry.MetricsPath
	}
	h1 := c.host("h1")
	c.host("h2")
	c.host("h3")
	testutil.Eventually(t, 5*time.Second, "three live hosts", func() bool {
		var ci wire.ClusterInfo
		return c.admin(wire.VerbClusterInfo, "", &ci) == nil && len(ci.Nodes) == 3
	})
	info := c.create("s1", 3)
	if info.Assignment.Owner != "h1" {
		t.Fatalf("created %+v", info.Assignment)
	}
	ctx := context.Background()
	f, err := metricstest.Scrape(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := f.Value("brook_coordinator_failover_started_total"); v != 0 {
		t.Fatalf("failovers before any: %v", v)
	}
	if v, _ := f.Value("brook_coordinator_node_count", "brook_node_state", wire.NodeLive); v != 3 {
		t.Fatalf("live nodes %v", v)
	}

	h1.kill()
	c.waitInfo("s1", "the failover commit", 15*time.Second, func(i wire.StreamInfo) bool {
		return i.Assignment.Epoch == 2 && i.Recovery == nil
	})
	testutil.Eventually(t, 5*time.Second, "the failover counted", func() bool {
		f, err = metricstest.Scrape(ctx, url)
		v, _ := f.Value("brook_coordinator_failover_completed_total", "brook_failover_reason", "expired")
		return err == nil && v == 1
	})
	for _, c := range []struct {
		name  string
		want  float64
		pairs []string
	}{
		{"brook_coordinator_failover_started_total", 1, []string{"brook_failover_reason", "expired"}},
		{"brook_coordinator_failover_duration_seconds", 1, []string{"brook_failover_reason", "expired"}},
		{"brook_coordinator_failover_pending", 0, nil},
		{"brook_coordinator_failover_waiting", 0, nil},
		{"brook_coordinator_stream_count", 1, []string{"brook_stream_status", wire.StatusServing}},
		{"brook_coordinator_stream_count", 0, []string{"brook_stream_status", wire.StatusRecovering}},
		{"brook_coordinator_stream_under_replicated", 1, nil},
		// Two copies left of three under majority_durable: W = 2.
		{"brook_coordinator_stream_under_replicated_at_risk", 0, nil},
		{"brook_coordinator_node_count", 1, []string{"brook_node_state", wire.NodeExpired}},
		{"brook_coordinator_node_count", 2, []string{"brook_node_state", wire.NodeLive}},
		{"brook_coordinator_raft_leader", 1, nil},
	} {
		if got, ok := f.Value(c.name, c.pairs...); !ok || got != c.want {
			t.Errorf("%s%v = %v (present %v), want %v", c.name, c.pairs, got, ok, c.want)
		}
	}
	if d := f.Sum("brook_coordinator_failover_duration_seconds"); d <= 0 || d > 15 {
		t.Errorf("failover duration %vs", d)
	}
	if v, _ := f.Value("brook_coordinator_raft_proposal_duration_seconds", "brook_raft_command", "recovery.commit"); v < 1 {
		t.Errorf("recovery commit proposals timed: %v; commands %v", v, f.LabelValues("brook_coordinator_raft_proposal_duration_seconds", "brook_raft_command"))
	}

	// The handler answers as the services' does, with the text format.
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct == "" {
		t.Errorf("GET /metrics: %s %q", resp.Status, ct)
	}
}
