package judge

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

var cfg = Config{TTL: 2 * time.Second, LagWindow: 10 * time.Second}

// fixture builds a judge input: a view that has listened for long, and
// heartbeats received at the fixture's now.
type fixture struct {
	now  time.Time
	view View
	hbs  map[string]HeartbeatSeen
}

func newFixture() *fixture {
	return &fixture{
		now:  t0,
		view: View{Version: 7, ListeningSince: t0.Add(-time.Hour)},
		hbs:  map[string]HeartbeatSeen{},
	}
}

func (f *fixture) node(name, state string) *fixture {
	f.view.Nodes = append(f.view.Nodes, wire.NodeInfo{Node: name, State: state, LastSeenMS: 100})
	return f
}

// hb records a fresh heartbeat of node listing copies.
func (f *fixture) hb(node string, copies ...wire.CopyStatus) *fixture {
	f.hbs[node] = HeartbeatSeen{Heartbeat: wire.Heartbeat{Node: node, Incarnation: 1, Copies: copies}, At: f.now}
	return f
}

func (f *fixture) stream(s wire.StreamInfo) *fixture {
	f.view.Streams = append(f.view.Streams, s)
	return f
}

func (f *fixture) judge(mem *Memory) []wire.AttentionEntry {
	return Judge(cfg, f.view, f.hbs, mem, f.now)
}

func cp(stream, role string, epoch, tail uint64) wire.CopyStatus {
	return wire.CopyStatus{Stream: stream, StreamID: 1, Role: role, Epoch: epoch, RecordTail: tail, CursorTail: tail / 10}
}

func sealed(c wire.CopyStatus) wire.CopyStatus { c.Sealed = true; return c }

func assign(epoch uint64, pol, owner string, followers ...string) wire.Assignment {
	return wire.Assignment{Stream: "s", StreamID: 1, Epoch: epoch, Owner: owner, Followers: followers, Policy: pol}
}

func serving(a wire.Assignment) wire.StreamInfo {
	return wire.StreamInfo{Stream: a.Stream, StreamID: a.StreamID, Assignment: a, Policy: a.Policy, Status: wire.StatusServing}
}

func kinds(es []wire.AttentionEntry) []string {
	out := []string{}
	for _, e := range es {
		out = append(out, e.Kind+"/"+e.Stream+"/"+e.Node)
	}
	return out
}

func only(t *testing.T, es []wire.AttentionEntry, kind string) wire.AttentionEntry {
	t.Helper()
	if len(es) != 1 || es[0].Kind != kind {
		t.Fatalf("want exactly one %s entry, got %v", kind, kinds(es))
	}
	return es[0]
}

func none(t *testing.T, es []wire.AttentionEntry) {
	t.Helper()
	if len(es) != 0 {
		t.Fatalf("want no entries, got %v", kinds(es))
	}
}

func wantFigures(t *testing.T, e wire.AttentionEntry, want map[string]any) {
	t.Helper()
	for k, v := range want {
		if got, ok := e.Figures[k]; !ok || !reflect.DeepEqual(got, v) {
			t.Errorf("%s figure %q = %#v (present %v), want %#v", e.Kind, k, got, ok, v)
		}
	}
}

// prefixWait is the seed's second-failure case: B took over at epoch 2 with
// 100 records, was lost right after, and neither C nor D has caught up.
func prefixWait() wire.StreamInfo {
	old := assign(2, "majority_durable", "B", "C", "D")
	s := serving(old)
	s.Status = wire.StatusWaiting
	start := wire.HistoryStart{Epoch: 2, RecordTail: 100, CursorTail: 12, Node: "B"}
	s.Starts = []wire.HistoryStart{{Epoch: 1, RecordTail: 0, Node: "A"}, start}
	s.Recovery = &wire.PendingRecovery{
		Stream: "s", Transition: 4, Old: old, Proposal: assign(3, "majority_durable", "C", "D", "E"), Reason: "expired",
		Wait: &wire.RecoveryWait{Kind: WaitConfirmedPrefix, Start: &start, BestTail: 85, BestNode: "D", Answered: 2, Needed: 2},
	}
	return s
}

func TestWaitPrefixListsStartAndBestLiveTail(t *testing.T) {
	f := newFixture().node("B", wire.NodeExpired).node("C", wire.NodeLive).node("D", wire.NodeLive).
		hb("C", sealed(cp("s", wire.RoleFollower, 3, 90))).
		hb("D", sealed(cp("s", wire.RoleFollower, 3, 80))).
		stream(prefixWait())
	var got []wire.AttentionEntry
	for _, e := range f.judge(NewMemory()) {
		if e.Kind == wire.AttentionWaitPrefix {
			got = append(got, e)
		}
	}
	e := only(t, got, wire.AttentionWaitPrefix)
	if e.Severity != wire.SeverityCritical || e.Stream != "s" || e.Node != "B" {
		t.Errorf("entry = %+v", e)
	}
	wantFigures(t, e, map[string]any{
		"start_record_tail": uint64(100),
		"start_epoch":       uint64(2),
		"start_node":        "B",
		"fence_epoch":       uint64(3),
		"best_tail":         uint64(90), // C's heartbeat beats the worker's 85 on D
		"best_node":         "C",
		"missing_records":   uint64(10),
	})
	for _, w := range []string{"100 records", "epoch 2 on B", "best live tail 90 on C"} {
		if !strings.Contains(e.Headline, w) {
			t.Errorf("headline %q lacks %q", e.Headline, w)
		}
	}
}

func TestWaitPrefixStartFromStartsWhenWaitHasNone(t *testing.T) {
	s := prefixWait()
	s.Recovery.Wait.Start = nil
	f := newFixture().node("B", wire.NodeExpired).
		hb("C", sealed(cp("s", wire.RoleFollower, 3, 90))).
		hb("D", sealed(cp("s", wire.RoleFollower, 3, 80))).
		stream(s)
	e := only(t, filter(f.judge(nil), wire.AttentionWaitPrefix), wire.AttentionWaitPrefix)
	wantFigures(t, e, map[string]any{"start_record_tail": uint64(100), "start_epoch": uint64(2), "start_node": "B"})
}

func TestWaitPrefixWorkerBestTailOnDownNodeIgnored(t *testing.T) {
	s := prefixWait()
	s.Recovery.Wait.BestTail, s.Recovery.Wait.BestNode = 99, "B" // B answered, then died
	f := newFixture().node("B", wire.NodeExpired).
		hb("C", sealed(cp("s", wire.RoleFollower, 3, 90))).
		hb("D", sealed(cp("s", wire.RoleFollower, 3, 80))).
		stream(s)
	e := only(t, filter(f.judge(nil), wire.AttentionWaitPrefix), wire.AttentionWaitPrefix)
	wantFigures(t, e, map[string]any{"best_tail": uint64(90), "best_node": "C"})
}

// A copy that did not answer the last seal round is not the best live
// tail, though its last heartbeat is younger than the TTL: it is the copy
// just lost (seen in e2e TestKillNewOwner before this rule).
func TestWaitPrefixUnansweredCopyIsNotBest(t *testing.T) {
	s := prefixWait()
	s.Recovery.Wait.BestTail, s.Recovery.Wait.BestNode = 80, "D"
	s.Recovery.Wait.Unanswered = []string{"C"}
	f := newFixture().node("B", wire.NodeExpired).
		hb("C", cp("s", wire.RoleOwner, 3, 120)). // its last heartbeat, before it died
		hb("D", sealed(cp("s", wire.RoleFollower, 3, 80))).
		stream(s)
	e := only(t, filter(f.judge(nil), wire.AttentionWaitPrefix), wire.AttentionWaitPrefix)
	wantFigures(t, e, map[string]any{"best_tail": uint64(80), "best_node": "D"})
}

// The seed: attention judges from the tails copies publish in their
// heartbeats, so it stays quiet while a live copy has published nothing.
func TestWaitPrefixQuietWhileLiveCopyPublishedNothing(t *testing.T) {
	base := func() *fixture {
		return newFixture().node("B", wire.NodeExpired).
			hb("C", sealed(cp("s", wire.RoleFollower, 3, 90))).
			hb("D", sealed(cp("s", wire.RoleFollower, 3, 80))).
			stream(prefixWait())
	}
	t.Run("returning owner with an empty heartbeat", func(t *testing.T) {
		f := base().hb("B") // B is back: fresh heartbeat, nothing for s yet
		none(t, filter(f.judge(nil), wire.AttentionWaitPrefix))
	})
	t.Run("follower heartbeat without the copy", func(t *testing.T) {
		f := base().hb("D", cp("other", wire.RoleOwner, 1, 5))
		none(t, filter(f.judge(nil), wire.AttentionWaitPrefix))
	})
	t.Run("copy of an earlier stream of the same name is nothing", func(t *testing.T) {
		c := sealed(cp("s", wire.RoleFollower, 3, 80))
		c.StreamID = 99
		f := base().hb("D", c)
		none(t, filter(f.judge(nil), wire.AttentionWaitPrefix))
	})
	t.Run("not heard yet after the service started", func(t *testing.T) {
		f := base()
		f.view.ListeningSince = f.now.Add(-500 * time.Millisecond)
		delete(f.hbs, "D")
		none(t, filter(f.judge(nil), wire.AttentionWaitPrefix))
	})
	t.Run("the entry comes back once the copy publishes a short tail", func(t *testing.T) {
		f := base().hb("B", sealed(cp("s", wire.RoleOwner, 3, 70)))
		e := only(t, filter(f.judge(nil), wire.AttentionWaitPrefix), wire.AttentionWaitPrefix)
		wantFigures(t, e, map[string]any{"best_tail": uint64(90), "best_node": "C"})
	})
	t.Run("a silent node that stays silent for a TTL is down", func(t *testing.T) {
		f := base()
		f.view.Nodes[0].State = wire.NodeLive // coordinator has not expired D yet
		f.hbs["D"] = HeartbeatSeen{Heartbeat: f.hbs["D"].Heartbeat, At: f.now.Add(-3 * time.Second)}
		e := only(t, filter(f.judge(nil), wire.AttentionWaitPrefix), wire.AttentionWaitPrefix)
		wantFigures(t, e, map[string]any{"best_tail": uint64(90)})
	})
}

func filter(es []wire.AttentionEntry, kind string) []wire.AttentionEntry {
	var out []wire.AttentionEntry
	for _, e := range es {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

func TestWaitAnswers(t *testing.T) {
	old := assign(4, "majority_durable", "A", "B", "C")
	s := serving(old)
	s.Status = wire.StatusWaiting
	s.Recovery = &wire.PendingRecovery{Stream: "s", Transition: 9, Old: old, Reason: "expired",
		Wait: &wire.RecoveryWait{Kind: WaitAnswers, Answered: 1, Needed: 2, Unanswered: []string{"C", "A"}}}
	f := newFixture().node("A", wire.NodeExpired).node("B", wire.NodeLive).node("C", wire.NodeExpired).
		hb("B", sealed(cp("s", wire.RoleFollower, 5, 10))).stream(s)
	es := f.judge(nil)
	e := only(t, filter(es, wire.AttentionWaitAnswers), wire.AttentionWaitAnswers)
	wantFigures(t, e, map[string]any{
		"answered": 1, "needed": 2, "unanswered": []string{"A", "C"}, "copies": 3, "fence_epoch": uint64(5),
	})
	if !strings.Contains(e.Headline, "1 of 2") || !strings.Contains(e.Headline, "A, C") {
		t.Errorf("headline %q", e.Headline)
	}
	// A recovery never judges the confirm policy or lag: it does not serve.
	if n := len(filter(es, wire.AttentionBelowPolicy)); n != 0 {
		t.Errorf("below-policy listed for a recovering stream")
	}

	// Needed falls back to R of the old assignment (R = 3-2+1 = 2).
	s.Recovery.Wait.Needed = 0
	e = only(t, filter(newFixture().stream(s).judge(nil), wire.AttentionWaitAnswers), wire.AttentionWaitAnswers)
	wantFigures(t, e, map[string]any{"needed": 2})
}

func TestBelowPolicy(t *testing.T) {
	a := assign(5, "majority_durable", "A", "B", "C") // W = 2
	healthy := func() *fixture {
		return newFixture().node("A", wire.NodeLive).node("B", wire.NodeLive).node("C", wire.NodeLive).
			hb("A", cp("s", wire.RoleOwner, 5, 50)).
			hb("B", cp("s", wire.RoleFollower, 5, 50)).
			hb("C", cp("s", wire.RoleFollower, 5, 50)).
			stream(serving(a))
	}
	none(t, healthy().judge(nil))

	t.Run("one down one stale epoch", func(t *testing.T) {
		f := healthy().hb("C", cp("s", wire.RoleFollower, 4, 50))
		delete(f.hbs, "B")
		f.view.Nodes[1].State = wire.NodeExpired
		e := only(t, filter(f.judge(nil), wire.AttentionBelowPolicy), wire.AttentionBelowPolicy)
		wantFigures(t, e, map[string]any{
			"w": 2, "copies": 3, "current": 1, "current_nodes": []string{"A"}, "epoch": uint64(5), "policy": "majority_durable",
			"not_current": map[string]any{"B": "node expired", "C": "at epoch 4"},
		})
		if e.Severity != wire.SeverityCritical {
			t.Errorf("severity %s", e.Severity)
		}
	})
	t.Run("sealed copies are not current", func(t *testing.T) {
		f := healthy().hb("B", sealed(cp("s", wire.RoleFollower, 5, 50))).hb("C", sealed(cp("s", wire.RoleFollower, 5, 50)))
		only(t, f.judge(nil), wire.AttentionBelowPolicy)
	})
	t.Run("silent live copy counts as possibly current", func(t *testing.T) {
		f := healthy().hb("C") // C is live and published nothing for s
		delete(f.hbs, "B")
		f.view.Nodes[1].State = wire.NodeExpired
		none(t, filter(f.judge(nil), wire.AttentionBelowPolicy))
	})
	t.Run("every copy under local_durable", func(t *testing.T) {
		f := healthy()
		f.view.Streams[0].Assignment.Policy = "local_durable"
		f.hbs["C"] = HeartbeatSeen{Heartbeat: f.hbs["C"].Heartbeat, At: f.now.Add(-5 * time.Second)}
		e := only(t, f.judge(nil), wire.AttentionBelowPolicy)
		wantFigures(t, e, map[string]any{"w": 3, "current": 2})
		if got := e.Figures["not_current"].(map[string]any)["C"]; got != "node no heartbeat for 5s" {
			t.Errorf("not_current[C] = %v", got)
		}
	})
	t.Run("leaving node is down", func(t *testing.T) {
		f := healthy()
		for _, n := range []string{"B", "C"} {
			hs := f.hbs[n]
			hs.Heartbeat.Leaving = true
			f.hbs[n] = hs
		}
		only(t, f.judge(nil), wire.AttentionBelowPolicy)
	})
	t.Run("nothing heard yet after start is quiet", func(t *testing.T) {
		f := healthy()
		f.hbs = map[string]HeartbeatSeen{}
		f.view.ListeningSince = f.now.Add(-time.Second)
		none(t, f.judge(nil))
		// Once the service has listened for a TTL, silence is evidence.
		f.view.ListeningSince = f.now.Add(-3 * time.Second)
		only(t, f.judge(nil), wire.AttentionBelowPolicy)
	})
}

func TestSealedCopyLeftOut(t *testing.T) {
	a := assign(3, "majority_durable", "B", "C", "D")
	f := newFixture().
		hb("A", sealed(cp("s", wire.RoleNone, 3, 120))).
		hb("B", cp("s", wire.RoleOwner, 3, 100)).
		hb("C", cp("s", wire.RoleFollower, 3, 100)).
		hb("D", cp("s", wire.RoleFollower, 3, 100)).
		stream(serving(a))
	e := only(t, f.judge(nil), wire.AttentionSealedLeft)
	if e.Node != "A" || e.Stream != "s" || e.Severity != wire.SeverityWarning {
		t.Errorf("entry %+v", e)
	}
	wantFigures(t, e, map[string]any{"record_tail": uint64(120), "copy_epoch": uint64(3), "assignment_epoch": uint64(3)})

	// Unsealed, or included again by a later assignment: nothing.
	none(t, filter(newFixture().hb("A", cp("s", wire.RoleNone, 3, 120)).stream(serving(a)).judge(nil), wire.AttentionSealedLeft))
	a2 := assign(3, "majority_durable", "B", "C", "D", "A")
	none(t, filter(newFixture().hb("A", sealed(cp("s", wire.RoleNone, 3, 120))).stream(serving(a2)).judge(nil), wire.AttentionSealedLeft))

	// A node that stopped publishing is not judged from old heartbeats.
	f = newFixture().stream(serving(a))
	f.hbs["A"] = HeartbeatSeen{Heartbeat: wire.Heartbeat{Node: "A", Copies: []wire.CopyStatus{sealed(cp("s", wire.RoleNone, 3, 120))}}, At: f.now.Add(-10 * time.Second)}
	none(t, filter(f.judge(nil), wire.AttentionSealedLeft))

	// A copy that a pending recovery is sealing is not left out (yet).
	s := serving(a)
	s.Recovery = &wire.PendingRecovery{Stream: "s", Old: a2}
	none(t, filter(newFixture().hb("A", sealed(cp("s", wire.RoleNone, 3, 120))).stream(s).judge(nil), wire.AttentionSealedLeft))
}

func TestAcceptedLossStaysUntilCleared(t *testing.T) {
	a := assign(6, "majority_durable", "C", "D", "E")
	s := serving(a)
	s.AcceptedLoss = &wire.AcceptedLoss{Stream: "s", Epoch: 6, Node: "C", RecordTail: 90, StartTail: 100, AtMS: 5}
	f := newFixture().
		hb("C", cp("s", wire.RoleOwner, 6, 95)).hb("D", cp("s", wire.RoleFollower, 6, 95)).hb("E", cp("s", wire.RoleFollower, 6, 95)).
		stream(s)
	mem := NewMemory()
	e := only(t, f.judge(mem), wire.AttentionAcceptedLoss)
	wantFigures(t, e, map[string]any{"epoch": uint64(6), "record_tail": uint64(90), "start_tail": uint64(100), "records_below": uint64(10)})
	if e.Node != "C" || e.Severity != wire.SeverityWarning || !strings.Contains(e.Headline, "attention.clear") {
		t.Errorf("entry %+v", e)
	}
	// Nothing about the copies resolves it; only the coordinator clearing it.
	f.now = f.now.Add(time.Hour)
	for n, hs := range f.hbs {
		hs.At = f.now
		f.hbs[n] = hs
	}
	e = only(t, f.judge(mem), wire.AttentionAcceptedLoss)
	if e.SinceMS != t0.UnixMilli() {
		t.Errorf("since = %d, want %d", e.SinceMS, t0.UnixMilli())
	}
	f.view.Streams[0].AcceptedLoss = nil
	none(t, f.judge(mem))
}

func TestNodeGoneHoldingCopies(t *testing.T) {
	s1 := serving(assign(1, "", "A", "B"))
	s2 := serving(assign(1, "", "B", "C"))
	s2.Stream, s2.Assignment.Stream = "t", "t"
	f := newFixture().
		node("A", wire.NodeLive).node("B", wire.NodeExpired).node("C", wire.NodeDraining).node("D", wire.NodeLeft).
		stream(s1).stream(s2)
	f.view.ListeningSince = f.now // keep the stream kinds quiet: nobody heard yet
	es := filter(f.judge(nil), wire.AttentionNodeHolds)
	if got, want := kinds(es), []string{
		wire.AttentionNodeHolds + "//B",
		wire.AttentionNodeHolds + "//C",
	}; !slices.Equal(got, want) {
		t.Fatalf("entries %v, want %v", got, want)
	}
	b, c := es[0], es[1]
	if b.Severity != wire.SeverityWarning || c.Severity != wire.SeverityInfo {
		t.Errorf("severities %s %s", b.Severity, c.Severity)
	}
	wantFigures(t, b, map[string]any{"state": wire.NodeExpired, "copies": 2, "streams": []string{"s", "t"}, "owner_of": []string{"t"}})
	if b.Headline != "node B is expired and still holds 2 copies (owner of 1)" || c.Headline != "node C is draining and still holds 1 copy (owner of 0)" {
		t.Errorf("headlines %q, %q", b.Headline, c.Headline)
	}
	wantFigures(t, c, map[string]any{"state": wire.NodeDraining, "copies": 1, "owner_of": []string{}})

	// A left node that the stream list no longer places but the coordinator
	// still counts copies for.
	f.view.Nodes[3].Copies = 1
	es = filter(f.judge(nil), wire.AttentionNodeHolds)
	// Left is a warning, so it sorts before draining.
	if len(es) != 3 || es[1].Node != "D" {
		t.Fatalf("entries %v", kinds(es))
	}
	wantFigures(t, es[1], map[string]any{"copies": 1, "state": wire.NodeLeft, "streams": []string{}})
}

func TestFollowerNotCatchingUp(t *testing.T) {
	a := assign(2, "majority_durable", "A", "B", "C")
	f := newFixture().stream(serving(a))
	mem := NewMemory()
	step := func(at time.Duration, owner, b, c uint64) []wire.AttentionEntry {
		f.now = t0.Add(at)
		f.hb("A", cp("s", wire.RoleOwner, 2, owner)).hb("B", cp("s", wire.RoleFollower, 2, b)).hb("C", cp("s", wire.RoleFollower, 2, c))
		return f.judge(mem)
	}
	none(t, step(0, 10, 5, 10))
	none(t, step(5*time.Second, 20, 5, 20))
	none(t, step(9*time.Second, 25, 5, 25))
	e := only(t, step(10*time.Second, 30, 5, 30), wire.AttentionFollowerLag)
	if e.Node != "B" || e.Severity != wire.SeverityWarning {
		t.Errorf("entry %+v", e)
	}
	wantFigures(t, e, map[string]any{
		"follower_tail": uint64(5), "owner_tail": uint64(30), "owner_tail_then": uint64(10), "behind": uint64(25),
		"stuck_ms": int64(10000), "window_ms": int64(10000), "owner": "A",
	})
	if e.SinceMS != t0.Add(10*time.Second).UnixMilli() {
		t.Errorf("since %d", e.SinceMS)
	}
	// Advancing, however little, restarts the window.
	none(t, step(11*time.Second, 31, 6, 31))
	none(t, step(20*time.Second, 40, 6, 40))
	only(t, step(21*time.Second, 41, 6, 41), wire.AttentionFollowerLag)
	// Catching up clears it.
	none(t, step(22*time.Second, 41, 41, 41))
	// A missing heartbeat round keeps the track but judges nothing.
	none(t, step(23*time.Second, 50, 41, 50))
	delete(f.hbs, "B")
	f.now = t0.Add(30 * time.Second)
	none(t, filter(f.judge(mem), wire.AttentionFollowerLag))
	only(t, step(33*time.Second, 60, 41, 60), wire.AttentionFollowerLag)
	// Without memory nothing can have stood still.
	f.now = t0.Add(40 * time.Second)
	none(t, filter(f.judge(nil), wire.AttentionFollowerLag))
	// A new epoch starts the follower's track afresh.
	f.view.Streams[0].Assignment.Epoch = 3
	f.hb("A", cp("s", wire.RoleOwner, 3, 60)).hb("B", cp("s", wire.RoleFollower, 3, 41)).hb("C", cp("s", wire.RoleFollower, 3, 60))
	none(t, f.judge(mem))
}

func TestOwnerOnlyStreamWaitsForLostOwner(t *testing.T) {
	a := assign(1, "", "A")
	s := serving(a)
	s.Status = wire.StatusWaiting
	s.CopyTails = []wire.CopyTails{{Node: "A", Role: wire.RoleOwner, Epoch: 1, RecordTail: 42, Published: true}}
	f := newFixture().node("A", wire.NodeExpired).stream(s)
	es := f.judge(nil)
	if got, want := kinds(es), []string{wire.AttentionOwnerOnly + "/s/A", wire.AttentionNodeHolds + "//A"}; !slices.Equal(got, want) {
		t.Fatalf("entries %v, want %v (owner-only replaces below-policy)", got, want)
	}
	e := es[0]
	if e.Node != "A" || e.Severity != wire.SeverityCritical {
		t.Errorf("entry %+v", e)
	}
	wantFigures(t, e, map[string]any{"owner": "A", "epoch": uint64(1), "why": "expired", "node_state": wire.NodeExpired, "last_record_tail": uint64(42)})

	// A recovery of an owner-only stream waiting for its one answer is the
	// same story; it is listed once.
	s.Recovery = &wire.PendingRecovery{Stream: "s", Old: a, Wait: &wire.RecoveryWait{Kind: WaitAnswers, Needed: 1, Unanswered: []string{"A"}}}
	f = newFixture().node("A", wire.NodeExpired).stream(s)
	if got, want := kinds(f.judge(nil)), []string{wire.AttentionOwnerOnly + "/s/A", wire.AttentionNodeHolds + "//A"}; !slices.Equal(got, want) {
		t.Fatalf("entries %v, want %v", got, want)
	}

	// The owner is back: quiet.
	none(t, filter(newFixture().node("A", wire.NodeExpired).hb("A", cp("s", wire.RoleOwner, 1, 42)).stream(serving(a)).judge(nil), wire.AttentionOwnerOnly))
	// Not heard yet since the service started: quiet.
	f = newFixture().node("A", wire.NodeLive).stream(serving(a))
	f.view.ListeningSince = f.now.Add(-time.Second)
	none(t, f.judge(nil))
	// Silent for a TTL while the coordinator has not expired it yet.
	f.view.ListeningSince = f.now.Add(-time.Minute)
	e = only(t, f.judge(nil), wire.AttentionOwnerOnly)
	wantFigures(t, e, map[string]any{"why": "never heard", "node_state": wire.NodeLive})
}

func TestSinceWhenPersistsWhileConditionHolds(t *testing.T) {
	a := assign(1, "majority_durable", "A", "B", "C")
	f := newFixture().node("B", wire.NodeExpired).node("C", wire.NodeExpired).hb("A", cp("s", wire.RoleOwner, 1, 5)).stream(serving(a))
	mem := NewMemory()
	at := func(d time.Duration) []wire.AttentionEntry {
		f.now = t0.Add(d)
		f.hb("A", cp("s", wire.RoleOwner, 1, 5))
		return filter(f.judge(mem), wire.AttentionBelowPolicy)
	}
	e := only(t, at(0), wire.AttentionBelowPolicy)
	if e.SinceMS != t0.UnixMilli() {
		t.Fatalf("since %d", e.SinceMS)
	}
	e = only(t, at(5*time.Second), wire.AttentionBelowPolicy)
	if e.SinceMS != t0.UnixMilli() {
		t.Errorf("since moved to %d while the condition persisted", e.SinceMS)
	}
	f.view.Nodes[0].State = wire.NodeLive
	f.hb("B", cp("s", wire.RoleFollower, 1, 5))
	f.now = t0.Add(6 * time.Second)
	none(t, filter(f.judge(mem), wire.AttentionBelowPolicy))
	delete(f.hbs, "B")
	f.view.Nodes[0].State = wire.NodeExpired
	e = only(t, at(7*time.Second), wire.AttentionBelowPolicy)
	if e.SinceMS != t0.Add(7*time.Second).UnixMilli() {
		t.Errorf("a condition that went away and came back kept its old since %d", e.SinceMS)
	}
	// A fresh Memory (a restarted service) starts afresh.
	e = only(t, filter(Judge(cfg, f.view, f.hbs, NewMemory(), t0.Add(8*time.Second)), wire.AttentionBelowPolicy), wire.AttentionBelowPolicy)
	if e.SinceMS != t0.Add(8*time.Second).UnixMilli() {
		t.Errorf("since %d", e.SinceMS)
	}
}

func TestOrderIsDeterministic(t *testing.T) {
	build := func(order []int) *fixture {
		f := newFixture().node("X", wire.NodeExpired).node("B", wire.NodeExpired).node("C", wire.NodeLive).node("D", wire.NodeLive)
		f.hb("C", sealed(cp("s", wire.RoleFollower, 3, 90))).hb("D", sealed(cp("s", wire.RoleFollower, 3, 80)))
		f.hb("Z", sealed(cp("u", wire.RoleNone, 1, 3)), sealed(cp("v", wire.RoleNone, 1, 3)))
		streams := []wire.StreamInfo{prefixWait()}
		for _, name := range []string{"u", "v"} {
			a := assign(2, "", "C", "D")
			a.Stream = name
			s := serving(a)
			s.Stream = name
			s.AcceptedLoss = &wire.AcceptedLoss{Stream: name, Epoch: 2, Node: "C", RecordTail: 1, StartTail: 2}
			streams = append(streams, s)
		}
		oo := serving(assign(1, "", "X"))
		oo.Stream, oo.Assignment.Stream = "a", "a"
		streams = append(streams, oo)
		for _, i := range order {
			f.stream(streams[i])
		}
		return f
	}
	want := build([]int{0, 1, 2, 3}).judge(nil)
	wantKinds := []string{
		wire.AttentionOwnerOnly + "/a/X",
		wire.AttentionWaitPrefix + "/s/B",
		wire.AttentionAcceptedLoss + "/u/C",
		wire.AttentionAcceptedLoss + "/v/C",
		wire.AttentionNodeHolds + "//B",
		wire.AttentionNodeHolds + "//X",
		wire.AttentionSealedLeft + "/u/Z",
		wire.AttentionSealedLeft + "/v/Z",
	}
	if got := kinds(want); !slices.Equal(got, wantKinds) {
		t.Fatalf("order\n got %v\nwant %v", got, wantKinds)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		order := rng.Perm(4)
		if got := build(order).judge(nil); !reflect.DeepEqual(got, want) {
			t.Fatalf("stream order %v changed the list:\n%v\n%v", order, kinds(got), kinds(want))
		}
	}
}

// TestStoreFailed: a host that beats with a store error is listed, critical,
// with the error and the streams placed on it, while its heartbeat is
// fresh; its copies count as down (so the streams' own entries see a lost
// copy, not a live one), and a stale heartbeat drops the entry.
func TestStoreFailed(t *testing.T) {
	s := serving(assign(1, "majority_durable", "A", "B", "C"))
	f := newFixture().node("A", wire.NodeLeft).node("B", wire.NodeLive).node("C", wire.NodeLive).stream(s).
		hb("B", cp("s", wire.RoleFollower, 1, 10)).hb("C", cp("s", wire.RoleFollower, 1, 10))
	const msg = "streamlog: group commit: pebble: fatal commit error: write 000004.log: no space left on device"
	f.hbs["A"] = HeartbeatSeen{Heartbeat: wire.Heartbeat{Node: "A", Incarnation: 9, Leaving: true, StoreError: msg,
		Copies: []wire.CopyStatus{cp("s", wire.RoleNone, 1, 10)}}, At: f.now}
	es := filter(f.judge(nil), wire.AttentionStoreFailed)
	e := only(t, es, wire.AttentionStoreFailed)
	if e.Severity != wire.SeverityCritical || e.Node != "A" || !strings.Contains(e.Headline, msg) {
		t.Fatalf("entry %+v", e)
	}
	wantFigures(t, e, map[string]any{"error": msg, "copies_held": 1, "owner_of": []string{"s"}, "assigned_streams": []string{"s"}, "incarnation": uint64(9)})
	if st := newJudging(cfg, f.view, f.hbs, f.now).node("A"); st.liveness != down || st.why != "store failed" {
		t.Fatalf("node A judged %+v", st)
	}

	// Still left but no longer beating: the node kind says it, not this one.
	f.hbs["A"] = HeartbeatSeen{Heartbeat: f.hbs["A"].Heartbeat, At: f.now.Add(-3 * time.Second)}
	if es := filter(f.judge(nil), wire.AttentionStoreFailed); len(es) != 0 {
		t.Fatalf("stale heartbeat still listed: %v", kinds(es))
	}
}

// TestUnderReplicated: a stream whose assignment holds fewer copies than
// its E is listed as under_replicated with the figures of the coordinator's
// one rule (wire.StreamInfo.UnderReplicated): a warning at W=2 (no
// confirmed record on one copy only), critical once W is 1 (one more loss
// would lose confirmed records) or its floor refuses publishes; it is
// listed during a recovery of that assignment too, and cleared once the
// copies are back.
func TestUnderReplicated(t *testing.T) {
	short := func(a wire.Assignment, minCopies int) wire.StreamInfo {
		s := serving(a)
		s.Copies, s.MinCopies = 3, minCopies
		s.UnderReplicated = a.UnderReplicated(s.Copies, minCopies, t0.Add(-time.Minute).UnixMilli())
		return s
	}
	two := assign(2, "majority_durable", "B", "C")
	f := newFixture().node("B", wire.NodeLive).node("C", wire.NodeLive).
		hb("B", cp("s", wire.RoleOwner, 2, 50)).hb("C", cp("s", wire.RoleFollower, 2, 50)).stream(short(two, 0))
	e := only(t, f.judge(nil), wire.AttentionUnderRepl)
	if e.Severity != wire.SeverityWarning || e.Stream != "s" || e.Node != "B" {
		t.Errorf("2 of 3 copies: %+v", e)
	}
	wantFigures(t, e, map[string]any{
		"copies": 2, "copies_wanted": 3, "w": 2, "loss_loses_confirmed": false, "publishes_refused": false,
		"under_replicated_since_ms": t0.Add(-time.Minute).UnixMilli(), "policy": "majority_durable", "min_copies": 0,
		"copy_nodes": []string{"B", "C"}, "epoch": uint64(2),
	})

	one := assign(3, "majority_durable", "C")
	f = newFixture().node("C", wire.NodeLive).hb("C", cp("s", wire.RoleOwner, 3, 60)).stream(short(one, 0))
	e = only(t, f.judge(nil), wire.AttentionUnderRepl)
	if e.Severity != wire.SeverityCritical || !strings.Contains(e.Headline, "one more loss would lose confirmed records") {
		t.Errorf("1 of 3 copies: %+v", e)
	}
	wantFigures(t, e, map[string]any{"copies": 1, "w": 1, "loss_loses_confirmed": true, "publishes_refused": false})

	f = newFixture().node("C", wire.NodeLive).hb("C", cp("s", wire.RoleOwner, 3, 60)).stream(short(one, 2))
	e = only(t, f.judge(nil), wire.AttentionUnderRepl)
	if !strings.Contains(e.Headline, "publishes are refused below min_copies 2") {
		t.Errorf("headline %q", e.Headline)
	}
	wantFigures(t, e, map[string]any{"min_copies": 2, "publishes_refused": true})

	// A floor the 2 copies meet refuses nothing: still a warning.
	f = newFixture().node("B", wire.NodeLive).node("C", wire.NodeLive).
		hb("B", cp("s", wire.RoleOwner, 2, 50)).hb("C", cp("s", wire.RoleFollower, 2, 50)).stream(short(two, 2))
	if e := only(t, f.judge(nil), wire.AttentionUnderRepl); e.Severity != wire.SeverityWarning {
		t.Errorf("2 copies at a floor of 2: %+v", e)
	}

	// While the short assignment recovers, it is still listed, beside the
	// recovery's own entries.
	s := short(two, 0)
	s.Status = wire.StatusRecovering
	s.Recovery = &wire.PendingRecovery{Stream: "s", Transition: 3, Old: two, Proposal: assign(3, "majority_durable", "C"), Reason: "expired",
		Wait: &wire.RecoveryWait{Kind: WaitAnswers, Answered: 0, Needed: 1, Unanswered: []string{"B", "C"}}}
	f = newFixture().node("B", wire.NodeExpired).node("C", wire.NodeLive).hb("C", sealed(cp("s", wire.RoleFollower, 2, 50))).stream(s)
	only(t, filter(f.judge(nil), wire.AttentionUnderRepl), wire.AttentionUnderRepl)

	// Copies back: nothing.
	full := assign(4, "majority_durable", "C", "A", "B")
	f = newFixture().node("A", wire.NodeLive).node("B", wire.NodeLive).node("C", wire.NodeLive).
		hb("A", cp("s", wire.RoleFollower, 4, 60)).hb("B", cp("s", wire.RoleFollower, 4, 60)).hb("C", cp("s", wire.RoleOwner, 4, 60)).
		stream(short(full, 2))
	none(t, f.judge(nil))
}

// TestDrainStuck: a draining node that still owns streams is listed once,
// with each stream and why it stays: one copy, a recovery pending, no
// follower on a live node, or not moved (a live follower exists). A node
// whose drain is still running (live) or that owns nothing is not listed.
func TestDrainStuck(t *testing.T) {
	one := serving(assign(1, "", "C"))
	one.Stream, one.Assignment.Stream = "one", "one"
	stuck := serving(assign(1, "", "C", "B"))
	stuck.Stream, stuck.Assignment.Stream = "stuck", "stuck"
	left := serving(assign(1, "", "C", "A"))
	left.Stream, left.Assignment.Stream = "left", "left"
	rec := serving(assign(1, "", "C", "A"))
	rec.Stream, rec.Assignment.Stream = "rec", "rec"
	rec.Recovery = &wire.PendingRecovery{Transition: 2, Reason: "move"}
	other := serving(assign(1, "", "A", "C"))
	other.Stream, other.Assignment.Stream = "other", "other"
	f := newFixture().
		node("A", wire.NodeLive).node("B", wire.NodeExpired).node("C", wire.NodeDraining).node("D", wire.NodeDraining).
		stream(one).stream(stuck).stream(left).stream(rec).stream(other)
	f.view.ListeningSince = f.now
	es := filter(f.judge(nil), wire.AttentionDrainStuck)
	if len(es) != 1 || es[0].Node != "C" || es[0].Severity != wire.SeverityWarning {
		t.Fatalf("entries %v, want one warning for C", kinds(es))
	}
	wantFigures(t, es[0], map[string]any{
		"owner_of": []string{"left", "one", "rec", "stuck"},
		"why": map[string]string{"one": wire.DrainStayOneCopy, "stuck": wire.DrainStayNoLiveFollower,
			"left": wire.DrainStayNotMoved, "rec": wire.DrainStayRecovering},
	})
	if want := "node C is draining and still owns 4 streams: 1 no_live_follower, 1 not_moved, 1 one_copy, 1 recovery_pending"; es[0].Headline != want {
		t.Errorf("headline %q, want %q", es[0].Headline, want)
	}
}

// A heartbeat past the TTL stands for LateGrace more while the coordinators
// count its node live or draining; their expiry, a silence past the
// grace, or a node they do not know is down at once.
func TestLateHeartbeatStandsForTheGrace(t *testing.T) {
	a := assign(5, "majority_durable", "A", "B", "C") // W = 2
	g := Config{TTL: 2 * time.Second, LagWindow: 10 * time.Second, LateGrace: 2 * time.Second}
	judgeWith := func(state string, age time.Duration) []wire.AttentionEntry {
		f := newFixture().node("A", wire.NodeLive).node("B", state).node("C", wire.NodeExpired).
			hb("A", cp("s", wire.RoleOwner, 5, 50)).
			hb("B", cp("s", wire.RoleFollower, 5, 50)).
			stream(serving(a))
		if state == "" {
			f.view.Nodes = f.view.Nodes[:1]
		}
		f.hbs["B"] = HeartbeatSeen{Heartbeat: f.hbs["B"].Heartbeat, At: f.now.Add(-age)}
		return filter(Judge(g, f.view, f.hbs, nil, f.now), wire.AttentionBelowPolicy)
	}
	for _, tc := range []struct {
		state string
		age   time.Duration
		down  bool
	}{
		{wire.NodeLive, 3 * time.Second, false},
		{wire.NodeDraining, 4 * time.Second, false},
		{wire.NodeLive, 4100 * time.Millisecond, true},
		{wire.NodeExpired, 3 * time.Second, true},
		{wire.NodeLeft, time.Second, true},
		{"", 3 * time.Second, true},
	} {
		if got := len(judgeWith(tc.state, tc.age)) == 1; got != tc.down {
			t.Errorf("B %q, heard %v ago: down %v, want %v", tc.state, tc.age, got, tc.down)
		}
	}
}
