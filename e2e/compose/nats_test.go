package compose

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/client"
	"github.com/brook-streams/brook/pkg/wire"
)

// natsMonitor GETs path of NATS server srv's monitoring endpoints (port
// 8222, published on this machine) and decodes the answer into v.
func (s *stack) natsMonitor(ctx context.Context, srv, path string, v any) error {
	addr, err := s.Published(ctx, srv, 8222)
	if err != nil {
		return err
	}
	if err := getJSON(ctx, "http://"+addr+path, v); err != nil {
		return fmt.Errorf("%s of %s: %w", path, srv, err)
	}
	return nil
}

// NATSConns returns the names of the client connections each of the NATS
// servers holds (its /connz), by service: a name once per connection, so
// a coordinator, whose BROOK and system-account connections share its
// name, appears twice.
func (s *stack) NATSConns(ctx context.Context, servers ...string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, srv := range servers {
		var connz struct {
			Conns []struct {
				Name string `json:"name"`
			} `json:"connections"`
		}
		if err := s.natsMonitor(ctx, srv, "/connz?limit=1024", &connz); err != nil {
			return nil, err
		}
		out[srv] = []string{}
		for _, c := range connz.Conns {
			out[srv] = append(out[srv], c.Name)
		}
	}
	return out, nil
}

// NATSRoutes returns the server names NATS server srv has routes to (its
// /routez; with route pooling a peer has several routes, named once).
func (s *stack) NATSRoutes(ctx context.Context, srv string) ([]string, error) {
	var routez struct {
		Routes []struct {
			RemoteName string `json:"remote_name"`
		} `json:"routes"`
	}
	if err := s.natsMonitor(ctx, srv, "/routez", &routez); err != nil {
		return nil, err
	}
	var peers []string
	for _, r := range routez.Routes {
		if !slices.Contains(peers, r.RemoteName) {
			peers = append(peers, r.RemoteName)
		}
	}
	slices.Sort(peers)
	return peers, nil
}

// countNames counts the connections of each name over servers.
func countNames(conns map[string][]string) map[string]int {
	n := map[string]int{}
	for _, names := range conns {
		for _, name := range names {
			n[name]++
		}
	}
	return n
}

// connCounts describes how many connections each server holds.
func connCounts(conns map[string][]string) string {
	var parts []string
	for _, srv := range slices.Sorted(maps.Keys(conns)) {
		parts = append(parts, fmt.Sprintf("%s %d", srv, len(conns[srv])))
	}
	return strings.Join(parts, ", ")
}

// loseNATS kills, under the running load, a NATS server the services are
// connected to: of nats2 and nats3 (the test's clients are on nats1), the
// one the stream's owner is on, or else the one with more connections. It
// checks that every connection the server held reconnects to the other
// two, that publishes keep confirming at the stream's epoch (no failover,
// no new failover trace) with every stream host live; then it starts the
// server again, waits until it has routes to both others (not for its
// health check: nothing later needs it) and checks the same once more.
// The caller reads every confirmed record back.
func loseNATS(ctx context.Context, t *testing.T, s *stack, cl *client.Client, ld *load, stream string) {
	t.Helper()
	before, err := cl.StreamInfo(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	epoch := before.Assignment.Epoch
	conns, err := s.NATSConns(ctx, natsServers...)
	if err != nil {
		t.Fatal(err)
	}
	candidates := natsServers[1:]
	victim := slices.MaxFunc(candidates, func(a, b string) int { return len(conns[a]) - len(conns[b]) })
	for _, srv := range candidates {
		if slices.Contains(conns[srv], "brook-streamhost:"+before.Assignment.Owner) {
			victim = srv
		}
	}
	if len(conns[victim]) == 0 {
		t.Fatalf("no service is connected to %v: %v", candidates, conns)
	}
	var survivors []string
	for _, srv := range natsServers {
		if srv != victim {
			survivors = append(survivors, srv)
		}
	}
	want := countNames(conns)
	id, err := s.Container(ctx, victim)
	if err != nil {
		t.Fatal(err)
	}
	n := ld.CountSince(epoch)
	lostAt := time.Now()
	if err := docker(ctx, "kill", "--signal", "KILL", id); err != nil {
		t.Fatal(err)
	}
	slices.Sort(conns[victim])
	t.Logf("nats kill: killed %s (connections: %s; owner %s at epoch %d), which held %s", victim, connCounts(conns),
		before.Assignment.Owner, epoch, strings.Join(conns[victim], ", "))

	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var have map[string]int
	err = poll(wctx, "every connection of "+victim+" on "+strings.Join(survivors, " or "), func(ctx context.Context) (bool, error) {
		now, err := s.NATSConns(ctx, survivors...)
		if err != nil {
			return false, err
		}
		have = countNames(now)
		for name, c := range want {
			if have[name] < c {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("%v: want %v, have %v", err, want, have)
	}
	moved := time.Since(lostAt)
	if _, err := ld.WaitConfirms(wctx, n+100, epoch); err != nil {
		t.Fatal(err)
	}
	t.Logf("nats kill: every connection moved within %v, 100 more confirms at epoch %d within %v",
		moved.Round(time.Millisecond), epoch, time.Since(lostAt).Round(time.Millisecond))
	checkUnmoved(wctx, t, cl, ld, stream, before, "nats kill")

	if err := docker(ctx, "start", id); err != nil {
		t.Fatal(err)
	}
	backAt := time.Now()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var peers []string
	err = poll(rctx, victim+" routed to "+strings.Join(survivors, " and "), func(ctx context.Context) (bool, error) {
		var err error
		peers, err = s.NATSRoutes(ctx, victim) // an error until it listens
		return err == nil && slices.Equal(peers, survivors), nil
	})
	if err != nil {
		t.Fatalf("%v (routes to %v)", err, peers)
	}
	n = ld.CountSince(epoch)
	if _, err := ld.WaitConfirms(rctx, n+100, epoch); err != nil {
		t.Fatal(err)
	}
	checkUnmoved(rctx, t, cl, ld, stream, before, "nats restart")
	t.Logf("nats restart: %s routed to %v within %v; the stream still serves at epoch %d (load: %s)",
		victim, peers, time.Since(backAt).Round(time.Millisecond), epoch, ld.Summary())
}

// checkUnmoved checks that stream still serves with before's assignment and
// no new failover trace, that nothing was confirmed at a later epoch, and
// that the coordinators have a leader and every stream host is live.
func checkUnmoved(ctx context.Context, t *testing.T, cl *client.Client, ld *load, stream string, before wire.StreamInfo, what string) {
	t.Helper()
	info, err := cl.StreamInfo(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	a, b := info.Assignment, before.Assignment
	switch {
	case info.Status != wire.StatusServing || a.Epoch != b.Epoch || a.Owner != b.Owner || !slices.Equal(a.Followers, b.Followers):
		t.Fatalf("%s: stream %s is %s with %+v, was serving with %+v", what, stream, info.Status, a, b)
	case info.LastTraceID != before.LastTraceID:
		t.Fatalf("%s: a new failover trace %s", what, info.LastTraceID)
	case ld.CountSince(b.Epoch+1) > 0:
		t.Fatalf("%s: confirms past epoch %d (load: %s)", what, b.Epoch, ld.Summary())
	}
	ready, err := clusterReady(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if !ready {
		ci, _ := cl.ClusterInfo(ctx)
		t.Fatalf("%s: the coordinators have no leader or a stream host is not live: %+v", what, ci)
	}
}
