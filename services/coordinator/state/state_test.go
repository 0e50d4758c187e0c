package state

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/brook-streams/brook/pkg/wire"
)

func mustApply(t *testing.T, s *State, c Command) Result {
	t.Helper()
	r := s.Apply(c)
	if r.Code != "" {
		t.Fatalf("apply %s: %s: %s", c.Op, r.Code, r.Message)
	}
	return r
}

func refused(t *testing.T, s *State, c Command, code string) {
	t.Helper()
	before := s.Clone()
	r := s.Apply(c)
	if r.Code != code {
		t.Fatalf("apply %s: code %q (%s), want %q", c.Op, r.Code, r.Message, code)
	}
	if !reflect.DeepEqual(before, s) {
		t.Fatalf("refused %s changed the state", c.Op)
	}
}

// threeNodes returns a state with live nodes h1..h3 and stream s1 on them.
func threeNodes(t *testing.T) *State {
	t.Helper()
	s := New()
	for _, n := range []string{"h1", "h2", "h3"} {
		mustApply(t, s, NodeSeen(n, 7, 1000))
	}
	mustApply(t, s, StreamCreate("s1", 3, "", wire.Retention{},
		wire.Assignment{Owner: "h1", Followers: []string{"h2", "h3"}, Policy: "majority_durable"}, 1000))
	return s
}

func TestCreateAssignsIDEpochAndVersion(t *testing.T) {
	s := threeNodes(t)
	st := s.Streams["s1"]
	if st.ID != 1 || st.Assignment.Epoch != 1 || st.Assignment.StreamID != 1 || st.Assignment.Stream != "s1" {
		t.Fatalf("assignment %+v", st.Assignment)
	}
	if st.Version != s.Version || s.AssignVersion != s.Version {
		t.Fatalf("versions: stream %d state %d assign %d", st.Version, s.Version, s.AssignVersion)
	}
	if st.Starts == nil || len(st.Starts) != 0 {
		t.Fatalf("starts %v", st.Starts)
	}
	refused(t, s, StreamCreate("s1", 1, "", wire.Retention{}, wire.Assignment{Owner: "h1"}, 0), wire.CodeExists)
	refused(t, s, StreamCreate("s2", 2, "", wire.Retention{}, wire.Assignment{Owner: "h1", Followers: []string{"h1"}}, 0), wire.CodeBadRequest)
	refused(t, s, StreamCreate("s2", 1, "", wire.Retention{}, wire.Assignment{Owner: "h9"}, 0), wire.CodeConflict)
	refused(t, s, StreamCreate("s2", 1, "bogus", wire.Retention{}, wire.Assignment{Owner: "h1"}, 0), wire.CodeBadRequest)
	refused(t, s, StreamCreate("s2", 8, "", wire.Retention{}, wire.Assignment{Owner: "h1"}, 0), wire.CodeBadRequest)
}

func TestStaleGuardedWritesAreRefused(t *testing.T) {
	s := threeNodes(t)
	v := s.Streams["s1"].Version
	mustApply(t, s, NodeExpire("h1", 7, "ttl", 2000))
	// The owner is expired; a recovery read at v is fine.
	r := mustApply(t, s, RecoveryBegin("s1", v, wire.Assignment{Owner: "h2", Followers: []string{"h3"}}, "expired", "", "", 2000))
	if r.Transition != 1 {
		t.Fatalf("transition %d", r.Transition)
	}
	// A second begin read at the same (now stale) version is refused.
	refused(t, s, RecoveryBegin("s1", v, wire.Assignment{Owner: "h3"}, "expired", "", "", 2000), wire.CodeConflict)
	pr := s.Streams["s1"].Recovery
	a := wire.Assignment{Stream: "s1", StreamID: 1, Epoch: 2, Owner: "h2", Followers: []string{"h3"}, Policy: "majority_durable"}
	start := wire.HistoryStart{Epoch: 2, RecordTail: 5, CursorTail: 1, Node: "h2"}
	// Commit at the stale version, or of another transition: refused.
	refused(t, s, RecoveryCommit("s1", pr.Transition, v, a, start, "", "", 3000), wire.CodeConflict)
	cur := s.Streams["s1"].Version
	refused(t, s, RecoveryCommit("s1", pr.Transition+1, cur, a, start, "", "", 3000), wire.CodeConflict)
	// A wait does not move the guard version.
	mustApply(t, s, RecoveryWait("s1", pr.Transition, wire.RecoveryWait{Kind: "answers", Answered: 1, Needed: 2}, 2500))
	if s.Streams["s1"].Version != cur {
		t.Fatal("recording a wait moved the stream version")
	}
	mustApply(t, s, RecoveryCommit("s1", pr.Transition, cur, a, start, "trace1", "00-x", 3000))
	st := s.Streams["s1"]
	if st.Recovery != nil || st.Assignment.Owner != "h2" || st.Assignment.Epoch != 2 || len(st.Starts) != 1 || st.LastTraceID != "trace1" {
		t.Fatalf("after commit: %+v", st)
	}
	if st.ShortSinceMS != 3000 {
		t.Fatalf("short since %d, want 3000 (2 of 3 copies)", st.ShortSinceMS)
	}
	// Replaying the same commit is refused: it is committed at most once.
	refused(t, s, RecoveryCommit("s1", pr.Transition, cur, a, start, "", "", 3000), wire.CodeConflict)
}

func TestRecoveryBeginNeedsALostOwner(t *testing.T) {
	s := threeNodes(t)
	v := s.Streams["s1"].Version
	refused(t, s, RecoveryBegin("s1", v, wire.Assignment{Owner: "h2"}, "expired", "", "", 0), wire.CodeConflict)
	// Growing may seal a live owner.
	mustApply(t, s, RecoveryBegin("s1", v, wire.Assignment{Owner: "h1"}, ReasonGrow, "", "", 0))
}

func TestAssignUpdateKeepsOwnerFollowersAndW(t *testing.T) {
	s := New()
	for _, n := range []string{"h1", "h2", "h3", "h4"} {
		mustApply(t, s, NodeSeen(n, 1, 0))
	}
	mustApply(t, s, StreamCreate("s", 2, "", wire.Retention{}, wire.Assignment{Owner: "h1", Followers: []string{"h2"}, Policy: "majority_durable"}, 0))
	st := s.Streams["s"]
	base := st.Assignment
	add := func(f ...string) wire.Assignment {
		a := CloneAssignment(base)
		a.Followers = f
		return a
	}
	refused(t, s, AssignUpdate("s", st.Version, add("h3"), 0), wire.CodeBadRequest)       // drops h2
	refused(t, s, AssignUpdate("s", st.Version-1, add("h2", "h3"), 0), wire.CodeConflict) // stale
	refused(t, s, AssignUpdate("s", st.Version, add("h2", "h9"), 0), wire.CodeConflict)   // unknown node
	mustApply(t, s, NodeExpire("h4", 1, "ttl", 0))
	refused(t, s, AssignUpdate("s", st.Version, add("h2", "h4"), 0), wire.CodeConflict) // not live
	// majority: E 2 -> 3 keeps W at 2.
	mustApply(t, s, AssignUpdate("s", st.Version, add("h2", "h3"), 0))
	if s.Streams["s"].Assignment.Epoch != 1 {
		t.Fatal("a follower addition moved the epoch")
	}
	// local_durable: E 2 -> 3 needs W 3 > 2: refused, must recover.
	mustApply(t, s, StreamCreate("l", 2, "local_durable", wire.Retention{}, wire.Assignment{Owner: "h1", Followers: []string{"h2"}, Policy: "local_durable"}, 0))
	l := s.Streams["l"]
	a := CloneAssignment(l.Assignment)
	a.Followers = append(a.Followers, "h3")
	refused(t, s, AssignUpdate("l", l.Version, a, 0), wire.CodeBadRequest)
}

func TestNodeLifecycle(t *testing.T) {
	s := New()
	mustApply(t, s, NodeSeen("h1", 1, 10))
	if r := s.Apply(NodeSeen("h1", 1, 20)); r.Changed {
		t.Fatal("seeing a live node again changed the state")
	}
	refused(t, s, NodeExpire("h1", 2, "ttl", 30), wire.CodeConflict) // another incarnation
	mustApply(t, s, NodeDrain("h1", 30))
	mustApply(t, s, NodeSeen("h1", 1, 35)) // same incarnation: stays draining
	if s.Nodes["h1"].State != wire.NodeDraining {
		t.Fatalf("state %s", s.Nodes["h1"].State)
	}
	mustApply(t, s, NodeExpire("h1", 1, "advisory", 40))
	if n := s.Nodes["h1"]; n.State != wire.NodeExpired || n.Reason != "advisory" || n.SinceMS != 40 {
		t.Fatalf("node %+v", n)
	}
	mustApply(t, s, NodeSeen("h1", 1, 50))
	if s.Nodes["h1"].State != wire.NodeLive {
		t.Fatal("an expired node that heartbeats again is not live")
	}
	mustApply(t, s, NodeLeave("h1", 0, 60))
	mustApply(t, s, NodeSeen("h1", 2, 70))
	if n := s.Nodes["h1"]; n.State != wire.NodeLive || n.Incarnation != 2 {
		t.Fatalf("node %+v", n)
	}
	refused(t, s, NodeDrain("nope", 0), wire.CodeNotFound)
}

// TestNodeDrainRequested: node.drain.begin marks a live node (every
// replica alike, so no coordinator moves anything onto it), it shows in
// Leaving; the drain's end marks it draining only while still requested
// (not after node.undrain or a restart); node.undrain and a new
// incarnation clear it.
func TestNodeDrainRequested(t *testing.T) {
	s := New()
	mustApply(t, s, NodeSeen("h1", 1, 10))
	refused(t, s, NodeDrainBegin("nope", 0), wire.CodeNotFound)
	if r := mustApply(t, s, NodeDrainBegin("h1", 20)); !r.Changed || !s.DrainRequested("h1") || !s.Leaving()["h1"] {
		t.Fatalf("drain begin: %+v, node %+v", r, s.Nodes["h1"])
	}
	if r := s.Apply(NodeDrainBegin("h1", 21)); r.Changed {
		t.Fatal("a second drain begin changed the state")
	}
	// node.undrain while the moves run: the drain's end does not apply.
	mustApply(t, s, NodeUndrain("h1", 30))
	if s.DrainRequested("h1") || s.Leaving()["h1"] || s.Nodes["h1"].State != wire.NodeLive {
		t.Fatalf("after undrain: %+v", s.Nodes["h1"])
	}
	if r := mustApply(t, s, NodeDrainRequested("h1", 40)); r.Changed || s.Nodes["h1"].State != wire.NodeLive {
		t.Fatalf("the end of an undone drain applied: %+v", s.Nodes["h1"])
	}
	// A restart (new incarnation) ends the request too.
	mustApply(t, s, NodeDrainBegin("h1", 50))
	mustApply(t, s, NodeSeen("h1", 2, 60))
	if s.DrainRequested("h1") {
		t.Fatal("a new incarnation is still drain requested")
	}
	if r := mustApply(t, s, NodeDrainRequested("h1", 70)); r.Changed {
		t.Fatal("the end of a drain of the old incarnation applied")
	}
	// The drain ends: draining, no longer requested; undrain makes it live.
	mustApply(t, s, NodeDrainBegin("h1", 80))
	if r := mustApply(t, s, NodeDrainRequested("h1", 90)); !r.Changed || s.Nodes["h1"].State != wire.NodeDraining || s.Nodes["h1"].DrainRequested {
		t.Fatalf("drain end: %+v", s.Nodes["h1"])
	}
	if r := s.Apply(NodeDrainBegin("h1", 95)); r.Changed || s.DrainRequested("h1") {
		t.Fatal("a drain begin changed a draining node")
	}
	mustApply(t, s, NodeUndrain("h1", 100))
	if n := s.Nodes["h1"]; n.State != wire.NodeLive || n.DrainRequested {
		t.Fatalf("after undrain: %+v", n)
	}
}

func TestDeleteDropsStartsAndRecreateStartsAfresh(t *testing.T) {
	s := threeNodes(t)
	mustApply(t, s, NodeExpire("h1", 7, "ttl", 0))
	st := s.Streams["s1"]
	r := mustApply(t, s, RecoveryBegin("s1", st.Version, wire.Assignment{Owner: "h2"}, "expired", "", "", 0))
	a := wire.Assignment{Stream: "s1", StreamID: 1, Epoch: 2, Owner: "h2", Followers: []string{"h3"}}
	mustApply(t, s, RecoveryCommit("s1", r.Transition, s.Streams["s1"].Version, a, wire.HistoryStart{Epoch: 2, RecordTail: 9, Node: "h2"}, "", "", 0))
	mustApply(t, s, StreamDelete("s1", 0))
	refused(t, s, StreamDelete("s1", 0), wire.CodeNotFound)
	mustApply(t, s, StreamCreate("s1", 2, "", wire.Retention{}, wire.Assignment{Owner: "h2", Followers: []string{"h3"}}, 0))
	st = s.Streams["s1"]
	if st.ID != 2 || len(st.Starts) != 0 || st.Assignment.Epoch != 1 {
		t.Fatalf("recreated stream %+v", st)
	}
	snap := s.AssignmentSnapshot("h3")
	if len(snap.Assignments) != 1 || snap.Assignments[0].Starts == nil || snap.Streams["s1"] != 2 {
		t.Fatalf("snapshot %+v", snap)
	}
	if other := s.AssignmentSnapshot("h1"); len(other.Assignments) != 0 || other.Streams["s1"] != 2 {
		t.Fatalf("snapshot of h1 %+v", other)
	}
}

func TestWithdrawAndAcceptLoss(t *testing.T) {
	s := threeNodes(t)
	mustApply(t, s, NodeExpire("h1", 7, "ttl", 0))
	st := s.Streams["s1"]
	r := mustApply(t, s, RecoveryBegin("s1", st.Version, wire.Assignment{Owner: "h2"}, "expired", "", "", 0))
	v := s.Streams["s1"].Version
	mustApply(t, s, RecoveryWithdraw("s1", 0))
	refused(t, s, RecoveryWithdraw("s1", 0), wire.CodeNotFound)
	// The withdrawn transition's commit now conflicts.
	a := wire.Assignment{Stream: "s1", StreamID: 1, Epoch: 2, Owner: "h2", Followers: []string{}}
	refused(t, s, RecoveryCommit("s1", r.Transition, v, a, wire.HistoryStart{Epoch: 2, Node: "h2"}, "", "", 0), wire.CodeConflict)
	r2 := mustApply(t, s, RecoveryBegin("s1", s.Streams["s1"].Version, wire.Assignment{Owner: "h2"}, "expired", "", "", 0))
	if r2.Transition <= r.Transition {
		t.Fatalf("new transition %d not above %d", r2.Transition, r.Transition)
	}
	loss := &wire.AcceptedLoss{Stream: "s1", Epoch: 2, Node: "h3", RecordTail: 3, StartTail: 5}
	b := wire.Assignment{Stream: "s1", StreamID: 1, Epoch: 2, Owner: "h3", Followers: []string{"h2"}}
	mustApply(t, s, RecoveryAccept("s1", s.Streams["s1"].Version, b, nil, loss, "", "", 0))
	st = s.Streams["s1"]
	if st.Recovery != nil || st.Assignment.Owner != "h3" || st.AcceptedLoss == nil || len(st.Starts) != 0 {
		t.Fatalf("after accept: %+v", st)
	}
	mustApply(t, s, AttentionClear("s1", 0))
	refused(t, s, AttentionClear("s1", 0), wire.CodeNotFound)
}

func TestSnapshotRoundTripAndDeterminism(t *testing.T) {
	s := threeNodes(t)
	mustApply(t, s, NodeExpire("h1", 7, "ttl", 0))
	mustApply(t, s, RecoveryBegin("s1", s.Streams["s1"].Version, wire.Assignment{Owner: "h2"}, "expired", "t", "tp", 5))
	var a, b bytes.Buffer
	if err := s.Save(&a); err != nil {
		t.Fatal(err)
	}
	got, err := Load(bytes.NewReader(a.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	// The change logs are not saved: the loaded state's start at its
	// version (TestAssignmentDeltaAfterLoad).
	for _, l := range []*changeLog{got.changes, got.listed} {
		if l.floor != s.Version || len(l.entries) != 0 {
			t.Fatalf("loaded change log %+v", l)
		}
	}
	got.changes, got.listed = s.changes, s.listed
	if !reflect.DeepEqual(got, s) {
		t.Fatalf("round trip differs:\n%+v\n%+v", got, s)
	}
	if err := got.Save(&b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("equal states saved different snapshots")
	}
	if _, err := Load(bytes.NewReader([]byte(`{"format":99,"state":{}}`))); err == nil {
		t.Fatal("loaded a snapshot of an unknown format")
	}
	// Replaying the same commands gives the same state.
	x, y := New(), New()
	cmds := []Command{NodeSeen("a", 1, 1), NodeSeen("b", 1, 1), StreamCreate("s", 2, "", wire.Retention{}, wire.Assignment{Owner: "a", Followers: []string{"b"}}, 2), NodeLeave("a", 1, 3)}
	for _, c := range cmds {
		enc := c.Encode()
		dc, err := DecodeCommand(enc)
		if err != nil {
			t.Fatal(err)
		}
		x.Apply(dc)
		y.Apply(dc)
	}
	if !reflect.DeepEqual(x, y) {
		t.Fatal("replays differ")
	}
}

func TestStatus(t *testing.T) {
	s := threeNodes(t)
	mustApply(t, s, NodeSeen("h4", 1, 0))
	mustApply(t, s, StreamCreate("one", 1, "", wire.Retention{}, wire.Assignment{Owner: "h4"}, 0))
	if got := s.Status(s.Streams["s1"]); got != wire.StatusServing {
		t.Fatal(got)
	}
	mustApply(t, s, NodeExpire("h4", 1, "ttl", 0))
	if got := s.Status(s.Streams["one"]); got != wire.StatusWaiting {
		t.Fatalf("owner-only stream with its owner gone: %s", got)
	}
	mustApply(t, s, NodeExpire("h1", 7, "ttl", 0))
	if got := s.Status(s.Streams["s1"]); got != wire.StatusRecovering {
		t.Fatal(got)
	}
	r := mustApply(t, s, RecoveryBegin("s1", s.Streams["s1"].Version, wire.Assignment{Owner: "h2"}, "expired", "", "", 0))
	mustApply(t, s, RecoveryWait("s1", r.Transition, wire.RecoveryWait{Kind: "answers"}, 0))
	if got := s.Status(s.Streams["s1"]); got != wire.StatusWaiting {
		t.Fatal(got)
	}

	// QueryStream reads the same status with a copy of the one stream.
	sv := QueryStream{Stream: "s1"}.Run(s).(StreamView)
	if sv.Status != wire.StatusWaiting || sv.Stream == nil || sv.Stream.Recovery == nil || sv.Stream == s.Streams["s1"] {
		t.Fatalf("stream view %+v, want a copy of s1, waiting", sv)
	}
	sv.Stream.Recovery.Wait.Kind = "changed"
	if s.Streams["s1"].Recovery.Wait.Kind != "answers" {
		t.Fatal("the stream view shares its recovery with the state")
	}
	if sv := (QueryStream{Stream: "nope"}).Run(s).(StreamView); sv.Stream != nil {
		t.Fatalf("view of a missing stream: %+v", sv)
	}
}

// TestWithdrawRemembersTheFence: a withdrawn recovery's fence stays on the
// stream (its worker may have sealed copies there) until an assignment
// reaches it, and survives a snapshot; a "sealed" recovery may begin while
// the owner is live, other owner-loss reasons may not.
func TestWithdrawRemembersTheFence(t *testing.T) {
	s := threeNodes(t)
	mustApply(t, s, NodeExpire("h1", 7, "ttl", 0))
	mustApply(t, s, RecoveryBegin("s1", s.Streams["s1"].Version, wire.Assignment{Owner: "h2"}, "expired", "", "", 0))
	mustApply(t, s, RecoveryWithdraw("s1", 0))
	st := s.Streams["s1"]
	if st.FencedEpoch != 2 || s.Status(st) != wire.StatusRecovering {
		t.Fatalf("after withdraw: fenced epoch %d status %s, want 2, recovering", st.FencedEpoch, s.Status(st))
	}
	var buf bytes.Buffer
	if err := s.Save(&buf); err != nil {
		t.Fatal(err)
	}
	if got, err := Load(&buf); err != nil || got.Streams["s1"].FencedEpoch != 2 {
		t.Fatalf("snapshot lost the fence: %v", err)
	}

	mustApply(t, s, NodeSeen("h1", 7, 10)) // the owner is back
	refused(t, s, RecoveryBegin("s1", st.Version, wire.Assignment{Owner: "h1"}, "expired", "", "", 10), wire.CodeConflict)
	r := mustApply(t, s, RecoveryBegin("s1", st.Version, wire.Assignment{Owner: "h1"}, ReasonSealed, "", "", 10))
	// Recording the new recovery keeps the fence until its commit.
	if s.Streams["s1"].FencedEpoch != 2 {
		t.Fatal("the new recovery cleared the fence before its commit")
	}
	a := wire.Assignment{Stream: "s1", StreamID: 1, Epoch: 2, Owner: "h1", Followers: []string{"h2", "h3"}, Policy: "majority_durable"}
	mustApply(t, s, RecoveryCommit("s1", r.Transition, s.Streams["s1"].Version, a, wire.HistoryStart{Epoch: 2, Node: "h1"}, "", "", 10))
	if st := s.Streams["s1"]; st.FencedEpoch != 0 || s.Status(st) != wire.StatusServing {
		t.Fatalf("after the commit at the fence: fenced epoch %d status %s", st.FencedEpoch, s.Status(st))
	}
}

// TestCreateStoresThePolicyCanonical: a create command naming a policy with
// surrounding white space stores it without; an unknown one is refused.
func TestCreateStoresThePolicyCanonical(t *testing.T) {
	s := New()
	for _, n := range []string{"h1", "h2"} {
		mustApply(t, s, NodeSeen(n, 1, 0))
	}
	a := wire.Assignment{Owner: "h1", Followers: []string{"h2"}, Policy: "replica_durable(2)"}
	mustApply(t, s, StreamCreate("p", 2, " replica_durable(2)\t", wire.Retention{}, a, 0))
	if got := s.Streams["p"].Policy; got != "replica_durable(2)" {
		t.Fatalf("stored policy %q, want replica_durable(2)", got)
	}
	refused(t, s, StreamCreate("q", 2, "replica durable(2)", wire.Retention{}, a, 0), wire.CodeBadRequest)
}

// TestDrainRequestedEndsWithLiveness: a node that expires (or leaves)
// while its drain is requested loses the request: the drain's end finds
// it not live and changes nothing, and once heard again with the same
// incarnation (a partition healed) it is live and undrained, not live
// with a drain requested that no drain will finish (it would take no copy
// and no ownership until an operator noticed).
func TestDrainRequestedEndsWithLiveness(t *testing.T) {
	for _, gone := range []Command{NodeExpire("h1", 1, "ttl", 30), NodeLeave("h1", 1, 30)} {
		s := New()
		mustApply(t, s, NodeSeen("h1", 1, 10))
		mustApply(t, s, NodeDrainBegin("h1", 20))
		mustApply(t, s, gone)
		if r := s.Apply(NodeDrainRequested("h1", 40)); r.Changed {
			t.Fatalf("%s: the drain's end applied to a node not live: %+v", gone.Op, s.Nodes["h1"])
		}
		mustApply(t, s, NodeSeen("h1", 1, 50)) // back, same incarnation
		if n := s.Nodes["h1"]; s.DrainRequested("h1") || n.State != wire.NodeLive {
			t.Fatalf("%s: h1 back with its drain requested and no drain running: %+v", gone.Op, n)
		}
	}
}

// TestNoNewCopyOrOwnershipOnADrainRequestedNode: the state machine itself
// refuses a planned move to a follower whose drain is requested and a new
// copy on such a node, whatever state the proposing coordinator read.
func TestNoNewCopyOrOwnershipOnADrainRequestedNode(t *testing.T) {
	s := New()
	for _, n := range []string{"h1", "h2", "h3"} {
		mustApply(t, s, NodeSeen(n, 1, 10))
	}
	mustApply(t, s, StreamCreate("s", 2, "", wire.Retention{}, wire.Assignment{Stream: "s", Owner: "h1", Followers: []string{"h2"}}, 11))
	mustApply(t, s, NodeDrainBegin("h2", 20))
	st := s.Streams["s"]
	p := wire.Assignment{Stream: "s", StreamID: st.ID, Epoch: st.Assignment.Epoch + 1, Owner: "h2", Followers: []string{"h1"}, Policy: st.Assignment.Policy}
	refused(t, s, RecoveryBegin("s", st.Version, p, ReasonMove, "", "", 30), wire.CodeConflict)
	refused(t, s, StreamCreate("q", 2, "", wire.Retention{}, wire.Assignment{Stream: "q", Owner: "h1", Followers: []string{"h2"}}, 31), wire.CodeConflict)
}

// TestDrainAgainOnADrainingNode pins what the not_moved advice
// (wire.DrainStayNotMoved) says: node.drain on a node already draining
// requests nothing (so no drain runs and nothing moves), and node.undrain
// then node.drain requests a drain again.
func TestDrainAgainOnADrainingNode(t *testing.T) {
	s := New()
	mustApply(t, s, NodeSeen("h1", 1, 10))
	mustApply(t, s, NodeDrainBegin("h1", 20))
	mustApply(t, s, NodeDrainRequested("h1", 30))
	if n := s.Nodes["h1"]; n.State != wire.NodeDraining {
		t.Fatalf("h1 after its drain: %+v", n)
	}
	if r := s.Apply(NodeDrainBegin("h1", 40)); r.Changed || s.DrainRequested("h1") {
		t.Fatalf("node.drain again on a draining node requested a drain: %+v, node %+v", r, s.Nodes["h1"])
	}
	mustApply(t, s, NodeUndrain("h1", 50))
	if r := s.Apply(NodeDrainBegin("h1", 60)); !r.Changed || !s.DrainRequested("h1") {
		t.Fatalf("node.drain after node.undrain requested no drain: %+v, node %+v", r, s.Nodes["h1"])
	}
}
