package server

import (
	"encoding/json"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/wire"
)

// TestRequestsPastMaxInflightAreOverloaded: with --max-inflight 1, a
// request that comes while another is in flight (a create waiting for its
// mute owner to serve) is answered overloaded at once instead of taking
// one more goroutine; once the first is answered, requests are served
// again.
func TestRequestsPastMaxInflightAreOverloaded(t *testing.T) {
	c, created := heldCreate(t)
	var page wire.StreamList
	if e := c.admin(wire.VerbStreamList, wire.StreamListRequest{}, &page); e == nil || e.Code != wire.CodeOverloaded {
		t.Fatalf("a list while a create is in flight with --max-inflight 1: %v, want %s", e, wire.CodeOverloaded)
	}
	m, err := created.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("the held create: %v", err)
	}
	if code := m.Header.Get(HeaderError); code != "" {
		t.Fatalf("the held create: %s %q", code, m.Data)
	}
	if e := c.admin(wire.VerbStreamList, wire.StreamListRequest{}, &page); e != nil {
		t.Fatalf("a list once nothing is in flight: %v", e)
	}
}

// TestHostPullsAreNotRefusedForClientRequests: the admission cap of client
// admin requests does not refuse the hosts' own requests. In a 10,000-stream
// failover (docs/benchmarks.md, session 28) clients' stream.info retries
// filled every coordinator's 1,024 slots and the surviving hosts' assignment
// pulls were answered overloaded or timed out for about 30 s, so hosts
// learned their new roles late. With --max-inflight 1 and a create in
// flight, a host's pull is still answered.
func TestHostPullsAreNotRefusedForClientRequests(t *testing.T) {
	c, created := heldCreate(t)
	var snap wire.AssignmentSnapshot
	if e := request(t, c.client, wire.AssignPull, wire.AssignmentPull{Node: "h1"}, &snap); e != nil {
		t.Fatalf("a host's pull while a client's create fills --max-inflight 1: %v, want an answer", e)
	}
	var page wire.StreamList
	if e := c.admin(wire.VerbStreamList, wire.StreamListRequest{}, &page); e == nil || e.Code != wire.CodeOverloaded {
		t.Fatalf("a client's list while its create fills --max-inflight 1: %v, want %s", e, wire.CodeOverloaded)
	}
	if m, err := created.NextMsg(10 * time.Second); err != nil {
		t.Fatalf("the held create: %v", err)
	} else if code := m.Header.Get(HeaderError); code != "" {
		t.Fatalf("the held create: %s %q", code, m.Data)
	}
}

// heldCreate starts a one-replica cluster with --max-inflight 1 and a mute
// host, and sends a create that waits for the mute owner to serve, so it
// holds the one client slot: it returns once the create is in flight, with
// the subscription its answer comes to.
func heldCreate(t *testing.T) (*cluster, *nats.Subscription) {
	t.Helper()
	c := newCluster(t, 1, func(o *Options) {
		o.NATSSystemURL = ""
		o.MaxInflight = 1
	})
	c.hostWith("h1", true)
	c.liveHosts(1)
	s := c.servers[c.leader()]
	// The create is sent without waiting for its answer, checked by the
	// caller.
	body, err := json.Marshal(wire.StreamCreate{Stream: "held", Copies: 1})
	if err != nil {
		t.Fatal(err)
	}
	reply := nats.NewInbox()
	created, err := c.client.SubscribeSync(reply)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.client.PublishRequest(wire.AdminSubject(wire.VerbStreamCreate), reply, body); err != nil {
		t.Fatal(err)
	}
	for s.inflight.Load() == 0 {
		if m, err := created.NextMsg(0); err == nil {
			t.Fatalf("the create was answered (%q) before it was seen in flight", m.Data)
		}
		runtime.Gosched()
	}
	return c, created
}
