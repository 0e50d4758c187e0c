package host

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/wire"
)

// fetchResult is the answer to a fetch sent with sendFetch.
type fetchResult struct {
	b   *frame.Batch
	err *wire.Error
	at  time.Time
}

// sendFetch sends a fetch and delivers its answer (a batch or an error
// reply) on the returned channel.
func (c *miniCluster) sendFetch(stream string, req wire.FetchRequest) <-chan fetchResult {
	out := make(chan fetchResult, 1)
	body, _ := json.Marshal(req)
	go func() {
		resp, err := c.nc.Request(wire.FetchSubject(stream), body, 15*time.Second)
		switch {
		case err != nil:
			out <- fetchResult{err: &wire.Error{Code: "transport", Message: err.Error()}, at: time.Now()}
		case replyError(resp) != nil:
			out <- fetchResult{err: replyError(resp), at: time.Now()}
		default:
			b, derr := frame.DecodeBatch(resp.Data)
			if derr != nil {
				out <- fetchResult{err: &wire.Error{Code: "decode", Message: derr.Error()}, at: time.Now()}
				return
			}
			out <- fetchResult{b: b, at: time.Now()}
		}
	}()
	return out
}

// waitInUse waits until b has n slots taken.
func waitInUse(t *testing.T, b *budget, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for b.inUse() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%s %s: %d in use, want %d", b.what, b.state, b.inUse(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// wantOverloadedNow receives r and checks it is an overloaded answer that
// came at once.
func wantOverloadedNow(t *testing.T, what string, sent time.Time, r <-chan fetchResult) {
	t.Helper()
	select {
	case got := <-r:
		if got.err == nil || got.err.Code != wire.CodeOverloaded {
			t.Fatalf("%s: %+v, want overloaded", what, got)
		}
		if d := got.at.Sub(sent); d > time.Second {
			t.Fatalf("%s: overloaded after %v, want at once", what, d)
		}
		if !strings.Contains(got.err.Message, "host n1 has") || !strings.HasSuffix(got.err.Message, "; retry") {
			t.Fatalf("%s: message %q", what, got.err.Message)
		}
	case <-time.After(3 * time.Second):
		t.Fatalf("%s: no answer within 3s, want overloaded at once", what)
	}
}

// twoStreams runs n1 owning "busy" and "idle", both followed by n2 and
// majority_durable (so a confirm needs n2's replication request), and
// "solo" with no follower, with adjust applied to both hosts.
func twoStreams(t *testing.T, adjust func(*Config)) *miniCluster {
	t.Helper()
	c := newMiniCluster(t)
	c.assign(assignment("busy", 1, 1, "n1", []string{"n2"}), assignment("idle", 2, 1, "n1", []string{"n2"}),
		assignment("solo", 3, 1, "n1", nil))
	c.start("n1", adjust)
	c.start("n2", adjust)
	for _, s := range []string{"busy", "idle", "solo"} {
		c.waitCopy("n1", s, "owner", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner })
	}
	for _, s := range []string{"busy", "idle"} {
		c.waitCopy("n2", s, "follower", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleFollower })
	}
	return c
}

// TestFetchWaitCap: with a cap of 2 long-poll fetches, a third fetch that
// would wait is answered overloaded at once (not held, not queued); one
// that finds records is still served; once a waiting fetch returns, a new
// long poll is accepted; and while the cap is reached, publishes that
// need the follower's replication are confirmed by both copies. The
// refusals are logged, once per second at most.
func TestFetchWaitCap(t *testing.T) {
	c := twoStreams(t, func(cfg *Config) { cfg.MaxFetchWaits = 2 })
	n1 := c.hosts["n1"]

	idle := c.sendFetch("idle", wire.FetchRequest{Start: "latest", WaitMS: 10_000})
	solo := c.sendFetch("solo", wire.FetchRequest{Start: "latest", WaitMS: 10_000})
	waitInUse(t, n1.h.fetchWaits, 2)

	sent := time.Now()
	wantOverloadedNow(t, "third long poll", sent, c.sendFetch("idle", wire.FetchRequest{Start: "latest", WaitMS: 10_000}))
	sent = time.Now()
	wantOverloadedNow(t, "fourth long poll, another stream", sent, c.sendFetch("busy", wire.FetchRequest{Start: "latest", WaitMS: 10_000}))
	n1.log.waitFor(t, "overloaded: refusing requests")
	if n := strings.Count(n1.log.String(), "overloaded: refusing requests"); n != 1 {
		t.Errorf("%d log lines about refusals within a second, want 1", n)
	}

	// Publishes and replication go on at the cap: W = 2 needs n2's ack.
	for i := range 3 {
		if pc := c.mustPublish("busy", payload(i)); pc.Offset != uint64(i) || pc.Copies != 2 {
			t.Fatalf("publish %d at the fetch cap: %+v, want offset %d on 2 copies", i, pc, i)
		}
	}
	// A fetch with records to return waits for nothing and takes no slot.
	if b := c.fetch("busy", wire.FetchRequest{Start: "earliest", WaitMS: 10_000}); len(b.Records) != 3 {
		t.Fatalf("fetch of confirmed records at the cap: %d records, want 3", len(b.Records))
	}
	if n := n1.h.fetchWaits.inUse(); n != 2 {
		t.Fatalf("%d long polls waiting after the publishes, want still 2 (the cap)", n)
	}

	// One long poll returns; its slot takes a new one.
	c.mustPublish("solo", payload(0))
	if r := <-solo; r.err != nil || len(r.b.Records) != 1 {
		t.Fatalf("long poll on solo: %+v, want the record published", r)
	}
	waitInUse(t, n1.h.fetchWaits, 1)
	next := c.sendFetch("busy", wire.FetchRequest{Start: "offset", Offset: 3, WaitMS: 10_000})
	waitInUse(t, n1.h.fetchWaits, 2)
	c.mustPublish("busy", payload(3))
	if r := <-next; r.err != nil || len(r.b.Records) != 1 || r.b.Records[0].Offset != 3 {
		t.Fatalf("long poll accepted after a slot freed: %+v, want record 3", r)
	}

	c.mustPublish("idle", payload(9))
	if r := <-idle; r.err != nil || len(r.b.Records) != 1 {
		t.Fatalf("long poll held at the cap: %+v, want the record published", r)
	}
	waitInUse(t, n1.h.fetchWaits, 0)
	waitInUse(t, n1.h.readerReqs, 0)
}

// TestInflightCapSparesReplication: with a cap of 3 requests in flight,
// three readers' long polls fill the readers' budget and a fourth fetch,
// even one that would not wait, is answered overloaded at once. The
// followers' replication requests and the seals have budgets of their
// own, so publishes that need the follower are still confirmed by both
// copies, and a seal sent to the same host is answered.
func TestInflightCapSparesReplication(t *testing.T) {
	c := twoStreams(t, func(cfg *Config) { cfg.MaxInflight = 3 })
	n1 := c.hosts["n1"]

	idle := c.sendFetch("idle", wire.FetchRequest{Start: "latest", WaitMS: 10_000})
	busy := c.sendFetch("busy", wire.FetchRequest{Start: "latest", WaitMS: 10_000})
	solo := c.sendFetch("solo", wire.FetchRequest{Start: "latest", WaitMS: 10_000})
	waitInUse(t, n1.h.readerReqs, 3)
	sent := time.Now()
	wantOverloadedNow(t, "fourth fetch", sent, c.sendFetch("solo", wire.FetchRequest{Start: "earliest"}))

	// n2 replicates both streams from n1 within the replication budget.
	for i := range 3 {
		if pc := c.mustPublish("idle", payload(i)); pc.Copies != 2 {
			t.Fatalf("publish %d with the readers' budget full: %+v, want 2 copies", i, pc)
		}
	}
	if r := <-idle; r.err != nil || len(r.b.Records) == 0 {
		t.Fatalf("long poll on idle: %+v, want the records published", r)
	}
	// A seal has a budget of its own: n1 answers it, and its owner role
	// of busy stops, answering the long poll held there.
	if _, e := c.seal("n1", "busy", 1, 2, 1); e != nil {
		t.Fatalf("seal with n1's readers' budget full: %v", e)
	}
	if r := <-busy; r.err == nil || r.err.Code != wire.CodeSealed {
		t.Fatalf("long poll on busy after the seal: %+v, want sealed", r)
	}
	c.mustPublish("solo", payload(0))
	if r := <-solo; r.err != nil || len(r.b.Records) != 1 {
		t.Fatalf("long poll on solo: %+v, want the record published", r)
	}
	waitInUse(t, n1.h.readerReqs, 0)
	if r := <-c.sendFetch("idle", wire.FetchRequest{Start: "earliest"}); r.err != nil || len(r.b.Records) != 3 {
		t.Fatalf("fetch after the budget drained: %+v, want 3 records", r)
	}
	waitInUse(t, n1.h.sealReqs, 0)
}

// TestBudget: take never passes the limit, give frees a slot.
func TestBudget(t *testing.T) {
	b := newBudget("requests", "in flight", 2)
	took := 0
	for range 3 {
		if b.take() {
			took++
		}
	}
	if took != 2 {
		t.Fatalf("a budget of 2 took %d", took)
	}
	b.give()
	if !b.take() || b.take() || b.inUse() != 2 {
		t.Fatalf("after a give: in use %d, want one more slot and no other", b.inUse())
	}
}

// TestReplicationNotCappedByHostBudget: each follower copy keeps one
// replication long poll at its owner, so at scale the host's replication
// requests are its owned streams times their followers (5,000 and more
// per host at 10,000 streams), past MaxInflight (4,096): a 10,000-stream
// run refused them overloaded, and the followers' backoff held confirms
// back for a minute. Followers' long polls are bounded per owned stream
// instead; MaxInflight still caps the host waits. Here n2 follows two of
// n1's streams with a host cap of 1: both long polls park at n1 at once,
// nothing is refused, and publishes to both are confirmed by both copies.
func TestReplicationNotCappedByHostBudget(t *testing.T) {
	c := twoStreams(t, func(cfg *Config) { cfg.MaxInflight = 1 })
	n1 := c.hosts["n1"]
	for i := range 3 {
		for _, s := range []string{"busy", "idle"} {
			if pc := c.mustPublish(s, payload(i)); pc.Copies != 2 {
				t.Fatalf("publish %d to %s: %+v, want 2 copies", i, s, pc)
			}
		}
	}
	// Both copies' long polls park at n1 at once, past the host's cap.
	for _, s := range []string{"busy", "idle"} {
		waitInUse(t, ownerRole(t, n1.h, s).replReqs, 1)
	}
	if strings.Contains(n1.log.String(), "overloaded: refusing requests") {
		t.Fatalf("n1 refused requests:\n%s", n1.log.String())
	}
}

// ownerRole returns h's owner role of stream.
func ownerRole(t *testing.T, h *Host, stream string) *owner {
	t.Helper()
	for _, o := range h.owners() {
		if o.stream == stream {
			return o
		}
	}
	t.Fatalf("%s owns no %s", h.cfg.Node, stream)
	return nil
}
