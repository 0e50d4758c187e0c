package server

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/controller"
	"github.com/brook-streams/brook/services/coordinator/internal/testutil"
)

// nodeStates returns each node's state as the cluster info says.
func (c *cluster) nodeStates() map[string]string {
	c.t.Helper()
	var ci wire.ClusterInfo
	if e := c.admin(wire.VerbClusterInfo, "", &ci); e != nil {
		c.t.Fatal(e)
	}
	out := map[string]string{}
	for _, n := range ci.Nodes {
		out[n.Node] = n.State
	}
	return out
}

// TestTTLExpiryAsksTheHostFirst: hosts whose heartbeats stop (as when a
// loaded machine does not schedule them) are probed before a TTL expiry.
// h1 answers its probes and is never expired, whatever its silence; h2 is
// subscribed but does not answer (cut off) and is expired once the probe's
// wait has passed, which h4's beat 1.5 s late on the wire stretched to the
// bound (without it, the wait is controller.ProbeWaitFloor); h3 has no subscription left (dead) and is expired on
// "no responders" at once, without waiting for h2's probe; h4 beats on.
func TestTTLExpiryAsksTheHostFirst(t *testing.T) {
	const probeTimeout = 2 * time.Second
	c := newCluster(t, 1, func(o *Options) {
		o.TTL = 300 * time.Millisecond
		o.ProbeTimeout = probeTimeout
	})
	hosts := map[string]*host{}
	for _, n := range []string{"h1", "h2", "h3", "h4"} {
		hosts[n] = c.host(n)
	}
	testutil.Eventually(t, 5*time.Second, "four live hosts", func() bool {
		st := c.nodeStates()
		return len(st) == 4 && st["h1"] == wire.NodeLive && st["h2"] == wire.NodeLive && st["h3"] == wire.NodeLive && st["h4"] == wire.NodeLive
	})
	hosts["h1"].probeOn(true)
	hosts["h2"].probeOn(false)
	hosts["h4"].lateBeat(1500 * time.Millisecond)
	silent := time.Now()
	for _, n := range []string{"h1", "h2", "h3"} {
		hosts[n].stopBeats()
	}
	testutil.Eventually(t, 5*time.Second, "h3 expired", func() bool { return c.nodeStates()["h3"] == wire.NodeExpired })
	if st := c.nodeStates(); st["h2"] != wire.NodeLive && time.Since(silent) < probeTimeout {
		t.Fatalf("h2 is %s before its probe's bound passed: h3's expiry waited for it? (%v)", st["h2"], st)
	}
	testutil.Eventually(t, 2*probeTimeout+5*time.Second, "h2 expired after its unanswered probe", func() bool {
		return c.nodeStates()["h2"] == wire.NodeExpired
	})
	if took := time.Since(silent); took < probeTimeout {
		t.Fatalf("h2 expired %v after it fell silent, before its probe's bound %v", took, probeTimeout)
	}
	// h1 has been silent for many TTLs by now, and was probed each time.
	if st := c.nodeStates(); st["h1"] != wire.NodeLive || st["h4"] != wire.NodeLive {
		t.Fatalf("h1 answering its probes, h4 beating: %v", st)
	}
}

// TestQuietProbeWaitIsShort: on a quiet cluster a host that is subscribed
// but does not answer (a blackhole) is expired about the probe's floor
// after its TTL, far inside a long --probe-timeout: the bound is for a
// loaded machine, where beats came late. With a fixed wait of the bound it
// took TTL + 5 s.
func TestQuietProbeWaitIsShort(t *testing.T) {
	const probeTimeout = 5 * time.Second
	c := newCluster(t, 1, func(o *Options) {
		o.TTL = 300 * time.Millisecond
		o.ProbeTimeout = probeTimeout
	})
	h1 := c.host("h1")
	c.host("h2")
	testutil.Eventually(t, 5*time.Second, "two live hosts", func() bool {
		st := c.nodeStates()
		return st["h1"] == wire.NodeLive && st["h2"] == wire.NodeLive
	})
	h1.probeOn(false)
	silent := time.Now()
	h1.stopBeats()
	testutil.Eventually(t, 2*probeTimeout, "h1 expired after its unanswered probe", func() bool {
		return c.nodeStates()["h1"] == wire.NodeExpired
	})
	if took := time.Since(silent); took >= probeTimeout-time.Second {
		t.Fatalf("h1 expired %v after it fell silent: the probe waited for about its bound %v on a quiet cluster", took, probeTimeout)
	}
	if st := c.nodeStates(); st["h2"] != wire.NodeLive {
		t.Fatalf("h2 beating: %v", st)
	}
}

// lateBeat publishes one heartbeat of h stamped late before now, as one
// that waited that long on the wire.
func (h *host) lateBeat(late time.Duration) {
	h.t.Helper()
	h.mu.Lock()
	hb := wire.Heartbeat{Node: h.node, Incarnation: h.inc, Copies: []wire.CopyStatus{}, AtMS: time.Now().Add(-late).UnixMilli()}
	nc := h.nc
	h.mu.Unlock()
	data, _ := json.Marshal(hb)
	if err := nc.Publish(wire.HeartbeatSubject(h.node), data); err != nil {
		h.t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		h.t.Fatal(err)
	}
}

// scriptedProber answers probes as a test says: each node's probe waits
// for an outcome on the node's channel.
type scriptedProber struct {
	answers map[string]chan scriptedAnswer
}

type scriptedAnswer struct {
	outcome     controller.ProbeOutcome
	incarnation uint64
}

func (p scriptedProber) Probe(ctx context.Context, node string, _ time.Duration) (controller.ProbeOutcome, wire.Heartbeat) {
	select {
	case a := <-p.answers[node]:
		return a.outcome, wire.Heartbeat{Node: node, Incarnation: a.incarnation, Live: true}
	case <-ctx.Done():
		return controller.ProbeAborted, wire.Heartbeat{}
	}
}

// TestProbesDoNotWaitForEachOther drives the prober: while h1's probe
// hangs, h2's "no responders" expires h2; h1's answer from its
// incarnation then withdraws its expiry, and the next silence is probed
// again; an answer from another incarnation expires it.
func TestProbesDoNotWaitForEachOther(t *testing.T) {
	p := scriptedProber{answers: map[string]chan scriptedAnswer{"h1": make(chan scriptedAnswer), "h2": make(chan scriptedAnswer, 1)}}
	c := newCluster(t, 1, func(o *Options) {
		o.TTL = 300 * time.Millisecond
		o.prober = p
	})
	hosts := map[string]*host{}
	for _, n := range []string{"h1", "h2", "h3"} {
		hosts[n] = c.host(n)
	}
	testutil.Eventually(t, 5*time.Second, "three live hosts", func() bool {
		st := c.nodeStates()
		return st["h1"] == wire.NodeLive && st["h2"] == wire.NodeLive && st["h3"] == wire.NodeLive
	})
	p.answers["h2"] <- scriptedAnswer{outcome: controller.ProbeNoResponders}
	hosts["h1"].stopBeats()
	hosts["h2"].stopBeats()
	testutil.Eventually(t, 5*time.Second, "h2 expired while h1's probe hangs", func() bool { return c.nodeStates()["h2"] == wire.NodeExpired })
	if st := c.nodeStates()["h1"]; st != wire.NodeLive {
		t.Fatalf("h1 is %s while its probe hangs", st)
	}
	// h1 answers from its incarnation (1): not expired, probed again
	// after another TTL of silence.
	p.answers["h1"] <- scriptedAnswer{outcome: controller.ProbeAnswered, incarnation: 1}
	select {
	case p.answers["h1"] <- scriptedAnswer{outcome: controller.ProbeAnswered, incarnation: 2}:
	case <-time.After(10 * time.Second):
		t.Fatal("h1 was not probed again")
	}
	testutil.Eventually(t, 5*time.Second, "h1 expired on an answer from another incarnation", func() bool {
		return c.nodeStates()["h1"] == wire.NodeExpired
	})
}
