package state

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/brook-streams/brook/pkg/wire"
)

func intp(n int) *int { return &n }

// TestCreateMinCopies: a create stores its floor (1..copies, 0 for none),
// refuses one outside that range, hands it to the hosts with the
// assignment and keeps it through a snapshot; a snapshot written before
// the field existed reads as no floor.
func TestCreateMinCopies(t *testing.T) {
	s := New()
	for _, n := range []string{"h1", "h2", "h3"} {
		mustApply(t, s, NodeSeen(n, 1, 0))
	}
	a := wire.Assignment{Owner: "h1", Followers: []string{"h2", "h3"}, Policy: "majority_durable"}
	refused(t, s, StreamCreate("s", 3, "", wire.Retention{}, a, 0).WithMinCopies(4), wire.CodeBadRequest)
	refused(t, s, StreamCreate("s", 3, "", wire.Retention{}, a, 0).WithMinCopies(-1), wire.CodeBadRequest)
	mustApply(t, s, StreamCreate("s", 3, "", wire.Retention{}, a, 0).WithMinCopies(2))
	if got := s.Streams["s"].MinCopies; got != 2 {
		t.Fatalf("min copies %d, want 2", got)
	}
	if snap := s.AssignmentSnapshot("h2"); len(snap.Assignments) != 1 || snap.Assignments[0].MinCopies != 2 {
		t.Fatalf("snapshot for h2 %+v, want min copies 2", snap)
	}
	var buf bytes.Buffer
	if err := s.Save(&buf); err != nil {
		t.Fatal(err)
	}
	if got, err := Load(&buf); err != nil || got.Streams["s"].MinCopies != 2 {
		t.Fatalf("snapshot round trip: %v", err)
	}
	old := `{"format":1,"state":{"version":3,"assign_version":3,"next_stream_id":1,"next_transition":0,"nodes":{},` +
		`"streams":{"o":{"name":"o","id":1,"copies":3,"retention":{},"assignment":{"stream":"o","stream_id":1,"epoch":1,` +
		`"owner":"h1","followers":["h2","h3"],"policy":"majority_durable"},"starts":[],"version":3,"created_ms":0}}}}`
	got, err := Load(strings.NewReader(old))
	if err != nil {
		t.Fatal(err)
	}
	if st := got.Streams["o"]; st.MinCopies != 0 || st.UnderReplicated() != nil {
		t.Fatalf("a snapshot without min_copies: %+v", st)
	}
}

// TestUpdateRetentionAndFloor: retention and the floor change in place:
// the assignment version moves (hosts pull them), the stream's guard
// version does not (an in-flight recovery commit is not refused for it);
// an update that changes nothing changes nothing, and a floor above the
// stream's copies is refused.
func TestUpdateRetentionAndFloor(t *testing.T) {
	s := threeNodes(t)
	st := s.Streams["s1"]
	v, av := st.Version, s.AssignVersion
	ret := wire.Retention{MaxRecords: 100}
	r := mustApply(t, s, StreamUpdate("s1", wire.StreamUpdate{Retention: &ret, MinCopies: intp(2)}, "", "", 5))
	if !r.Changed || st.Retention != ret || st.MinCopies != 2 {
		t.Fatalf("after update: %+v", st)
	}
	if st.Version != v || s.AssignVersion == av || s.AssignVersion != s.Version {
		t.Fatalf("versions: stream %d (was %d), assign %d (was %d), state %d", st.Version, v, s.AssignVersion, av, s.Version)
	}
	if snap := s.AssignmentSnapshot("h3"); snap.Assignments[0].Retention != ret || snap.Assignments[0].MinCopies != 2 {
		t.Fatalf("snapshot %+v", snap.Assignments[0])
	}
	before := s.Version
	if r := mustApply(t, s, StreamUpdate("s1", wire.StreamUpdate{Retention: &ret, MinCopies: intp(2)}, "", "", 6)); r.Changed || s.Version != before {
		t.Fatalf("a no-op update changed the state: %+v", r)
	}
	refused(t, s, StreamUpdate("s1", wire.StreamUpdate{MinCopies: intp(4)}, "", "", 7), wire.CodeBadRequest)
	refused(t, s, StreamUpdate("s1", wire.StreamUpdate{Policy: "most"}, "", "", 7), wire.CodeBadRequest)
	refused(t, s, StreamUpdate("s1", wire.StreamUpdate{Retention: &wire.Retention{MaxAgeMS: -1}}, "", "", 7), wire.CodeBadRequest)
	refused(t, s, StreamUpdate("nope", wire.StreamUpdate{MinCopies: intp(1)}, "", "", 7), wire.CodeNotFound)
	mustApply(t, s, StreamUpdate("s1", wire.StreamUpdate{MinCopies: intp(0)}, "", "", 8))
	if st.MinCopies != 0 {
		t.Fatalf("min copies %d after removing the floor", st.MinCopies)
	}

	// With a recovery pending, retention and the floor still change, and
	// the recovery's commit is not refused for it; a policy is refused.
	mustApply(t, s, NodeExpire("h1", 7, "ttl", 10))
	rb := mustApply(t, s, RecoveryBegin("s1", st.Version, wire.Assignment{Owner: "h2", Followers: []string{"h3"}}, "expired", "", "", 10))
	v = st.Version
	mustApply(t, s, StreamUpdate("s1", wire.StreamUpdate{MinCopies: intp(3)}, "", "", 11))
	refused(t, s, StreamUpdate("s1", wire.StreamUpdate{Policy: "local_durable"}, "", "", 11), wire.CodeConflict)
	a := wire.Assignment{Stream: "s1", StreamID: 1, Epoch: 2, Owner: "h2", Followers: []string{"h3"}, Policy: "majority_durable"}
	mustApply(t, s, RecoveryCommit("s1", rb.Transition, v, a, wire.HistoryStart{Epoch: 2, RecordTail: 4, Node: "h2"}, "", "", 12))
}

// TestUpdatePolicyThatNeedsNoMoreCopiesCommitsDirectly: every copy (W=3)
// to a majority (W=2) of the same assignment is stamped on it at once, at
// the same epoch, with no recovery; the stream remembers the policy, so
// later placement stamps it too.
func TestUpdatePolicyThatNeedsNoMoreCopiesCommitsDirectly(t *testing.T) {
	s := New()
	for _, n := range []string{"h1", "h2", "h3"} {
		mustApply(t, s, NodeSeen(n, 1, 0))
	}
	mustApply(t, s, StreamCreate("s", 3, "local_durable", wire.Retention{},
		wire.Assignment{Owner: "h1", Followers: []string{"h2", "h3"}, Policy: "local_durable"}, 0))
	st := s.Streams["s"]
	v := st.Version
	r := mustApply(t, s, StreamUpdate("s", wire.StreamUpdate{Policy: " majority_durable"}, "", "", 5))
	if r.Transition != 0 || st.Recovery != nil {
		t.Fatalf("a policy needing fewer copies recorded a recovery: %+v", st.Recovery)
	}
	if st.Policy != "majority_durable" || st.Assignment.Policy != "majority_durable" || st.Assignment.Epoch != 1 {
		t.Fatalf("after update: policy %q, assignment %+v", st.Policy, st.Assignment)
	}
	if st.Version == v || s.AssignVersion != st.Version {
		t.Fatalf("versions: stream %d (was %d) assign %d", st.Version, v, s.AssignVersion)
	}
	// replica_durable(2) is W=2 as well: no recovery either.
	mustApply(t, s, StreamUpdate("s", wire.StreamUpdate{Policy: "replica_durable(2)"}, "", "", 6))
	if st.Recovery != nil || st.Assignment.Policy != "replica_durable(2)" {
		t.Fatalf("after replica_durable(2): %+v", st)
	}
}

// TestUpdatePolicyThatNeedsMoreCopiesGoesThroughRecovery: a majority (W=2)
// to every copy (W=3) must not be stamped on the live assignment, whose
// confirmed records may be on 2 copies while R would become 1: it records
// a pending recovery (reason policy, the owner live) whose proposal is the
// assignment at the next epoch under the new stamp; the assignment keeps
// its stamp until the recovery commits.
func TestUpdatePolicyThatNeedsMoreCopiesGoesThroughRecovery(t *testing.T) {
	s := threeNodes(t)
	st := s.Streams["s1"]
	v := st.Version
	r := mustApply(t, s, StreamUpdate("s1", wire.StreamUpdate{Policy: "local_durable", MinCopies: intp(3)}, "trace", "00-tp", 5))
	pr := st.Recovery
	if r.Transition == 0 || pr == nil || pr.Transition != r.Transition || pr.Reason != ReasonPolicy {
		t.Fatalf("result %+v, recovery %+v", r, pr)
	}
	if st.Assignment.Policy != "majority_durable" || st.Policy != "local_durable" || st.MinCopies != 3 {
		t.Fatalf("stream after update: %+v", st)
	}
	want := wire.Assignment{Stream: "s1", StreamID: 1, Epoch: 2, Owner: "h1", Followers: []string{"h2", "h3"}, Policy: "local_durable"}
	if !reflect.DeepEqual(pr.Proposal, want) || pr.Old.Epoch != 1 || pr.Old.Policy != "majority_durable" {
		t.Fatalf("proposal %+v old %+v", pr.Proposal, pr.Old)
	}
	if pr.TraceID != "trace" || pr.TraceParent != "00-tp" || st.LastTraceID != "trace" {
		t.Fatalf("trace %q %q", pr.TraceID, pr.TraceParent)
	}
	if st.Version == v || s.Status(st) != wire.StatusRecovering {
		t.Fatalf("stream version %d (was %d), status %s", st.Version, v, s.Status(st))
	}
	// A plan read before the update is refused.
	refused(t, s, AssignUpdate("s1", v, st.Assignment, 6), wire.CodeConflict)
	// The worker commits the proposal's stamp at the next epoch.
	mustApply(t, s, RecoveryCommit("s1", pr.Transition, st.Version, want, wire.HistoryStart{Epoch: 2, RecordTail: 7, Node: "h1"}, "", "", 7))
	if st.Assignment.Policy != "local_durable" || st.Assignment.Epoch != 2 || st.Recovery != nil {
		t.Fatalf("after the commit: %+v", st)
	}
}

// TestUnderReplicated: one rule, Stream.UnderReplicated, for stream.info,
// attention and the metrics. A 3-copy majority stream down to 2 copies has
// W=2 (no confirmed record on one copy only); down to 1, W=1 and one more
// loss loses confirmed records; with a floor of 2 its publishes are
// refused. Since is when it first fell short, kept while it stays short.
func TestUnderReplicated(t *testing.T) {
	s := threeNodes(t)
	st := s.Streams["s1"]
	mustApply(t, s, StreamUpdate("s1", wire.StreamUpdate{MinCopies: intp(2)}, "", "", 1))
	if st.UnderReplicated() != nil {
		t.Fatal("a stream with all its copies is under-replicated")
	}
	move := func(epoch uint64, owner string, followers []string, at int64) {
		t.Helper()
		old := st.Assignment.Owner
		mustApply(t, s, NodeExpire(old, 7, "ttl", at))
		r := mustApply(t, s, RecoveryBegin("s1", st.Version, wire.Assignment{Owner: owner, Followers: followers}, "expired", "", "", at))
		a := wire.Assignment{Stream: "s1", StreamID: 1, Epoch: epoch, Owner: owner, Followers: followers, Policy: "majority_durable"}
		mustApply(t, s, RecoveryCommit("s1", r.Transition, st.Version, a, wire.HistoryStart{Epoch: epoch, Node: owner}, "", "", at))
	}
	move(2, "h2", []string{"h3"}, 2000)
	want := &wire.UnderReplication{Copies: 2, W: 2, SinceMS: 2000}
	if got := st.UnderReplicated(); !reflect.DeepEqual(got, want) {
		t.Fatalf("2 of 3 copies: %+v, want %+v", got, want)
	}
	move(3, "h3", []string{}, 3000)
	want = &wire.UnderReplication{Copies: 1, W: 1, SinceMS: 2000, LossLosesConfirmed: true, PublishesRefused: true}
	if got := st.UnderReplicated(); !reflect.DeepEqual(got, want) {
		t.Fatalf("1 of 3 copies: %+v, want %+v", got, want)
	}
	if c := s.Counts(); c.UnderReplicated != 1 || c.UnderReplicatedAtRisk != 1 {
		t.Fatalf("counts %+v", c)
	}
	// Back to all copies: cleared, since forgotten.
	mustApply(t, s, NodeSeen("h1", 8, 4000))
	mustApply(t, s, NodeSeen("h2", 8, 4000))
	a := CloneAssignment(st.Assignment)
	a.Followers = []string{"h1", "h2"}
	a.Epoch = 4
	r := mustApply(t, s, RecoveryBegin("s1", st.Version, a, ReasonGrow, "", "", 4000))
	mustApply(t, s, RecoveryCommit("s1", r.Transition, st.Version, a, wire.HistoryStart{Epoch: 4, Node: "h3"}, "", "", 4000))
	if u := st.UnderReplicated(); u != nil || st.ShortSinceMS != 0 {
		t.Fatalf("all copies back: %+v, short since %d", u, st.ShortSinceMS)
	}
	if c := s.Counts(); c.UnderReplicated != 0 || c.UnderReplicatedAtRisk != 0 {
		t.Fatalf("counts %+v", c)
	}
}

// TestUpdatePolicyRefusedWhileItsRecoveryIsPending: a policy change
// pending as a recovery (majority to every copy) is not undone by a
// second update naming the old policy: the recovery would commit the new
// one while the stream record named the old.
func TestUpdatePolicyRefusedWhileItsRecoveryIsPending(t *testing.T) {
	s := threeNodes(t)
	mustApply(t, s, StreamUpdate("s1", wire.StreamUpdate{Policy: "local_durable"}, "", "", 5))
	if s.Streams["s1"].Recovery == nil {
		t.Fatal("no recovery pending after a change to every copy")
	}
	refused(t, s, StreamUpdate("s1", wire.StreamUpdate{Policy: "majority_durable"}, "", "", 6), wire.CodeConflict)
	if st := s.Streams["s1"]; st.Policy != "local_durable" {
		t.Fatalf("the stream names policy %q while its recovery commits local_durable", st.Policy)
	}
}

// TestUpdatePolicyNeedsTheCopiesItsRecoverySeals: a change that goes
// through a recovery needs R copies of the old assignment live to seal;
// with fewer it is refused rather than left waiting for an operator.
func TestUpdatePolicyNeedsTheCopiesItsRecoverySeals(t *testing.T) {
	s := threeNodes(t)
	mustApply(t, s, NodeExpire("h2", 7, "ttl", 2000))
	mustApply(t, s, NodeExpire("h3", 7, "ttl", 2000))
	refused(t, s, StreamUpdate("s1", wire.StreamUpdate{Policy: "local_durable"}, "", "", 2100), wire.CodeConflict)
	if st := s.Streams["s1"]; st.Recovery != nil || st.Policy == "local_durable" || st.Assignment.Policy != "majority_durable" {
		t.Fatalf("after a refused update: policy %q, assignment %+v, recovery %+v", st.Policy, st.Assignment, st.Recovery)
	}
	mustApply(t, s, NodeSeen("h2", 7, 3000))
	mustApply(t, s, StreamUpdate("s1", wire.StreamUpdate{Policy: "local_durable"}, "", "", 3100))
	if s.Streams["s1"].Recovery == nil {
		t.Fatal("with two of three copies live the change should record its recovery")
	}
}
