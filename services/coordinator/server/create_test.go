package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/wire"
)

// TestCreateAnswersOnceTheOwnerServes: the README's two lines back to back.
// A publish sent with a plain NATS request (no retry) the moment
// stream.create answers must reach the new owner and be confirmed, not meet
// "no responders", for replicated and owner-only streams alike.
func TestCreateAnswersOnceTheOwnerServes(t *testing.T) {
	c := newCluster(t, 1, func(o *Options) { o.NATSSystemURL = "" })
	for _, n := range []string{"h1", "h2", "h3"} {
		c.host(n)
	}
	c.liveHosts(3)
	for i, copies := range []int{3, 1, 3, 2, 1, 3} {
		stream := fmt.Sprintf("orders%d", i)
		start := time.Now()
		info := c.create(stream, copies)
		took := time.Since(start)
		if info.Status != wire.StatusServing {
			t.Fatalf("create %s answered status %q after %v, want %q", stream, info.Status, took, wire.StatusServing)
		}
		m, err := c.client.Request(wire.PublishSubject(stream), []byte("hello"), 2*time.Second)
		if err != nil {
			if errors.Is(err, nats.ErrNoResponders) {
				t.Fatalf("publish to %s right after its create (answered in %v): no responders: the create answered before the owner served", stream, took)
			}
			t.Fatalf("publish to %s: %v", stream, err)
		}
		if code := m.Header.Get(HeaderError); code != "" {
			t.Fatalf("publish to %s refused: %s %s", stream, code, m.Data)
		}
		var pc wire.PublishConfirm
		if err := json.Unmarshal(m.Data, &pc); err != nil || pc.StreamID != info.StreamID {
			t.Fatalf("publish to %s: confirm %s (%v), want stream id %d", stream, m.Data, err, info.StreamID)
		}
	}
}

// TestCreateSaysPlacingWhenTheOwnerDoesNotServe: an owner that does not
// serve within ownerServeWait gets the stream all the same (the create is
// committed), but the answer says placing, after a bounded wait.
func TestCreateSaysPlacingWhenTheOwnerDoesNotServe(t *testing.T) {
	c := newCluster(t, 1, func(o *Options) { o.NATSSystemURL = "" })
	c.hostWith("h1", true)
	c.liveHosts(1)
	start := time.Now()
	info := c.create("quiet", 1)
	took := time.Since(start)
	if info.Status != wire.StatusPlacing {
		t.Fatalf("create answered status %q after %v, want %q", info.Status, took, wire.StatusPlacing)
	}
	if took < ownerServeWait || took > ownerServeWait+2*time.Second {
		t.Fatalf("create answered after %v, want about %v", took, ownerServeWait)
	}
	if info.Assignment.Owner != "h1" || info.StreamID == 0 {
		t.Fatalf("create answered %+v, want the stream placed on h1", info)
	}
	// The stream exists: a second create is refused as such.
	if e := c.admin(wire.VerbStreamCreate, wire.StreamCreate{Stream: "quiet", Copies: 1}, nil); e == nil || e.Code != wire.CodeExists {
		t.Fatalf("second create: %v, want %s", e, wire.CodeExists)
	}
}

// TestCreateProbesTheOwnerWithBackoff: while a new owner refuses the
// probes (a copy not yet owner), stream.create asks again with a pause
// that grows to ownerProbePauseMax, not every 5 ms: the probes of one
// create over ownerServeWait number about ownerServeWait/ownerProbePauseMax,
// not hundreds (issue 17: at 64 creates in flight those no-responders
// round trips loaded the NATS servers and the coordinator's connection).
func TestCreateProbesTheOwnerWithBackoff(t *testing.T) {
	c := newCluster(t, 1, func(o *Options) { o.NATSSystemURL = "" })
	c.hostWith("h1", true)
	c.liveHosts(1)
	var probes atomic.Int64
	subscribe(t, c.client, wire.FetchSubject("refused"), func(m *nats.Msg) {
		probes.Add(1)
		r := nats.NewMsg(m.Reply)
		r.Header.Set(HeaderError, wire.CodeNotOwner)
		r.Data, _ = json.Marshal(wire.ErrorReply{Error: wire.Errorf(wire.CodeNotOwner, "not owner yet")})
		_ = m.RespondMsg(r)
	})
	info := c.create("refused", 1)
	if info.Status != wire.StatusPlacing {
		t.Fatalf("create answered status %q, want %q", info.Status, wire.StatusPlacing)
	}
	n := probes.Load()
	most := int64(ownerServeWait/ownerProbePauseMax) + 8
	if n < 2 || n > most {
		t.Fatalf("the owner was probed %d times in %v, want 2..%d", n, ownerServeWait, most)
	}
}

// TestPaddedPolicyIsStoredCanonical: a policy with surrounding white space,
// named on a create or set as the cluster default, is read as the policy
// it names and stored and answered in its canonical form, on the stream and
// on every assignment stamp; a policy that is still unknown once trimmed is
// a bad request.
func TestPaddedPolicyIsStoredCanonical(t *testing.T) {
	c := newCluster(t, 1, func(o *Options) { o.NATSSystemURL = ""; o.DefaultPolicy = "majority_durable " })
	for _, n := range []string{"h1", "h2", "h3"} {
		c.host(n)
	}
	c.liveHosts(3)
	check := func(info wire.StreamInfo, want string, w int) {
		t.Helper()
		if info.Policy != want || info.Assignment.Policy != want || info.W != w {
			t.Fatalf("%s: policy %q, assignment stamp %q, W %d; want %q and W %d",
				info.Stream, info.Policy, info.Assignment.Policy, info.W, want, w)
		}
	}
	check(c.create("dflt", 3), "majority_durable", 2)
	check(c.info("dflt"), "majority_durable", 2)
	for body, want := range map[string]string{
		`{"stream":"named","copies":3,"policy":"majority_durable "}`:       "majority_durable",
		`{"stream":"counted","copies":3,"policy":" replica_durable(3)\t"}`: "replica_durable(3)",
	} {
		var info wire.StreamInfo
		if e := c.admin(wire.VerbStreamCreate, body, &info); e != nil {
			t.Fatalf("create %s: %v", body, e)
		}
		w := 2
		if want == "replica_durable(3)" {
			w = 3
		}
		check(info, want, w)
		check(c.info(info.Stream), want, w)
	}
	for _, body := range []string{
		`{"stream":"bad","copies":3,"policy":"majority durable"}`,
		`{"stream":"bad","copies":3,"policy":" majority "}`,
	} {
		if e := c.admin(wire.VerbStreamCreate, body, nil); e == nil || e.Code != wire.CodeBadRequest {
			t.Fatalf("create %s: %v, want %s", body, e, wire.CodeBadRequest)
		}
	}
}

// TestCreateNoticeCarriesTheAssignment: the notice of a create carries the
// new stream's committed assignment with its history starts, so each host
// can apply it without pulling first.
func TestCreateNoticeCarriesTheAssignment(t *testing.T) {
	c := newCluster(t, 1, func(o *Options) { o.NATSSystemURL = "" })
	c.host("h1")
	c.liveHosts(1)
	got := make(chan wire.AssignNotice, 64)
	subscribe(t, c.client, wire.AssignNoticeSubject("h1"), func(m *nats.Msg) {
		var n wire.AssignNotice
		if json.Unmarshal(m.Data, &n) == nil && n.Assigned != nil {
			got <- n
		}
	})
	info := c.create("fresh", 1)
	select {
	case n := <-got:
		a := n.Assigned.Assignment
		if n.Recovery || a.Stream != "fresh" || a.StreamID != info.StreamID || a.Owner != "h1" || n.Assigned.Starts == nil || n.Version == 0 {
			t.Fatalf("create notice %+v (assignment %+v), want stream fresh id %d owned by h1 with its starts", n, a, info.StreamID)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no create notice with the assignment")
	}
}

// subscribe subscribes f to subject on nc until the test ends, and
// flushes, so the server knows of the subscription before the test goes on.
func subscribe(t *testing.T, nc *nats.Conn, subject string, f nats.MsgHandler) {
	t.Helper()
	sub, err := nc.Subscribe(subject, f)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}
