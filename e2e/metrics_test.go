package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/e2e/internal/workload"
	"github.com/brook-streams/brook/pkg/telemetry/metricstest"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/tools/auth"
	"github.com/brook-streams/brook/tools/cluster"
)

// Where the metrics are documented and charted, relative to this module.
const (
	metricsDoc       = "../docs/architecture.md"
	metricsDashboard = "../deploy/grafana/brook.json"
)

// conditionalMetrics are documented metrics a process serves only while
// something is true (a follower lags), so a scrape may miss them.
var conditionalMetrics = []string{"brook_host_stream_lag_records", "brook_host_stream_lag_time_seconds", "brook_coordinator_move_count_total"}

// documentedMetric is one row of the metrics table of
// docs/architecture.md.
type documentedMetric struct {
	name, typ string
	labels    []string
}

// documentedMetrics reads the metrics table of docs/architecture.md (its
// rows start with "| `brook_").
func documentedMetrics(t *testing.T) []documentedMetric {
	t.Helper()
	f, err := os.Open(metricsDoc)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	unquote := func(cell string) []string {
		var out []string
		for _, part := range strings.Split(cell, ",") {
			if p := strings.Trim(strings.TrimSpace(part), "`"); p != "" {
				out = append(out, p)
			}
		}
		return out
	}
	var ms []documentedMetric
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "| `brook_") {
			continue
		}
		// | name | instrument | type | unit | labels | meaning |
		cells := strings.Split(line, "|")
		if len(cells) < 8 {
			t.Fatalf("%s: a metrics row of %d cells: %s", metricsDoc, len(cells), line)
		}
		ms = append(ms, documentedMetric{
			name:   strings.Trim(strings.TrimSpace(cells[1]), "`"),
			typ:    strings.TrimSpace(cells[3]),
			labels: unquote(cells[5]),
		})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(ms) < 20 {
		t.Fatalf("%s documents %d metrics; the table was not found", metricsDoc, len(ms))
	}
	return ms
}

// scrapeAll scrapes every running process of the cluster but skip.
func scrapeAll(ctx context.Context, c *cluster.Cluster, skip *cluster.Proc) (map[*cluster.Proc]metricstest.Families, error) {
	out := map[*cluster.Proc]metricstest.Families{}
	var errs []error
	for _, p := range c.Procs() {
		if p == skip {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		f, err := metricstest.Scrape(sctx, p.MetricsURL())
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p.Name, err))
			continue
		}
		out[p] = f
	}
	return out, errors.Join(errs...)
}

// total sums name's matching series over the processes of kind.
func total(all map[*cluster.Proc]metricstest.Families, kind, name string, pairs ...string) float64 {
	var s float64
	for p, f := range all {
		if p.Kind == kind {
			v, _ := f.Value(name, pairs...)
			s += v
		}
	}
	return s
}

// TestMetrics scrapes every service's /metrics around an owner's failover
// and parses each answer with expfmt's text parser. Under a steady load
// the owner counts confirms, appends, fsyncs and group commits; the owner
// is SIGKILLed, and every other process is scraped every 100 ms until the
// stream serves again (each answers, and parses, throughout); after it the
// leader has counted the failover started and completed with a duration,
// the nodes by liveness show the expired host, the new owner confirms,
// the old followers answered seals, and every metric docs/architecture.md
// lists is served by some process.
func TestMetrics(t *testing.T) {
	e := newEnv(t, opts{attention: true})
	const stream = "metrics"
	before := e.createStream(stream, 3)
	oldOwner := before.Assignment.Owner
	epoch := before.Assignment.Epoch

	led := workload.NewLedger()
	ld := e.load(stream, "mt", led)
	defer func() { _ = ld.Stop() }()
	e.waitConfirms(led, 200, epoch)

	// One publish refused on purpose: a producer header without a
	// sequence is a bad request.
	nopts, err := e.c.NATSOptions(auth.Admin)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(e.c.NATSURL(), nopts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	bad := nats.NewMsg(wire.PublishSubject(stream))
	bad.Header.Set(wire.HeaderProducer, "metrics-test")
	bad.Data = []byte("x")
	if resp, err := nc.RequestMsg(bad, 5*time.Second); err != nil {
		t.Fatal(err)
	} else if code := resp.Header.Get("Brook-Error"); code != wire.CodeBadRequest {
		t.Fatalf("publish with a producer and no sequence: %q %s", code, resp.Data)
	}

	all, err := scrapeAll(e.ctx, e.c, nil)
	if err != nil {
		t.Fatalf("scrape before the kill: %v", err)
	}
	owner := e.host(oldOwner)
	of := all[owner]
	for _, name := range []string{"brook_host_publish_confirmed_total",
		"brook_host_append_records_total", "brook_host_append_payload_bytes_total"} {
		if v, _ := of.Value(name); v < 100 {
			t.Errorf("the owner's %s is %v after 200 confirms", name, v)
		}
	}
	// One sample per group commit, and one confirm latency per reply (a
	// publish or a batch): the load's 4 synchronous publishers have at
	// most 4 records in one, so 200 confirms took at least 50 (the
	// client's batching decides how many more).
	for _, name := range []string{"brook_host_store_fsync_duration_seconds", "brook_host_store_group_commit_size",
		"brook_host_publish_duration_seconds"} {
		if v, _ := of.Value(name); v < 50 {
			t.Errorf("the owner's %s is %v after 200 confirms from 4 publishers", name, v)
		}
	}
	if v, _ := of.Value("brook_host_publish_refused_total", "error_type", wire.CodeBadRequest); v != 1 {
		t.Errorf("the owner's bad_request refusals: %v", v)
	}
	if v, _ := of.Value("brook_host_copy_count", "brook_copy_role", wire.RoleOwner); v != 1 {
		t.Errorf("the owner's owner copies: %v", v)
	}
	// The harness runs the hosts with their direct replication link: both
	// followers' hosts replicate with the owner's on a connection of their
	// own.
	if v, _ := of.Value("brook_host_replication_links", "brook_link_side", "owner"); v != float64(len(before.Assignment.Followers)) {
		t.Errorf("the owner's host serves %v direct connections; its followers are %v", v, before.Assignment.Followers)
	}
	// and the load's client publishes on a client link of its own.
	if v, _ := of.Value("brook_host_replication_links", "brook_link_side", "client"); v < 1 {
		t.Errorf("the owner's host serves %v client links; the load's client has none", v)
	}
	if got := of.LabelValues("brook_host_follower_lag_records", "brook_follower"); !slices.Equal(got, slices.Sorted(slices.Values(before.Assignment.Followers))) {
		t.Errorf("the owner reports the lag of %v; its followers are %v", got, before.Assignment.Followers)
	}
	if v := total(all, cluster.KindCoordinator, "brook_coordinator_raft_leader"); v != 1 {
		t.Errorf("%v coordinators say they lead", v)
	}
	if v := total(all, cluster.KindCoordinator, "brook_coordinator_node_count", "brook_node_state", wire.NodeLive); v != float64(4*e.c.Coordinators()) {
		t.Errorf("live nodes summed over the coordinators: %v", v)
	}
	if _, ok := all[e.c.Attention()].Value("brook_attention_entry_count"); !ok {
		t.Error("attention serves no entry counts")
	}

	// The kill, and scrapes of everything else every 100 ms until the
	// stream serves at the next epoch.
	e.signal(owner, syscall.SIGKILL)
	ctx, stop := context.WithCancel(e.ctx)
	var mu sync.Mutex
	scrapes := map[string]int{}
	var scrapeErrs []error
	var pollers sync.WaitGroup
	pollers.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			got, err := scrapeAll(ctx, e.c, owner)
			mu.Lock()
			for p := range got {
				scrapes[p.Name]++
			}
			if err != nil && ctx.Err() == nil {
				scrapeErrs = append(scrapeErrs, err)
			}
			mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	after := e.waitServingAt(stream, epoch+1, oldOwner)
	e.waitConfirms(led, 100, epoch+1)
	stop()
	pollers.Wait()
	if len(scrapeErrs) > 0 {
		t.Errorf("scrapes during the failover failed (%d), first: %v", len(scrapeErrs), scrapeErrs[0])
	}
	for _, p := range e.c.Procs() {
		if p != owner && scrapes[p.Name] == 0 {
			t.Errorf("%s was never scraped during the failover", p.Name)
		}
	}
	e.logf("failover %s -> %s; scrapes during it: %v", oldOwner, after.Assignment.Owner, scrapes)

	// After the failover: the coordinators' gauges follow the state as
	// each replica applies it; the counters are the leader's.
	var last map[*cluster.Proc]metricstest.Families
	e.poll("the failover in the metrics", waitLong, func(ctx context.Context) (bool, string, error) {
		all, err := scrapeAll(ctx, e.c, owner)
		if err != nil {
			return false, "", err
		}
		last = all
		n := e.c.Coordinators()
		state := fmt.Sprintf("completed %v, duration count %v, expired %v, serving %v",
			total(all, cluster.KindCoordinator, "brook_coordinator_failover_completed_total"),
			total(all, cluster.KindCoordinator, "brook_coordinator_failover_duration_seconds"),
			total(all, cluster.KindCoordinator, "brook_coordinator_node_count", "brook_node_state", wire.NodeExpired),
			total(all, cluster.KindCoordinator, "brook_coordinator_stream_count", "brook_stream_status", wire.StatusServing))
		return total(all, cluster.KindCoordinator, "brook_coordinator_failover_completed_total", "brook_failover_reason", "expired") >= 1 &&
			total(all, cluster.KindCoordinator, "brook_coordinator_node_count", "brook_node_state", wire.NodeExpired) == float64(n) &&
			total(all, cluster.KindCoordinator, "brook_coordinator_stream_count", "brook_stream_status", wire.StatusServing) == float64(n), state, nil
	})
	if v := total(last, cluster.KindCoordinator, "brook_coordinator_failover_started_total", "brook_failover_reason", "expired"); v < 1 {
		t.Errorf("failovers started: %v", v)
	}
	if v := total(last, cluster.KindCoordinator, "brook_coordinator_failover_duration_seconds"); v < 1 {
		t.Errorf("failover durations recorded: %v", v)
	}
	if d := total(last, cluster.KindCoordinator, "brook_coordinator_failover_duration_seconds"); d > 0 {
		sum := 0.0
		for p, f := range last {
			if p.Kind == cluster.KindCoordinator {
				sum += f.Sum("brook_coordinator_failover_duration_seconds")
			}
		}
		e.logf("failover duration from detection to commit: %.3fs over %v failovers", sum/d, d)
		if sum <= 0 || sum/d > waitLong.Seconds() {
			t.Errorf("failover duration %vs", sum/d)
		}
	}
	if v := total(last, cluster.KindCoordinator, "brook_coordinator_stream_under_replicated"); v != float64(e.c.Coordinators()) {
		t.Errorf("under-replicated streams summed over the coordinators: %v (2 of 3 copies after the failover)", v)
	}
	if v := total(last, cluster.KindCoordinator, "brook_coordinator_raft_proposal_duration_seconds", "brook_raft_command", "recovery.commit"); v < 1 {
		t.Errorf("recovery commits timed: %v", v)
	}
	newOwner := last[e.host(after.Assignment.Owner)]
	if v, _ := newOwner.Value("brook_host_publish_confirmed_total"); v < 100 {
		t.Errorf("the new owner confirmed %v", v)
	}
	if v, _ := newOwner.Value("brook_host_copy_count", "brook_copy_role", wire.RoleOwner); v != 1 {
		t.Errorf("the new owner's owner copies: %v", v)
	}
	if v := total(last, cluster.KindStreamHost, "brook_host_seal_answered_total", "error_type", ""); v < 2 {
		t.Errorf("seals answered by the old followers: %v, want at least R=2", v)
	}

	// Every documented metric is served by some process.
	served := map[string]bool{}
	for _, f := range last {
		for _, n := range f.Names() {
			served[n] = true
		}
	}
	for _, f := range all {
		for _, n := range f.Names() {
			served[n] = true
		}
	}
	for _, m := range documentedMetrics(t) {
		if !served[m.name] && !slices.Contains(conditionalMetrics, m.name) {
			t.Errorf("%s is documented but no process serves it", m.name)
			continue
		}
		for p, f := range last {
			if typ := f.Type(m.name); typ != "" && typ != m.typ {
				t.Errorf("%s is documented as a %s; %s serves a %s", m.name, m.typ, p.Name, typ)
			}
			for _, l := range f.LabelNames(m.name) {
				if !slices.Contains(m.labels, l) {
					t.Errorf("%s has label %s on %s, not documented (%v)", m.name, l, p.Name, m.labels)
				}
			}
		}
	}
	e.stopLoad(ld, led)
}

// promQLIdent finds identifiers in a PromQL expression.
var promQLIdent = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)

// TestMetricsDashboard parses the Grafana dashboard and checks that every
// metric its queries name is one the services serve (the table of
// docs/architecture.md, which TestMetrics holds to what is served), with
// the _bucket, _sum and _count series of the histograms; brook_ names
// that are the table's labels are not metrics.
func TestMetricsDashboard(t *testing.T) {
	data, err := os.ReadFile(metricsDashboard)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("%s: %v", metricsDashboard, err)
	}
	known, labels := map[string]bool{}, map[string]bool{}
	for _, m := range documentedMetrics(t) {
		known[m.name] = true
		if m.typ == "histogram" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				known[m.name+s] = true
			}
		}
		for _, l := range m.labels {
			labels[l] = true
		}
	}
	exprs := 0
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs++
			names := 0
			for _, id := range promQLIdent.FindAllString(tg.Expr, -1) {
				if strings.HasPrefix(id, "brook_") && !labels[id] {
					names++
					if !known[id] {
						t.Errorf("panel %q names %s, which no service serves: %s", p.Title, id, tg.Expr)
					}
				}
			}
			if names == 0 {
				t.Errorf("panel %q queries no brook metric: %s", p.Title, tg.Expr)
			}
		}
	}
	if dash.Title == "" || exprs < 10 {
		t.Fatalf("%s: title %q, %d queries", metricsDashboard, dash.Title, exprs)
	}
}
