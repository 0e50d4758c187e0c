package server

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/telemetry"
	"github.com/brook-streams/brook/pkg/telemetry/metricstest"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/controller"
	"github.com/brook-streams/brook/services/coordinator/internal/testutil"
)

// gateProber answers h1's first probe only when the test releases it
// (the answer is late: handled after the host's connection closed);
// every other probe finds no responders.
type gateProber struct {
	n                atomic.Int32
	started, release chan struct{}
	answer           wire.Heartbeat
}

func (p *gateProber) Probe(ctx context.Context, node string, _ time.Duration) (controller.ProbeOutcome, wire.Heartbeat) {
	if node != "h1" {
		return controller.ProbeNoResponders, wire.Heartbeat{}
	}
	if p.n.Add(1) == 1 {
		close(p.started)
		select {
		case <-p.release:
			return controller.ProbeAnswered, p.answer
		case <-ctx.Done():
			return controller.ProbeAborted, wire.Heartbeat{}
		}
	}
	return controller.ProbeNoResponders, wire.Heartbeat{}
}

// TestLateProbeAnswerKeepsTheAdvisory (review r2 M1): h1's probe answer
// is handled after the advisory that its connection closed; the advisory
// still expires h1 about its grace after the close, not another TTL and
// probe later. The answer names h1's connection, as a host's does: the
// one the advisory closed.
func TestLateProbeAnswerKeepsTheAdvisory(t *testing.T) {
	const ttl = 3 * time.Second
	p := &gateProber{started: make(chan struct{}), release: make(chan struct{})}
	c := newCluster(t, 1, func(o *Options) { o.TTL = ttl; o.prober = p })
	h1, _ := c.host("h1"), c.host("h2")
	testutil.Eventually(t, 10*time.Second, "two live hosts", func() bool {
		st := c.nodeStates()
		return st["h1"] == wire.NodeLive && st["h2"] == wire.NodeLive
	})
	h1.mu.Lock()
	hnc := h1.nc
	h1.mu.Unlock()
	cid, err := hnc.GetClientID()
	if err != nil {
		t.Fatal(err)
	}
	p.answer = wire.Heartbeat{Node: "h1", Incarnation: 1, Live: true, AtMS: time.Now().UnixMilli(),
		ConnServer: hnc.ConnectedServerId(), ConnID: cid}
	h1.stopBeats()
	<-p.started
	killed := time.Now()
	h1.kill()
	time.Sleep(50 * time.Millisecond)
	close(p.release)
	testutil.Eventually(t, 3*ttl, "h1 expired", func() bool { return c.nodeStates()["h1"] == wire.NodeExpired })
	if took := time.Since(killed); took > ttl/2 {
		t.Fatalf("h1 expired %v after its connection closed: the late probe answer cancelled the advisory", took)
	}
}

// TestProbeWhileLeaderDisconnected (review r2 M2): a probe sent while
// this coordinator's own connection is down is aborted, not timed out.
func TestProbeWhileLeaderDisconnected(t *testing.T) {
	n := testutil.StartNATS(t)
	hnc, err := nats.Connect(n.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer hnc.Close()
	if _, err := hnc.Subscribe(wire.HostProbeSubject("h1"), func(m *nats.Msg) {
		data, _ := json.Marshal(wire.Heartbeat{Node: "h1", Incarnation: 1, Live: true})
		_ = m.Respond(data)
	}); err != nil {
		t.Fatal(err)
	}
	_ = hnc.Flush()
	nc, err := nats.Connect(n.URL, natsOptions("brook-coordinator:1", testLogger(t), func(*nats.Conn) {})...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	p := natsProber{nc: nc}
	if o, hb := p.Probe(context.Background(), "h1", 300*time.Millisecond); o != controller.ProbeAnswered || hb.Incarnation != 1 {
		t.Fatalf("connected: %v %d", o, hb.Incarnation)
	}
	n.Server.Shutdown()
	testutil.Eventually(t, 5*time.Second, "disconnected", func() bool { return !nc.IsConnected() })
	if o, _ := p.Probe(context.Background(), "h1", 300*time.Millisecond); o != controller.ProbeAborted {
		t.Fatalf("probe while this coordinator's own connection is down: %v, want aborted", o)
	}
}

// stallProber notes a stall of the coordinator while h1's first probe
// runs (as stallWatch would), and reports that probe timed out; every
// later probe finds no responders.
type stallProber struct {
	n     atomic.Int32
	stall atomic.Pointer[func()]
}

func (p *stallProber) Probe(context.Context, string, time.Duration) (controller.ProbeOutcome, wire.Heartbeat) {
	if p.n.Add(1) == 1 {
		(*p.stall.Load())()
		return controller.ProbeTimedOut, wire.Heartbeat{}
	}
	return controller.ProbeNoResponders, wire.Heartbeat{}
}

// TestProbeDuringAStallIsNotJudged (review r2 M2): a probe that timed out
// while this coordinator stalled does not expire the host; it is probed
// again once it has been silent for a TTL after the stall.
func TestProbeDuringAStallIsNotJudged(t *testing.T) {
	p := &stallProber{}
	c := newCluster(t, 1, func(o *Options) { o.TTL = 300 * time.Millisecond; o.prober = p })
	h1 := c.host("h1")
	testutil.Eventually(t, 10*time.Second, "h1 live", func() bool { return c.nodeStates()["h1"] == wire.NodeLive })
	s := c.servers[c.leader()]
	stall := func() { s.hearing.stalled(s.opt.Now()) }
	p.stall.Store(&stall)
	h1.stopBeats()
	testutil.Eventually(t, 10*time.Second, "h1 expired", func() bool { return c.nodeStates()["h1"] == wire.NodeExpired })
	if n := p.n.Load(); n < 2 {
		t.Fatalf("h1 expired after %d probe(s): the one that timed out during a stall of the coordinator judged it", n)
	}
}

// leavingProber answers every probe of h1 as a host whose store failed
// (leaving, with the error), and finds no responders for others.
type leavingProber struct{}

func (leavingProber) Probe(_ context.Context, node string, _ time.Duration) (controller.ProbeOutcome, wire.Heartbeat) {
	if node != "h1" {
		return controller.ProbeNoResponders, wire.Heartbeat{}
	}
	return controller.ProbeAnswered, wire.Heartbeat{Node: node, Incarnation: 1, Leaving: true, StoreError: "disk failed",
		Live: true, AtMS: time.Now().UnixMilli()}
}

// TestProbeAnswerLeaving (review r2 L1): an answer that says the host is
// leaving (its store failed) is taken as its heartbeat would be: the host
// leaves, rather than staying live on the answer.
func TestProbeAnswerLeaving(t *testing.T) {
	c := newCluster(t, 1, func(o *Options) { o.TTL = 300 * time.Millisecond; o.prober = leavingProber{} })
	h1 := c.host("h1")
	testutil.Eventually(t, 10*time.Second, "h1 live", func() bool { return c.nodeStates()["h1"] == wire.NodeLive })
	h1.stopBeats()
	testutil.Eventually(t, 10*time.Second, "h1 left", func() bool { return c.nodeStates()["h1"] == wire.NodeLeft })
}

// beatAgainProber: h1's first probe makes h1 beat again (it was heard
// while its probe ran) and then times out.
type beatAgainProber struct {
	n  atomic.Int32
	h1 *host
}

func (p *beatAgainProber) Probe(context.Context, string, time.Duration) (controller.ProbeOutcome, wire.Heartbeat) {
	if p.n.Add(1) == 1 {
		p.h1.mu.Lock()
		p.h1.quiet = false
		p.h1.mu.Unlock()
		p.h1.beat()
		time.Sleep(200 * time.Millisecond)
	}
	return controller.ProbeTimedOut, wire.Heartbeat{}
}

// TestProbeMetricCountsTheDecision (review r2 L2): a probe that timed out
// after the host was heard again withdraws the expiry, and is counted as
// not expired.
func TestProbeMetricCountsTheDecision(t *testing.T) {
	m := testMetrics(t)
	p := &beatAgainProber{}
	c := newCluster(t, 1, func(o *Options) {
		o.TTL = 300 * time.Millisecond
		o.prober = p
		o.MeterProvider = m.MeterProvider()
		o.MetricsHandler = m.Handler()
		o.HTTPAddr = "127.0.0.1:0"
	})
	url := "http://" + c.servers[c.leader()].HTTPAddr() + telemetry.MetricsPath
	p.h1 = c.host("h1")
	testutil.Eventually(t, 10*time.Second, "h1 live", func() bool { return c.nodeStates()["h1"] == wire.NodeLive })
	p.h1.stopBeats()
	var f metricstest.Families
	var err error
	testutil.Eventually(t, 10*time.Second, "the probe counted", func() bool {
		f, err = metricstest.Scrape(context.Background(), url)
		if err != nil {
			return false
		}
		yes, _ := f.Value("brook_coordinator_node_probe_total", "brook_probe_outcome", "timeout", "brook_probe_expired", "true")
		no, _ := f.Value("brook_coordinator_node_probe_total", "brook_probe_outcome", "timeout", "brook_probe_expired", "false")
		return yes+no >= 1
	})
	if yes, _ := f.Value("brook_coordinator_node_probe_total", "brook_probe_outcome", "timeout", "brook_probe_expired", "true"); yes != 0 {
		t.Fatalf("a probe whose expiry was withdrawn (h1 heard while it ran) counted as expired: %v", yes)
	}
	if st := c.nodeStates()["h1"]; st != wire.NodeLive {
		t.Fatalf("h1 is %s", st)
	}
}
