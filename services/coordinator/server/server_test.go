package server

import (
	"fmt"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/internal/testutil"
)

// TestFailoverByAdvisoryThenRejoinWithoutRecovery kills a replicated
// stream's owner: the disconnect advisory expires it well before the TTL,
// a pending recovery is recorded and its worker seals the two followers,
// promotes the one with the furthest record tail and commits; the whole path
// is one trace. The old owner then comes back holding its copy and is added
// back as a follower directly, at the same epoch.
func TestFailoverByAdvisoryThenRejoinWithoutRecovery(t *testing.T) {
	c := newCluster(t, 3, func(o *Options) { o.TTL = 5 * time.Second })
	h1, h2, h3 := c.host("h1"), c.host("h2"), c.host("h3")
	testutil.Eventually(t, 5*time.Second, "three live hosts", func() bool {
		var ci wire.ClusterInfo
		return c.admin(wire.VerbClusterInfo, "", &ci) == nil && len(ci.Nodes) == 3
	})
	info := c.create("s1", 3)
	a := info.Assignment
	if a.Owner != "h1" || !reflect.DeepEqual(a.Followers, []string{"h2", "h3"}) || a.Epoch != 1 || a.Policy != "majority_durable" || info.W != 2 || info.R != 2 {
		t.Fatalf("created %+v", info)
	}
	// Placement spreads owners: the next stream is owned elsewhere.
	if o := c.create("s2", 3).Assignment.Owner; o == "h1" {
		t.Fatalf("second stream also owned by h1")
	}
	h2.setTails("s1", 10, 1)
	h3.setTails("s1", 12, 0)
	// The hosts pulled the assignment after the notice and report their copies.
	testutil.Eventually(t, 5*time.Second, "copies published", func() bool {
		ct := c.info("s1").CopyTails
		return len(ct) == 3 && ct[0].Published && ct[1].Published && ct[2].Published
	})

	h1.kill()
	// The advisory, not the 5s TTL, must have detected the loss: the detect
	// span's "how" says so below (a wall-clock bound here would only
	// measure how loaded the machine is).
	info = c.waitInfo("s1", "the failover commit", 15*time.Second, func(i wire.StreamInfo) bool {
		return i.Assignment.Epoch == 2 && i.Recovery == nil
	})
	a = info.Assignment
	if a.Owner != "h3" || !reflect.DeepEqual(a.Followers, []string{"h2"}) || info.Status != wire.StatusServing {
		t.Fatalf("after failover: %+v", info)
	}
	if len(info.Starts) != 1 || info.Starts[0] != (wire.HistoryStart{Epoch: 2, RecordTail: 12, CursorTail: 0, Node: "h3"}) {
		t.Fatalf("starts %+v", info.Starts)
	}
	if info.W != 2 || info.R != 1 {
		t.Fatalf("W/R of 2 copies under majority: %d/%d", info.W, info.R)
	}
	// One trace from detection to commit.
	if info.LastTraceID == "" {
		t.Fatal("no trace id recorded")
	}
	var spans map[string]int
	testutil.Eventually(t, 2*time.Second, "the failover's spans", func() bool {
		got := c.spansOf(info.LastTraceID)
		spans = map[string]int{}
		for name, ss := range got {
			spans[name] = len(ss)
		}
		return spans["commit"] > 0 && spans["brook.failover"] == 1
	})
	for _, name := range []string{"brook.failover", "detect", "pending_recovery.commit", "recovery.round", "seal.fanout", "seal h1", "seal h2", "seal h3", "choose", "commit"} {
		if spans[name] == 0 {
			t.Errorf("trace %s has no %q span (has %v)", info.LastTraceID, name, spans)
		}
	}
	detectedBy := ""
	for _, s := range c.spansOf(info.LastTraceID)["detect"] {
		for _, kv := range s.Attributes() {
			if string(kv.Key) == "how" {
				detectedBy = kv.Value.AsString()
			}
		}
	}
	if detectedBy != "advisory" {
		t.Errorf("detected by %q, want advisory", detectedBy)
	}
	// The new owner's pulled snapshot carries the starts and the commit's traceparent.
	testutil.Eventually(t, 3*time.Second, "h3 pulls the new assignment", func() bool {
		snap := h3.snapshot()
		for _, as := range snap.Assignments {
			if as.Assignment.Stream == "s1" && as.Assignment.Epoch == 2 {
				return len(as.Starts) == 1 && as.TraceParent != "" && snap.Streams["s1"] == info.StreamID
			}
		}
		return false
	})

	// h1 restarts holding its copy: it is added back as a follower at once,
	// without recovery and at the same epoch.
	h1.holdCopy("s1", info.StreamID, 14)
	h1.start(2)
	info = c.waitInfo("s1", "h1 re-added", 4*time.Second, func(i wire.StreamInfo) bool {
		return len(i.Assignment.Followers) == 2
	})
	if info.Assignment.Epoch != 2 || info.Assignment.Owner != "h3" || info.Assignment.Followers[1] != "h1" || len(info.Starts) != 1 {
		t.Fatalf("rejoin: %+v", info)
	}
}

// TestLeaderKillResumesRecoveryAndStateSurvivesRestart: a recovery waits
// for seal answers; the coordinator leader is killed; another leads, answers
// admin requests and resumes the worker, which commits once the answer
// comes. Then all three coordinators restart and the state is as it was.
func TestLeaderKillResumesRecoveryAndStateSurvivesRestart(t *testing.T) {
	c := newCluster(t, 3, func(o *Options) { o.NATSSystemURL = ""; o.TTL = 600 * time.Millisecond })
	h1, h2, _ := c.host("h1"), c.host("h2"), c.host("h3")
	testutil.Eventually(t, 5*time.Second, "three live hosts", func() bool {
		var ci wire.ClusterInfo
		return c.admin(wire.VerbClusterInfo, "", &ci) == nil && len(ci.Nodes) == 3
	})
	c.create("s1", 3)
	h2.setSilent(true)
	h1.kill()
	info := c.waitInfo("s1", "recovery waiting for answers", 5*time.Second, func(i wire.StreamInfo) bool {
		return i.Recovery != nil && i.Recovery.Wait != nil
	})
	if info.Status != wire.StatusWaiting || info.Recovery.Wait.Kind != "answers" || info.Recovery.Wait.Needed != 2 || info.Recovery.Wait.Answered != 1 {
		t.Fatalf("waiting recovery: %+v %+v", info, info.Recovery.Wait)
	}
	if info.Recovery.Reason != "expired" {
		t.Fatalf("reason %q", info.Recovery.Reason)
	}

	old := c.leader()
	c.kill(old)
	next := c.leader()
	if next == old {
		t.Fatal("no new leader")
	}
	var ci wire.ClusterInfo
	if e := c.admin(wire.VerbClusterInfo, "", &ci); e != nil {
		t.Fatal(e)
	}
	if ci.Leader != next || len(ci.Coordinators) != 3 {
		t.Fatalf("cluster.info after leader kill: %+v", ci)
	}
	// The new leader's worker commits as soon as h2 answers.
	h2.setSilent(false)
	info = c.waitInfo("s1", "commit under the new leader", 6*time.Second, func(i wire.StreamInfo) bool {
		return i.Recovery == nil && i.Assignment.Epoch == 2
	})
	if info.Assignment.Owner != "h2" && info.Assignment.Owner != "h3" {
		t.Fatalf("owner %s", info.Assignment.Owner)
	}
	// Writes work with two of three replicas.
	c.create("s2", 2)
	c.start(old)

	var before wire.StreamList
	if e := c.admin(wire.VerbStreamList, "", &before); e != nil {
		t.Fatal(e)
	}
	for id := range c.peers {
		c.stop(id)
	}
	for id := range c.peers {
		c.start(id)
	}
	c.leader()
	var after wire.StreamList
	if e := c.admin(wire.VerbStreamList, "", &after); e != nil {
		t.Fatal(e)
	}
	if len(after.Streams) != 2 || after.Version < before.Version {
		t.Fatalf("after restart: %+v", after)
	}
	for i := range before.Streams {
		b, a := before.Streams[i], after.Streams[i]
		if !reflect.DeepEqual(b.Assignment, a.Assignment) || !reflect.DeepEqual(b.Starts, a.Starts) || b.StreamID != a.StreamID || b.LastTraceID != a.LastTraceID {
			t.Fatalf("stream %s changed across restart:\n%+v\n%+v", b.Stream, b, a)
		}
	}
}

// TestWaitForConfirmedPrefixWithdrawAndAcceptLoss: a second owner loss
// leaves only a copy below the latest history start, so recovery waits for
// the confirmed prefix; an operator withdraws it (the controller records a
// new, higher transition) and then accepts the loss, which lands below the
// prefix and leaves a warning until attention.clear.
func TestWaitForConfirmedPrefixWithdrawAndAcceptLoss(t *testing.T) {
	c := newCluster(t, 1, func(o *Options) { o.NATSSystemURL = ""; o.TTL = 500 * time.Millisecond })
	h1, h2, h3 := c.host("h1"), c.host("h2"), c.host("h3")
	testutil.Eventually(t, 5*time.Second, "three live hosts", func() bool {
		var ci wire.ClusterInfo
		return c.admin(wire.VerbClusterInfo, "", &ci) == nil && len(ci.Nodes) == 3
	})
	c.create("s1", 3)
	h2.setTails("s1", 10, 0)
	h3.setTails("s1", 8, 0)
	h1.kill()
	info := c.waitInfo("s1", "first failover", 5*time.Second, func(i wire.StreamInfo) bool { return i.Assignment.Epoch == 2 })
	if info.Assignment.Owner != "h2" || info.Starts[0].RecordTail != 10 {
		t.Fatalf("first failover: %+v", info)
	}
	testutil.Eventually(t, 3*time.Second, "h3 follows at epoch 2", func() bool {
		for _, ct := range c.info("s1").CopyTails {
			if ct.Node == "h3" && ct.Epoch == 2 {
				return true
			}
		}
		return false
	})
	h2.kill()
	info = c.waitInfo("s1", "wait for the confirmed prefix", 5*time.Second, func(i wire.StreamInfo) bool {
		return i.Recovery != nil && i.Recovery.Wait != nil && i.Recovery.Wait.Kind == "confirmed_prefix"
	})
	w := info.Recovery.Wait
	if w.Start == nil || w.Start.RecordTail != 10 || w.BestTail != 8 || w.BestNode != "h3" || info.Status != wire.StatusWaiting {
		t.Fatalf("prefix wait %+v", w)
	}
	first := info.Recovery.Transition

	var ok wire.OK
	if e := c.admin(wire.VerbRecoveryWithdraw, wire.RecoveryWithdraw{Stream: "s1"}, &ok); e != nil || !ok.OK {
		t.Fatalf("withdraw: %v", e)
	}
	info = c.waitInfo("s1", "a new transition", 3*time.Second, func(i wire.StreamInfo) bool {
		return i.Recovery != nil && i.Recovery.Transition > first
	})

	if e := c.admin(wire.VerbRecoveryAcceptLoss, wire.RecoveryAcceptLoss{Stream: "s1", Node: "h2"}, nil); e == nil || e.Code != wire.CodeUnavailable {
		t.Fatalf("accept-loss onto a dead copy: %v", e)
	}
	if e := c.admin(wire.VerbRecoveryAcceptLoss, wire.RecoveryAcceptLoss{Stream: "s1", Node: "h9"}, nil); e == nil || e.Code != wire.CodeBadRequest {
		t.Fatalf("accept-loss onto a node without a copy: %v", e)
	}
	ok = wire.OK{}
	if e := c.admin(wire.VerbRecoveryAcceptLoss, wire.RecoveryAcceptLoss{Stream: "s1"}, &ok); e != nil || !ok.OK {
		t.Fatalf("accept-loss: %+v %v", ok, e)
	}
	info = wire.StreamInfo{} // decode afresh: absent fields must read as absent
	if e := c.admin(wire.VerbStreamInfo, wire.StreamRef{Stream: "s1"}, &info); e != nil {
		t.Fatalf("stream.info: %v", e)
	}
	if info.Assignment.Owner != "h3" || info.Assignment.Epoch != 3 || info.Recovery != nil {
		t.Fatalf("after accept-loss: %+v recovery %+v", info, info.Recovery)
	}
	al := info.AcceptedLoss
	if al == nil || al.Node != "h3" || al.RecordTail != 8 || al.StartTail != 10 || al.Epoch != 3 {
		t.Fatalf("accepted loss %+v", al)
	}
	if n := len(info.Starts); n != 2 || info.Starts[1] != (wire.HistoryStart{Epoch: 3, RecordTail: 8, Node: "h3"}) {
		t.Fatalf("starts %+v", info.Starts)
	}
	if e := c.admin(wire.VerbAttentionClear, wire.AttentionClear{Stream: "s1"}, &ok); e != nil {
		t.Fatal(e)
	}
	if c.info("s1").AcceptedLoss != nil {
		t.Fatal("warning not cleared")
	}
	if e := c.admin(wire.VerbAttentionClear, wire.AttentionClear{Stream: "s1"}, nil); e == nil || e.Code != wire.CodeNotFound {
		t.Fatalf("second clear: %v", e)
	}
}

// TestEagerFailoverOnLeaveAndDrainOwnerOnlyWaits: a leaving host and a
// drained host fail their streams over at once (the TTL is long), and an
// owner-only stream waits for its owner instead of moving.
func TestEagerFailoverOnLeaveAndDrainOwnerOnlyWaits(t *testing.T) {
	c := newCluster(t, 1, func(o *Options) { o.NATSSystemURL = ""; o.TTL = 800 * time.Millisecond })
	hosts := map[string]*host{}
	for _, n := range []string{"h1", "h2", "h3", "h4"} {
		hosts[n] = c.host(n)
	}
	testutil.Eventually(t, 5*time.Second, "four live hosts", func() bool {
		var ci wire.ClusterInfo
		return c.admin(wire.VerbClusterInfo, "", &ci) == nil && len(ci.Nodes) == 4
	})
	a := c.create("a", 3).Assignment
	b := c.create("b", 3).Assignment
	solo := c.create("solo", 1).Assignment
	if a.Owner == b.Owner || solo.Owner == a.Owner || solo.Owner == b.Owner {
		t.Fatalf("owners not spread: %s %s %s", a.Owner, b.Owner, solo.Owner)
	}

	start := time.Now()
	hosts[a.Owner].setLeaving()
	info := c.waitInfo("a", "failover on leave", 3*time.Second, func(i wire.StreamInfo) bool { return i.Assignment.Epoch == 2 })
	if info.Assignment.Owner == a.Owner || time.Since(start) > 700*time.Millisecond {
		t.Fatalf("leave: owner %s after %v", info.Assignment.Owner, time.Since(start))
	}

	start = time.Now()
	var ok wire.OK
	if e := c.admin(wire.VerbNodeDrain, wire.NodeRef{Node: b.Owner}, &ok); e != nil {
		t.Fatal(e)
	}
	info = c.waitInfo("b", "failover on drain", 3*time.Second, func(i wire.StreamInfo) bool { return i.Assignment.Epoch == 2 })
	if info.Assignment.Owner == b.Owner || time.Since(start) > 700*time.Millisecond {
		t.Fatalf("drain: owner %s after %v", info.Assignment.Owner, time.Since(start))
	}
	// The drain marks its node draining once its moves are done, which
	// is after the move's commit made b's epoch 2.
	testutil.Eventually(t, 3*time.Second, "the leaving node left, the drained one draining, the rest live", func() bool {
		var ci wire.ClusterInfo
		if e := c.admin(wire.VerbClusterInfo, "", &ci); e != nil {
			return false
		}
		for _, n := range ci.Nodes {
			want := wire.NodeLive
			switch n.Node {
			case a.Owner:
				want = wire.NodeLeft
			case b.Owner:
				want = wire.NodeDraining
			}
			if n.State != want {
				t.Logf("node %s is %s, want %s", n.Node, n.State, want)
				return false
			}
		}
		return true
	})

	// The owner-only stream's owner dies: it waits, and serves again when
	// the owner comes back; it never moves.
	owner := hosts[solo.Owner]
	owner.kill()
	info = c.waitInfo("solo", "owner-only stream waiting", 4*time.Second, func(i wire.StreamInfo) bool { return i.Status == wire.StatusWaiting })
	if info.Recovery != nil || info.Assignment.Owner != solo.Owner {
		t.Fatalf("owner-only stream moved: %+v", info)
	}
	owner.start(2)
	info = c.waitInfo("solo", "owner-only stream serving", 4*time.Second, func(i wire.StreamInfo) bool { return i.Status == wire.StatusServing })
	if info.Assignment.Epoch != 1 || info.Assignment.Owner != solo.Owner {
		t.Fatalf("owner-only stream after return: %+v", info)
	}
}

// TestHostLeaveSubject: a host leaving on brook.host.<node>.leave is
// answered like the admin verb node.leave, for the subject's node: a body
// naming another node, or a subject with a bad node, is refused and changes
// nothing; the right one fails the node's streams over at once.
func TestHostLeaveSubject(t *testing.T) {
	c := newCluster(t, 1, func(o *Options) { o.NATSSystemURL = "" })
	hosts := map[string]*host{}
	for _, n := range []string{"h1", "h2", "h3"} {
		hosts[n] = c.host(n)
	}
	testutil.Eventually(t, 5*time.Second, "three live hosts", func() bool {
		var ci wire.ClusterInfo
		return c.admin(wire.VerbClusterInfo, "", &ci) == nil && len(ci.Nodes) == 3
	})
	a := c.create("a", 3).Assignment
	var other string
	for _, n := range a.Followers {
		other = n
	}
	for _, tc := range []struct{ subject, body string }{
		{wire.HostLeaveSubject(a.Owner), fmt.Sprintf(`{"node":%q}`, other)},
		{wire.HostLeaveSubject(a.Owner), `{"node":"h1","bogus":1}`},
		{wire.HostLeaveSubject("h+1"), `{}`},
	} {
		if e := request(t, c.client, tc.subject, tc.body, nil); e == nil || e.Code != wire.CodeBadRequest {
			t.Fatalf("leave on %s with %s: %v; want bad_request", tc.subject, tc.body, e)
		}
	}
	if info := c.info("a"); info.Assignment.Epoch != 1 || info.Assignment.Owner != a.Owner {
		t.Fatalf("refused leaves moved the stream: %+v", info.Assignment)
	}
	var ci wire.ClusterInfo
	if e := c.admin(wire.VerbClusterInfo, "", &ci); e != nil {
		t.Fatal(e)
	}
	for _, n := range ci.Nodes {
		if n.State != wire.NodeLive {
			t.Fatalf("node %s is %s after refused leaves", n.Node, n.State)
		}
	}

	// The leaving host beats no more (as a real host after its leave
	// request). Its beats used to go on as a live host's: heard after the
	// leave, it was registered live again, and a recovery reading the
	// state then did not count it leaving, so at equal tails the lowest
	// id, often the owner itself, was promoted again (a flaky failure).
	// Nor does it beat leaving: only the leave request can move the
	// stream, and the node must be left, not expired.
	hosts[a.Owner].stopBeats()
	var ok wire.OK
	if e := request(t, c.client, wire.HostLeaveSubject(a.Owner), wire.NodeRef{Node: a.Owner}, &ok); e != nil || !ok.OK {
		t.Fatalf("leave of %s: %+v %v", a.Owner, ok, e)
	}
	info := c.waitInfo("a", "failover on the host's leave", 3*time.Second, func(i wire.StreamInfo) bool { return i.Assignment.Epoch == 2 })
	if info.Assignment.Owner == a.Owner {
		t.Fatalf("owner %s after it left", info.Assignment.Owner)
	}
	if e := c.admin(wire.VerbClusterInfo, "", &ci); e != nil {
		t.Fatal(e)
	}
	for _, n := range ci.Nodes {
		if n.Node == a.Owner && n.State != wire.NodeLeft {
			t.Fatalf("node %s is %s after its leave, want left", n.Node, n.State)
		}
	}
	// An empty body is the subject's node.
	if e := request(t, c.client, wire.HostLeaveSubject(other), "", &ok); e != nil || !ok.OK {
		t.Fatalf("leave of %s with an empty body: %+v %v", other, ok, e)
	}
}

// TestBadAdminRequests sends each malformed or impossible request and
// checks its stable error code; none changes the state.
func TestBadAdminRequests(t *testing.T) {
	c := newCluster(t, 1, func(o *Options) { o.NATSSystemURL = ""; o.HTTPAddr = "127.0.0.1:0" })
	resp, err := http.Get("http://" + c.servers[1].HTTPAddr() + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	if err := resp.Body.Close(); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"h1", "h2", "h3"} {
		c.host(n)
	}
	testutil.Eventually(t, 5*time.Second, "three live hosts", func() bool {
		var ci wire.ClusterInfo
		return c.admin(wire.VerbClusterInfo, "", &ci) == nil && len(ci.Nodes) == 3
	})
	c.create("s", 3)
	var before wire.StreamList
	if e := c.admin(wire.VerbStreamList, "", &before); e != nil {
		t.Fatal(e)
	}

	cases := []struct {
		name, verb, body, code string
	}{
		{"malformed json", wire.VerbStreamCreate, `{`, wire.CodeBadRequest},
		{"unknown field", wire.VerbStreamCreate, `{"stream":"a","copies":1,"bogus":1}`, wire.CodeBadRequest},
		{"trailing data", wire.VerbStreamCreate, `{"stream":"a","copies":1} {}`, wire.CodeBadRequest},
		{"wrong type", wire.VerbStreamCreate, `{"stream":"a","copies":"one"}`, wire.CodeBadRequest},
		{"bad stream name", wire.VerbStreamCreate, `{"stream":"a.b","copies":1}`, wire.CodeBadRequest},
		{"empty stream name", wire.VerbStreamCreate, `{"copies":1}`, wire.CodeBadRequest},
		{"empty body for create", wire.VerbStreamCreate, ``, wire.CodeBadRequest},
		{"zero copies", wire.VerbStreamCreate, `{"stream":"a","copies":0}`, wire.CodeBadRequest},
		{"eight copies", wire.VerbStreamCreate, `{"stream":"a","copies":8}`, wire.CodeBadRequest},
		{"bad policy", wire.VerbStreamCreate, `{"stream":"a","copies":1,"policy":"most"}`, wire.CodeBadRequest},
		{"bad policy count", wire.VerbStreamCreate, `{"stream":"a","copies":1,"policy":"replica_durable(0)"}`, wire.CodeBadRequest},
		{"negative max age", wire.VerbStreamCreate, `{"stream":"a","copies":1,"retention":{"max_age_ms":-1}}`, wire.CodeBadRequest},
		{"more copies than hosts", wire.VerbStreamCreate, `{"stream":"a","copies":4}`, wire.CodeUnavailable},
		{"exists", wire.VerbStreamCreate, `{"stream":"s","copies":1}`, wire.CodeExists},
		{"info of a missing stream", wire.VerbStreamInfo, `{"stream":"nope"}`, wire.CodeNotFound},
		{"info without a name", wire.VerbStreamInfo, `{}`, wire.CodeBadRequest},
		{"delete of a missing stream", wire.VerbStreamDelete, `{"stream":"nope"}`, wire.CodeNotFound},
		{"list with an argument", wire.VerbStreamList, `{"x":1}`, wire.CodeBadRequest},
		{"cluster info with an array", wire.VerbClusterInfo, `[]`, wire.CodeBadRequest},
		{"drain an unknown node", wire.VerbNodeDrain, `{"node":"h9"}`, wire.CodeNotFound},
		{"drain without a node", wire.VerbNodeDrain, `{"node":""}`, wire.CodeBadRequest},
		{"undrain an unknown node", wire.VerbNodeUndrain, `{"node":"h9"}`, wire.CodeNotFound},
		{"move an unknown stream", wire.VerbStreamMove, `{"stream":"nope"}`, wire.CodeNotFound},
		{"move with a bad node", wire.VerbStreamMove, `{"stream":"s1","node":"h 1"}`, wire.CodeBadRequest},
		{"move with a negative timeout", wire.VerbStreamMove, `{"stream":"s1","timeout_ms":-1}`, wire.CodeBadRequest},
		{"move with a timeout above the cap", wire.VerbStreamMove, `{"stream":"s1","timeout_ms":30001}`, wire.CodeBadRequest},
		{"move with an unknown field", wire.VerbStreamMove, `{"stream":"s1","to":"h2"}`, wire.CodeBadRequest},
		{"leave with a bad name", wire.VerbNodeLeave, `{"node":"h 1"}`, wire.CodeBadRequest},
		{"withdraw without a recovery", wire.VerbRecoveryWithdraw, `{"stream":"s"}`, wire.CodeNotFound},
		{"withdraw of a missing stream", wire.VerbRecoveryWithdraw, `{"stream":"nope"}`, wire.CodeNotFound},
		{"accept loss of a serving stream", wire.VerbRecoveryAcceptLoss, `{"stream":"s"}`, wire.CodeConflict},
		{"accept loss with a bad node", wire.VerbRecoveryAcceptLoss, `{"stream":"s","node":"*"}`, wire.CodeBadRequest},
		{"clear without a warning", wire.VerbAttentionClear, `{"stream":"s"}`, wire.CodeNotFound},
		{"unknown verb", "stream.explode", `{}`, wire.CodeBadRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := c.admin(tc.verb, tc.body, nil)
			if e == nil || e.Code != tc.code || e.Message == "" {
				t.Fatalf("%s %s: got %+v, want code %s", tc.verb, tc.body, e, tc.code)
			}
		})
	}
	if e := request(t, c.client, wire.AssignPull, `{"node":"a.b"}`, nil); e == nil || e.Code != wire.CodeBadRequest {
		t.Fatalf("pull with a bad node: %v", e)
	}
	if e := request(t, c.client, wire.AssignPull, `{"node":"h1","x":1}`, nil); e == nil || e.Code != wire.CodeBadRequest {
		t.Fatalf("pull with an unknown field: %v", e)
	}
	// Nothing was half-written.
	var after wire.StreamList
	if e := c.admin(wire.VerbStreamList, "", &after); e != nil {
		t.Fatal(e)
	}
	if len(after.Streams) != 1 || !reflect.DeepEqual(after.Streams[0].Assignment, before.Streams[0].Assignment) || after.Streams[0].Version != before.Streams[0].Version {
		t.Fatalf("bad requests changed the streams: %+v", after)
	}
	// Empty bodies are fine for verbs without arguments.
	var ci wire.ClusterInfo
	if e := c.admin(wire.VerbClusterInfo, "", &ci); e != nil || ci.AnsweredBy != 1 || ci.Leader != 1 || ci.Local {
		t.Fatalf("cluster.info: %+v %v", ci, e)
	}
	var ok wire.OK
	if e := c.admin(wire.VerbStreamDelete, `{"stream":"s"}`, &ok); e != nil || !ok.OK {
		t.Fatalf("delete: %v", e)
	}
	var snap wire.AssignmentSnapshot
	if e := request(t, c.client, wire.AssignPull, `{"node":"h1"}`, &snap); e != nil || len(snap.Assignments) != 0 || snap.Streams == nil || len(snap.Streams) != 0 {
		t.Fatalf("snapshot after delete: %+v %v", snap, e)
	}
}
