package controller

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/liveness"
	"github.com/brook-streams/brook/services/coordinator/state"
)

var t0 = time.UnixMilli(1_000_000)

var params = Params{TTL: 2 * time.Second, DisconnectGrace: 300 * time.Millisecond, ReplaceAfter: 30 * time.Second, DefaultPolicy: "majority_durable"}

// fixture is a state plus a liveness view, both built by hand.
type fixture struct {
	t    *testing.T
	s    *state.State
	live Liveness
}

func newFixture(t *testing.T, nodes ...string) *fixture {
	f := &fixture{t: t, s: state.New(), live: Liveness{LeaderSince: t0.Add(-time.Hour), Nodes: map[string]liveness.Seen{}}}
	for _, n := range nodes {
		f.apply(state.NodeSeen(n, 1, t0.UnixMilli()))
		f.beat(n, t0)
	}
	return f
}

func (f *fixture) apply(c state.Command) state.Result {
	f.t.Helper()
	r := f.s.Apply(c)
	if r.Err() != nil {
		f.t.Fatalf("apply %s: %v", c.Op, r.Err())
	}
	return r
}

func (f *fixture) beat(n string, at time.Time, copies ...wire.CopyStatus) {
	seen := f.live.Nodes[n]
	seen.Node, seen.Incarnation, seen.LastSeen = n, 1, at
	seen.Copies = map[string]wire.CopyStatus{}
	for _, c := range copies {
		seen.Copies[c.Stream] = c
	}
	f.live.Nodes[n] = seen
}

func (f *fixture) create(name string, copies int, owner string, followers ...string) {
	f.apply(state.StreamCreate(name, copies, "", wire.Retention{}, wire.Assignment{Owner: owner, Followers: followers, Policy: "majority_durable"}, t0.UnixMilli()))
}

// plan plans, and checks the shape the control loop relies on to run
// stream actions concurrently: node actions first, then at most one
// action per stream.
func (f *fixture) plan(now time.Time) []Action {
	f.t.Helper()
	acts := Plan(f.s, f.live, now, params)
	streams := map[string]bool{}
	for i, a := range acts {
		if a.Stream == "" {
			if len(streams) > 0 {
				f.t.Fatalf("node action %d (%s) after a stream action: %s", i, a.Kind, kinds(acts))
			}
			continue
		}
		if streams[a.Stream] {
			f.t.Fatalf("two actions for stream %s in one plan: %s", a.Stream, kinds(acts))
		}
		streams[a.Stream] = true
	}
	return acts
}

func kinds(acts []Action) string {
	out := ""
	for _, a := range acts {
		out += fmt.Sprintf("%s(%s%s:%s) ", a.Kind, a.Node, a.Stream, a.Reason)
	}
	return out
}

func find(acts []Action, kind, key string) *Action {
	for i := range acts {
		if acts[i].Kind == kind && (acts[i].Node == key || acts[i].Stream == key) {
			return &acts[i]
		}
	}
	return nil
}

func TestExpiryAfterTTL(t *testing.T) {
	f := newFixture(t, "h1", "h2")
	if acts := f.plan(t0.Add(1999 * time.Millisecond)); len(acts) != 0 {
		t.Fatalf("before the TTL: %s", kinds(acts))
	}
	f.beat("h2", t0.Add(time.Second))
	acts := f.plan(t0.Add(2 * time.Second))
	if len(acts) != 1 || acts[0].Kind != ActExpire || acts[0].Node != "h1" || acts[0].Reason != DetectTTL || acts[0].Incarnation != 1 {
		t.Fatalf("at the TTL: %s", kinds(acts))
	}
}

func TestNewLeaderWaitsOneTTL(t *testing.T) {
	f := newFixture(t, "h1", "h3")
	// A node this coordinator never heard (it just became leader).
	f.apply(state.NodeSeen("h2", 1, t0.UnixMilli()))
	f.live.LeaderSince = t0.Add(10 * time.Second)
	// h1's last heartbeat is long past, h2 never heard: both wait a TTL from leadership.
	if acts := f.plan(t0.Add(11 * time.Second)); len(acts) != 0 {
		t.Fatalf("within the new leader's grace: %s", kinds(acts))
	}
	f.beat("h3", t0.Add(11500*time.Millisecond)) // heard: the silence of h1 and h2 is theirs
	acts := f.plan(t0.Add(12 * time.Second))
	if find(acts, ActExpire, "h1") == nil || find(acts, ActExpire, "h2") == nil || find(acts, ActExpire, "h3") != nil {
		t.Fatalf("after the grace: %s", kinds(acts))
	}
}

// TestEveryHostSilentAtOnceExpiresNobody: when no host at all has been
// heard for a TTL, the silence is the coordinator's (starved, or its
// servers), so the TTL expires nobody; once one host is heard again, the
// others expire as usual. A lone host still expires by its TTL, and a
// disconnect advisory (the server saw the connection close) still counts.
func TestEveryHostSilentAtOnceExpiresNobody(t *testing.T) {
	f := newFixture(t, "h1", "h2", "h3")
	if acts := f.plan(t0.Add(5 * time.Second)); len(acts) != 0 {
		t.Fatalf("every host silent: %s", kinds(acts))
	}
	f.beat("h2", t0.Add(5*time.Second))
	acts := f.plan(t0.Add(5100 * time.Millisecond))
	if len(acts) != 2 || find(acts, ActExpire, "h1") == nil || find(acts, ActExpire, "h3") == nil {
		t.Fatalf("h2 heard again: %s", kinds(acts))
	}

	solo := newFixture(t, "h1")
	if acts := solo.plan(t0.Add(5 * time.Second)); find(acts, ActExpire, "h1") == nil {
		t.Fatalf("a lone host's silence: %s", kinds(acts))
	}

	adv := newFixture(t, "h1", "h2", "h3")
	seen := adv.live.Nodes["h1"]
	seen.DisconnectedAt = t0.Add(100 * time.Millisecond)
	adv.live.Nodes["h1"] = seen
	acts = adv.plan(t0.Add(5 * time.Second))
	if a := find(acts, ActExpire, "h1"); a == nil || a.Reason != DetectAdvisory || len(acts) != 1 {
		t.Fatalf("an advisory while every host is silent: %s", kinds(acts))
	}
}

func TestAdvisoryExpiresAfterGraceUnlessAHeartbeatCame(t *testing.T) {
	f := newFixture(t, "h1", "h2")
	seen := f.live.Nodes["h1"]
	seen.DisconnectedAt = t0.Add(100 * time.Millisecond)
	f.live.Nodes["h1"] = seen
	if acts := f.plan(t0.Add(399 * time.Millisecond)); len(acts) != 0 {
		t.Fatalf("within the disconnect grace: %s", kinds(acts))
	}
	acts := f.plan(t0.Add(400 * time.Millisecond))
	if a := find(acts, ActExpire, "h1"); a == nil || a.Reason != DetectAdvisory {
		t.Fatalf("after the grace: %s", kinds(acts))
	}
	// A heartbeat after the advisory (the tracker clears DisconnectedAt).
	tr := liveness.New()
	tr.Heartbeat(wire.Heartbeat{Node: "h1", Incarnation: 1}, t0)
	tr.Disconnected("h1", liveness.Conn{}, t0.Add(100*time.Millisecond))
	tr.Heartbeat(wire.Heartbeat{Node: "h1", Incarnation: 1}, t0.Add(200*time.Millisecond))
	f.live.Nodes["h1"] = tr.View()["h1"]
	if acts := f.plan(t0.Add(500 * time.Millisecond)); len(acts) != 0 {
		t.Fatalf("reconnected host: %s", kinds(acts))
	}
}

// TestAdvisoryAboutAnOlderConnectionIsIgnored: a host's connection A
// drops, it reconnects (connection B) and beats; the advisory about A is
// processed only then (it travels on another connection, so nothing
// orders it after the beat). Matched by name and stamped with the time it
// was received, it expired the healthy host after the grace; it must
// count only for the connection the host beats on.
func TestAdvisoryAboutAnOlderConnectionIsIgnored(t *testing.T) {
	f := newFixture(t, "h1", "h2")
	a := liveness.Conn{Server: "NSERVER1", ID: 7}
	b := liveness.Conn{Server: "NSERVER1", ID: 9}
	tr := liveness.New()
	tr.Heartbeat(wire.Heartbeat{Node: "h1", Incarnation: 1, ConnServer: a.Server, ConnID: a.ID}, t0)
	tr.Heartbeat(wire.Heartbeat{Node: "h1", Incarnation: 1, ConnServer: b.Server, ConnID: b.ID}, t0.Add(50*time.Millisecond))
	if tr.Disconnected("h1", a, t0.Add(100*time.Millisecond)) {
		t.Fatal("an advisory about the older connection counted")
	}
	f.live.Nodes["h1"] = tr.View()["h1"]
	if acts := f.plan(t0.Add(500 * time.Millisecond)); find(acts, ActExpire, "h1") != nil {
		t.Fatalf("a host beating on a new connection was expired by an advisory about its old one: %s", kinds(acts))
	}
	// A beat sent on A before the reconnect but processed after B's does
	// not take the connection back: A's advisory still does not count.
	tr.Heartbeat(wire.Heartbeat{Node: "h1", Incarnation: 1, Beat: 5, ConnServer: b.Server, ConnID: b.ID}, t0.Add(60*time.Millisecond))
	tr.Heartbeat(wire.Heartbeat{Node: "h1", Incarnation: 1, Beat: 4, ConnServer: a.Server, ConnID: a.ID}, t0.Add(70*time.Millisecond))
	if tr.Disconnected("h1", a, t0.Add(110*time.Millisecond)) {
		t.Fatal("a delayed beat on the old connection made its advisory count")
	}
	// An advisory about the connection it beats on still counts.
	if !tr.Disconnected("h1", b, t0.Add(600*time.Millisecond)) {
		t.Fatal("an advisory about the current connection did not count")
	}
	f.live.Nodes["h1"] = tr.View()["h1"]
	if a := find(f.plan(t0.Add(900*time.Millisecond)), ActExpire, "h1"); a == nil || a.Reason != DetectAdvisory {
		t.Fatal("the advisory about the current connection did not expire the host after the grace")
	}
}

// TestStaleBeatAfterTheAdvisoryDoesNotHoldIt: the host is SIGKILLed; a beat
// it built before (on its beat connection, naming main connection A) is
// delivered after the advisory about A. It must not turn the advisory's
// 100 ms detection into the TTL's.
func TestStaleBeatAfterTheAdvisoryDoesNotHoldIt(t *testing.T) {
	f := newFixture(t, "h1", "h2")
	a := liveness.Conn{Server: "NSERVER1", ID: 7}
	tr := liveness.New()
	beat := func(n uint64, at time.Time) {
		tr.Heartbeat(wire.Heartbeat{Node: "h1", Incarnation: 1, Beat: n, Live: true, ConnServer: a.Server, ConnID: a.ID}, at)
	}
	beat(1, t0)
	if !tr.Disconnected("h1", a, t0.Add(100*time.Millisecond)) {
		t.Fatal("the advisory did not count")
	}
	beat(2, t0.Add(110*time.Millisecond))
	f.live.Nodes["h1"] = tr.View()["h1"]
	if a := find(f.plan(t0.Add(400*time.Millisecond)), ActExpire, "h1"); a == nil || a.Reason != DetectAdvisory {
		t.Fatal("a beat built before the close and delivered after the advisory held the expiry past the grace")
	}
}

func TestReplicatedOwnerLossRecordsRecoveryOwnerOnlyWaits(t *testing.T) {
	f := newFixture(t, "h1", "h2", "h3")
	f.create("rep", 3, "h1", "h2", "h3")
	f.create("solo", 1, "h1")
	for _, n := range []string{"h2", "h3"} {
		f.beat(n, t0.Add(2*time.Second))
	}
	acts := f.plan(t0.Add(2500 * time.Millisecond))
	if find(acts, ActExpire, "h1") == nil {
		t.Fatalf("no expiry: %s", kinds(acts))
	}
	rec := find(acts, ActRecover, "rep")
	if rec == nil || rec.Reason != "expired" || rec.Detected != DetectTTL {
		t.Fatalf("no pending recovery for the replicated stream: %s", kinds(acts))
	}
	if rec.Assignment.Owner != "h2" || rec.Assignment.Epoch != 2 || rec.Assignment.Policy != "majority_durable" || rec.Version != f.s.Streams["rep"].Version {
		t.Fatalf("proposal %+v", rec)
	}
	if find(acts, ActRecover, "solo") != nil || find(acts, ActUpdate, "solo") != nil {
		t.Fatalf("owner-only stream moved: %s", kinds(acts))
	}
	// Once recorded, the controller leaves the stream to the worker.
	f.apply(state.NodeExpire("h1", 1, DetectTTL, t0.UnixMilli()))
	f.apply(state.RecoveryBegin("rep", rec.Version, rec.Assignment, rec.Reason, "", "", t0.UnixMilli()))
	acts = f.plan(t0.Add(2600 * time.Millisecond))
	if len(acts) != 0 {
		t.Fatalf("after the recovery was recorded: %s", kinds(acts))
	}
	if got := f.s.Status(f.s.Streams["solo"]); got != wire.StatusWaiting {
		t.Fatalf("owner-only status %s", got)
	}
}

func TestEagerFailoverOnLeaveAndDrain(t *testing.T) {
	f := newFixture(t, "h1", "h2", "h3", "h4")
	f.create("a", 3, "h1", "h2", "h3")
	f.create("b", 3, "h4", "h2", "h3")
	now := t0.Add(100 * time.Millisecond)
	seen := f.live.Nodes["h1"]
	seen.Leaving = true
	f.live.Nodes["h1"] = seen
	acts := f.plan(now)
	if find(acts, ActLeave, "h1") == nil {
		t.Fatalf("leaving host not marked left: %s", kinds(acts))
	}
	if a := find(acts, ActRecover, "a"); a == nil || a.Reason != "left" || a.Detected != DetectLeave {
		t.Fatalf("no eager failover on leave: %s", kinds(acts))
	}
	f.apply(state.NodeDrain("h4", now.UnixMilli()))
	acts = f.plan(now)
	if a := find(acts, ActRecover, "b"); a == nil || a.Reason != "drain" || a.Detected != DetectDrain || a.Assignment.Owner != "h2" {
		t.Fatalf("no eager failover on drain: %s", kinds(acts))
	}
}

// recoverTo commits a recovery of stream to owner with followers, as the
// worker would.
func (f *fixture) recoverTo(stream, owner string, followers ...string) {
	st := f.s.Streams[stream]
	r := f.apply(state.RecoveryBegin(stream, st.Version, wire.Assignment{Owner: owner}, "expired", "", "", t0.UnixMilli()))
	st = f.s.Streams[stream]
	a := wire.Assignment{Stream: stream, StreamID: st.ID, Epoch: st.Assignment.Epoch + 1, Owner: owner, Followers: followers, Policy: "majority_durable"}
	f.apply(state.RecoveryCommit(stream, r.Transition, st.Version, a, wire.HistoryStart{Epoch: a.Epoch, Node: owner}, "", "", t0.UnixMilli()))
}

func TestFollowerReaddCommitsDirectlyOwnerChangeRecovers(t *testing.T) {
	f := newFixture(t, "h1", "h2", "h3")
	f.create("s", 3, "h1", "h2", "h3")
	f.apply(state.NodeExpire("h1", 1, DetectTTL, t0.UnixMilli()))
	f.recoverTo("s", "h2", "h3")
	// h1 comes back (new incarnation) still holding its copy.
	f.apply(state.NodeSeen("h1", 2, t0.Add(time.Second).UnixMilli()))
	now := t0.Add(2 * time.Second)
	for _, n := range []string{"h2", "h3"} {
		f.beat(n, now)
	}
	f.beat("h1", now, wire.CopyStatus{Stream: "s", StreamID: 1, Role: wire.RoleNone, RecordTail: 7})
	seen := f.live.Nodes["h1"]
	seen.Incarnation = 2
	f.live.Nodes["h1"] = seen
	acts := f.plan(now)
	up := find(acts, ActUpdate, "s")
	if up == nil || len(acts) != 1 {
		t.Fatalf("want one direct update, got %s", kinds(acts))
	}
	a := up.Assignment
	if a.Owner != "h2" || a.Epoch != 2 || len(a.Followers) != 2 || a.Followers[1] != "h1" || up.Reason != "readd" {
		t.Fatalf("re-add %+v", up)
	}
	// The state machine agrees it needs no recovery.
	f.apply(state.AssignUpdate("s", up.Version, a, now.UnixMilli()))
	if f.s.Streams["s"].ShortSinceMS != 0 {
		t.Fatal("a full stream is still marked short")
	}
}

func TestGrowFromOneCopyGoesThroughRecovery(t *testing.T) {
	f := newFixture(t, "h1", "h2", "h3")
	f.create("s", 3, "h1", "h2", "h3")
	f.apply(state.NodeExpire("h1", 1, DetectTTL, t0.UnixMilli()))
	f.recoverTo("s", "h2") // only h2 answered: one copy, W = 1
	now := t0.Add(time.Second)
	f.beat("h2", now)
	f.beat("h3", now, wire.CopyStatus{Stream: "s", StreamID: 1, RecordTail: 3})
	acts := f.plan(now)
	rec := find(acts, ActRecover, "s")
	if rec == nil || rec.Reason != state.ReasonGrow || len(acts) != 1 {
		t.Fatalf("want a grow recovery (W' = 2 > W = 1), got %s", kinds(acts))
	}
	if rec.Assignment.Owner != "h2" || rec.Assignment.Followers[0] != "h3" {
		t.Fatalf("grow proposal %+v", rec.Assignment)
	}
}

func TestReplacementAfterReplaceAfter(t *testing.T) {
	f := newFixture(t, "h1", "h2", "h3", "h4")
	f.create("s", 3, "h1", "h2", "h3")
	f.apply(state.NodeExpire("h1", 1, DetectTTL, t0.UnixMilli()))
	f.recoverTo("s", "h2", "h3")
	beat := func(now time.Time) {
		for _, n := range []string{"h2", "h3", "h4"} {
			f.beat(n, now)
		}
	}
	now := t0.Add(29 * time.Second)
	beat(now)
	if acts := f.plan(now); find(acts, ActUpdate, "s") != nil {
		t.Fatalf("replaced before replace-after: %s", kinds(acts))
	}
	now = t0.Add(30 * time.Second)
	beat(now)
	acts := f.plan(now)
	up := find(acts, ActUpdate, "s")
	if up == nil || up.Reason != "replace" || up.Assignment.Followers[len(up.Assignment.Followers)-1] != "h4" || up.Assignment.Epoch != 2 {
		t.Fatalf("want h4 as replacement follower: %s %+v", kinds(acts), up)
	}
}

func TestPlaceSpreadsOwnersAndCopies(t *testing.T) {
	f := newFixture(t, "h1", "h2", "h3")
	owners := map[string]int{}
	copies := map[string]int{}
	for i := range 6 {
		owner, followers, err := Place(f.s, f.live.Nodes, t0, params.TTL, fmt.Sprintf("s%d", i), 2)
		if err != nil {
			t.Fatal(err)
		}
		f.create(fmt.Sprintf("s%d", i), 2, owner, followers...)
		owners[owner]++
		copies[owner]++
		for _, fl := range followers {
			if fl == owner {
				t.Fatal("owner also a follower")
			}
			copies[fl]++
		}
	}
	for _, n := range []string{"h1", "h2", "h3"} {
		if owners[n] != 2 || copies[n] != 4 {
			t.Fatalf("uneven spread: owners %v copies %v", owners, copies)
		}
	}
	if _, _, err := Place(f.s, f.live.Nodes, t0, params.TTL, "s6", 4); wire.CodeOf(err) != wire.CodeUnavailable {
		t.Fatalf("4 copies on 3 hosts: %v", err)
	}
	// A silent, leaving or draining node takes no copies.
	f.beat("h1", t0.Add(-3*time.Second))
	f.apply(state.NodeDrain("h2", t0.UnixMilli()))
	owner, followers, err := Place(f.s, f.live.Nodes, t0, params.TTL, "s6", 1)
	if err != nil || owner != "h3" || len(followers) != 0 {
		t.Fatalf("place on the one up host: %s %v %v", owner, followers, err)
	}
}

// TestPlaceSpreadsEachOwnersFollowers: the streams one host owns have their
// followers on every pair of the other hosts, not all on the same pair.
// Ties among hosts of equal load went to the lowest id, so every stream of
// a host had the same two followers (all 2,512 of a killed host's at
// 10,000 streams on h1 and h4): its loss sealed copies on two hosts only,
// and the recovery's own tie-break promoted all on one (session 29).
func TestPlaceSpreadsEachOwnersFollowers(t *testing.T) {
	nodes := []string{"h1", "h2", "h3", "h4"}
	f := newFixture(t, nodes...)
	pairs := map[string]map[string]int{}
	const n = 240
	for i := range n {
		name := fmt.Sprintf("s%03d", i)
		owner, followers, err := Place(f.s, f.live.Nodes, t0, params.TTL, name, 3)
		if err != nil {
			t.Fatal(err)
		}
		f.create(name, 3, owner, followers...)
		if pairs[owner] == nil {
			pairs[owner] = map[string]int{}
		}
		fs := slices.Sorted(slices.Values(followers))
		pairs[owner][strings.Join(fs, ",")]++
	}
	owned, held := f.s.Load()
	for _, id := range nodes {
		if owned[id] != n/4 || held[id] != 3*n/4 {
			t.Fatalf("uneven spread: owned %v held %v", owned, held)
		}
		// Three pairs of followers for each owner, each about a third.
		if len(pairs[id]) != 3 {
			t.Fatalf("the streams %s owns have followers on %d pairs of hosts (%v), want all 3", id, len(pairs[id]), pairs[id])
		}
		for p, c := range pairs[id] {
			if c < n/4/6 {
				t.Errorf("owner %s: followers %s on %d of its %d streams, want about a third", id, p, c, n/4)
			}
		}
	}
}

func TestReturningNodeIsRegisteredOnlyAfterItsExpiry(t *testing.T) {
	f := newFixture(t, "h1")
	// Expired by an advisory 100ms after its last heartbeat: that heartbeat
	// is still within the TTL but older than the expiry, so it must not
	// bring the node straight back.
	f.apply(state.NodeExpire("h1", 1, DetectAdvisory, t0.Add(100*time.Millisecond).UnixMilli()))
	if acts := f.plan(t0.Add(200 * time.Millisecond)); len(acts) != 0 {
		t.Fatalf("stale heartbeat revived the node: %s", kinds(acts))
	}
	f.beat("h1", t0.Add(300*time.Millisecond))
	acts := f.plan(t0.Add(300 * time.Millisecond))
	if a := find(acts, ActRegister, "h1"); a == nil {
		t.Fatalf("returning node not registered: %s", kinds(acts))
	}
}

// TestWithdrawnRecoveryWithOwnerBackRecordsSealedRecovery: a recovery is
// withdrawn after its worker may have sealed copies at the fence, and the
// owner comes back before the controller records a new one. The owner is
// live, but its followers are sealed past its epoch, so it can never
// confirm: the controller records a "sealed" recovery anyway, which the
// state machine accepts with the owner live. Its commit reaches the fence
// and nothing more is planned.
func TestWithdrawnRecoveryWithOwnerBackRecordsSealedRecovery(t *testing.T) {
	f := newFixture(t, "h1", "h2", "h3")
	f.create("s", 3, "h1", "h2", "h3")
	f.apply(state.NodeExpire("h1", 1, DetectTTL, t0.UnixMilli()))
	st := f.s.Streams["s"]
	f.apply(state.RecoveryBegin("s", st.Version, wire.Assignment{Owner: "h2"}, "expired", "", "", t0.UnixMilli()))
	f.apply(state.RecoveryWithdraw("s", t0.Add(time.Second).UnixMilli()))
	// h1 is heard again (a pause, same incarnation) and registered back.
	now := t0.Add(2 * time.Second)
	for _, n := range []string{"h1", "h2", "h3"} {
		f.beat(n, now)
	}
	f.apply(state.NodeSeen("h1", 1, now.UnixMilli()))
	if got := f.s.Status(f.s.Streams["s"]); got != wire.StatusRecovering {
		t.Fatalf("status %s with the withdrawn fence pending, want recovering", got)
	}

	acts := f.plan(now)
	rec := find(acts, ActRecover, "s")
	if rec == nil || len(acts) != 1 || rec.Reason != state.ReasonSealed || rec.Detected != DetectWithdrawnFence {
		t.Fatalf("want one sealed recovery from the withdrawn fence, got %s %+v", kinds(acts), rec)
	}
	want := wire.Assignment{Stream: "s", StreamID: 1, Epoch: 2, Owner: "h1", Followers: []string{"h2", "h3"}, Policy: "majority_durable"}
	if !reflect.DeepEqual(rec.Assignment, want) || rec.Version != f.s.Streams["s"].Version {
		t.Fatalf("proposal %+v at version %d, want %+v at %d", rec.Assignment, rec.Version, want, f.s.Streams["s"].Version)
	}
	r := f.apply(state.RecoveryBegin("s", rec.Version, rec.Assignment, rec.Reason, "", "", now.UnixMilli()))
	if f.plan(now) != nil {
		t.Fatalf("planned again while the sealed recovery is pending: %s", kinds(f.plan(now)))
	}
	// The worker commits epoch 2 with h1 (furthest) as owner.
	st = f.s.Streams["s"]
	f.apply(state.RecoveryCommit("s", r.Transition, st.Version, want, wire.HistoryStart{Epoch: 2, Node: "h1"}, "", "", now.UnixMilli()))
	if st := f.s.Streams["s"]; st.FencedEpoch != 0 || f.s.Status(st) != wire.StatusServing {
		t.Fatalf("after the commit: fenced epoch %d, status %s; want cleared, serving", st.FencedEpoch, f.s.Status(st))
	}
	// The copies still publish their seal at epoch 1 until they apply
	// epoch 2: that is not a seal past the assignment.
	sealed := func(epoch uint64) wire.CopyStatus {
		return wire.CopyStatus{Stream: "s", StreamID: 1, Role: wire.RoleNone, Epoch: epoch, RecordTail: 5, Sealed: true}
	}
	f.beat("h2", now, sealed(1))
	f.beat("h3", now, sealed(1))
	if acts := f.plan(now); len(acts) != 0 {
		t.Fatalf("after the commit: %s", kinds(acts))
	}
}

// TestSealedCopyPastTheEpochRecordsSealedRecovery: without any record in
// the state (e.g. the withdrawal predates it), a copy of the assignment
// whose heartbeat says it is sealed at the assignment's epoch or later is
// the evidence. Copies sealed at an older epoch (not yet applied), copies
// outside the assignment, copies of another stream id, and copies on nodes
// that are not up are not.
func TestSealedCopyPastTheEpochRecordsSealedRecovery(t *testing.T) {
	f := newFixture(t, "h1", "h2", "h3", "h4")
	f.create("s", 3, "h1", "h2", "h3")
	f.create("solo", 1, "h4")
	now := t0.Add(time.Second)
	cs := func(stream string, id, epoch uint64, sealed bool) wire.CopyStatus {
		return wire.CopyStatus{Stream: stream, StreamID: id, Role: wire.RoleNone, Epoch: epoch, RecordTail: 3, Sealed: sealed}
	}
	for _, c := range []struct {
		name  string
		node  string
		copy  wire.CopyStatus
		stale bool // the node's last heartbeat is older than the TTL
	}{
		{"sealed at an older epoch", "h2", cs("s", 1, 0, true), false},
		{"not sealed", "h2", cs("s", 1, 1, false), false},
		{"another stream id", "h2", cs("s", 7, 1, true), false},
		{"a copy left out", "h4", cs("s", 1, 1, true), false},
		{"an owner-only stream", "h4", cs("solo", 2, 1, true), false},
		{"a node that is not up", "h3", cs("s", 1, 1, true), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, n := range []string{"h1", "h2", "h3", "h4"} {
				f.beat(n, now)
			}
			at := now
			if c.stale {
				at = now.Add(-params.TTL)
			}
			f.beat(c.node, at, c.copy)
			for _, a := range f.plan(now) {
				if a.Kind == ActRecover {
					t.Fatalf("planned %s", kinds([]Action{a}))
				}
			}
		})
	}

	for _, n := range []string{"h1", "h2", "h3", "h4"} {
		f.beat(n, now)
	}
	f.beat("h3", now, cs("s", 1, 1, true))
	acts := f.plan(now)
	rec := find(acts, ActRecover, "s")
	if rec == nil || rec.Reason != state.ReasonSealed || rec.Detected != DetectSealedCopy || rec.Assignment.Owner != "h1" || rec.Assignment.Epoch != 2 {
		t.Fatalf("want a sealed recovery for s, got %s %+v", kinds(acts), rec)
	}
	// The state machine accepts it although the owner is live, and refuses
	// other reasons as before.
	if r := f.s.Clone().Apply(state.RecoveryBegin("s", rec.Version, rec.Assignment, "expired", "", "", now.UnixMilli())); r.Code != wire.CodeConflict {
		t.Fatalf("an owner-loss recovery with the owner live: %+v, want conflict", r)
	}
	f.apply(state.RecoveryBegin("s", rec.Version, rec.Assignment, rec.Reason, "", "", now.UnixMilli()))
}

// TestCoordinatorThatCouldNotHearDoesNotJudge: the bus restarts under a
// leader whose hosts are healthy. While the leader's own connection is down
// (Deaf) it expires nobody, however long the silence; once it reconnects,
// every host gets a fresh TTL from the reconnect, and an advisory it
// received before the reconnect expires nobody. Without the rule the
// leader expired every host the moment it reconnected (their last beats
// were older than the TTL), sending every stream through recovery.
func TestCoordinatorThatCouldNotHearDoesNotJudge(t *testing.T) {
	f := newFixture(t, "h1", "h2", "h3")
	f.create("s", 3, "h1", "h2", "h3")
	seen := f.live.Nodes["h2"]
	seen.DisconnectedAt = t0.Add(500 * time.Millisecond) // the bus going down
	f.live.Nodes["h2"] = seen

	f.live.Deaf = true
	if acts := f.plan(t0.Add(5 * time.Second)); len(acts) != 0 {
		t.Fatalf("a coordinator whose connection is down judged: %s", kinds(acts))
	}

	// Back at t0+5s; h1 beats at once, h2 and h3 are a moment slower.
	f.live.Deaf = false
	f.live.HeardSince = t0.Add(5 * time.Second)
	f.beat("h1", t0.Add(5100*time.Millisecond))
	if acts := f.plan(t0.Add(6 * time.Second)); len(acts) != 0 {
		t.Fatalf("within a TTL of the coordinator's reconnect: %s", kinds(acts))
	}
	// A host still silent a TTL after the reconnect is expired (by TTL:
	// the advisory came before the reconnect).
	f.beat("h3", t0.Add(5200*time.Millisecond))
	acts := f.plan(t0.Add(7 * time.Second))
	if a := find(acts, ActExpire, "h2"); a == nil || a.Reason != DetectTTL || len(acts) != 1 {
		t.Fatalf("a TTL after the reconnect: want h2 expired by ttl only, have %s", kinds(acts))
	}
	// An advisory received after the reconnect counts as ever.
	seen = f.live.Nodes["h3"]
	seen.DisconnectedAt = t0.Add(5300 * time.Millisecond)
	f.live.Nodes["h3"] = seen
	if a := find(f.plan(t0.Add(5700*time.Millisecond)), ActExpire, "h3"); a == nil || a.Reason != DetectAdvisory {
		t.Fatal("an advisory after the coordinator's reconnect did not expire the host after the grace")
	}
}

// TestDrainingOwnerWithNoUpFollowerStays: a stream whose owner is
// draining fails over only when a follower may take ownership; with every
// follower draining (or being drained) a recovery would promote a leaving
// copy, the owner again, and loop, so the stream stays on its draining
// owner, which still serves, until a follower is up again.
func TestDrainingOwnerWithNoUpFollowerStays(t *testing.T) {
	f := newFixture(t, "h1", "h2", "h3")
	f.create("s", 2, "h1", "h2")
	now := t0.Add(100 * time.Millisecond)
	f.apply(state.NodeDrain("h2", now.UnixMilli()))
	f.apply(state.NodeDrain("h1", now.UnixMilli()))
	if a := find(f.plan(now), ActRecover, "s"); a != nil {
		t.Fatalf("a recovery of s with both copies draining: %+v", *a)
	}
	f.apply(state.NodeUndrain("h2", now.UnixMilli()))
	if a := find(f.plan(now), ActRecover, "s"); a == nil || a.Assignment.Owner != "h2" {
		t.Fatalf("no failover to h2 once undrained: %s", kinds(f.plan(now)))
	}
	f.apply(state.NodeDrainBegin("h2", now.UnixMilli()))
	if a := find(f.plan(now), ActRecover, "s"); a != nil {
		t.Fatalf("a recovery of s to a follower being drained: %+v", *a)
	}
}

// TestAdvisoryGraceStretchesWithLateness: on a loaded machine the grace
// after a disconnect advisory is the one the round was given
// (Liveness.Grace, from AdvisoryGrace) when it is longer than the
// configured one: a kicked host whose reconnect took 137 ms was expired at
// the 100 ms grace while make test loaded the machine (e2e
// TestHostConnectionKicked).
func TestAdvisoryGraceStretchesWithLateness(t *testing.T) {
	f := newFixture(t, "h1", "h2")
	seen := f.live.Nodes["h1"]
	seen.DisconnectedAt = t0.Add(100 * time.Millisecond)
	f.live.Nodes["h1"] = seen
	f.live.Grace = 600 * time.Millisecond
	if acts := f.plan(t0.Add(400 * time.Millisecond)); len(acts) != 0 {
		t.Fatalf("past the configured grace, within the stretched one: %s", kinds(acts))
	}
	if a := find(f.plan(t0.Add(700*time.Millisecond)), ActExpire, "h1"); a == nil || a.Reason != DetectAdvisory {
		t.Fatal("after the stretched grace: no advisory expiry")
	}
	f.live.Grace = 50 * time.Millisecond // shorter than the configured one: the configured one counts
	if acts := f.plan(t0.Add(300 * time.Millisecond)); len(acts) != 0 {
		t.Fatalf("within the configured grace: %s", kinds(acts))
	}
}
