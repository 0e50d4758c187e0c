package state

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/brook-streams/brook/pkg/wire"
)

// listView is what a reader of stream.list holds: each stream as listed.
type listView map[string]StreamView

// fullList is the view a full listing gives, in pages of limit.
func fullList(s *State, limit int) (listView, uint64) {
	v := listView{}
	var version uint64
	for after := ""; ; {
		p := QueryStreamPage{After: after, Limit: limit}.Run(s).(StreamPage)
		if after == "" || p.Version < version {
			version = p.Version
		}
		for _, sv := range p.Streams {
			v[sv.Stream.Name] = sv
		}
		if p.Next == "" {
			return v, version
		}
		after = p.Next
	}
}

// listDelta applies the changes after since to view, page by page, each
// page answered by one of replicas at random, with between(page) run
// before each page after the first (the state moving on between a pull's
// pages), and returns the version reached, or full when a replica
// answered with a full listing instead.
func listDelta(t *testing.T, rng *rand.Rand, replicas []*State, view listView, since uint64, limit int, between func()) (version uint64, full bool) {
	t.Helper()
	for page := 0; ; page++ {
		if page > 0 {
			between()
		}
		p := QueryStreamChanges{Since: since, Limit: limit}.Run(replicas[rng.IntN(len(replicas))]).(StreamChangePage)
		if p.Since == 0 {
			if p.NextSince != 0 || len(p.Deleted) != 0 {
				t.Fatalf("a full listing's page with changes' fields: %+v", p)
			}
			return 0, true
		}
		if p.Since != since {
			t.Fatalf("page since %d, asked %d", p.Since, since)
		}
		if len(p.Streams)+len(p.Deleted) > limit {
			t.Fatalf("page of %d streams and %d deleted, limit %d", len(p.Streams), len(p.Deleted), limit)
		}
		for _, sv := range p.Streams {
			view[sv.Stream.Name] = sv
		}
		for _, name := range p.Deleted {
			delete(view, name)
		}
		if p.NextSince == 0 {
			return p.Version, false
		}
		if p.NextSince <= since {
			t.Fatalf("next since %d after since %d", p.NextSince, since)
		}
		since = p.NextSince
	}
}

// randomChange applies one random command of the kinds that change what
// stream.list shows to every replica alike (as Raft does): creates,
// deletes, updates, added followers, recoveries with their waits, commits,
// withdrawals and accepted losses, cleared warnings, and node changes.
// changed counts the commands applied by op.
func randomChange(t *testing.T, rng *rand.Rand, replicas []*State, step int, incarnation map[string]uint64, changed map[string]int) {
	t.Helper()
	nodes := []string{"h1", "h2", "h3", "h4"}
	s := replicas[0]
	apply := func(c Command) {
		t.Helper()
		want := s.Apply(c)
		if want.Changed {
			changed[c.Op]++
		}
		for _, r := range replicas[1:] {
			if got := r.Apply(c); !reflect.DeepEqual(got, want) {
				t.Fatalf("replicas differ on %+v: %+v and %+v", c, want, got)
			}
		}
	}
	name := fmt.Sprintf("s%d", rng.IntN(12))
	if rng.IntN(4) == 0 {
		name = fmt.Sprintf("n%d", step)
	}
	st := s.Streams[name]
	live := func(n string) bool { return s.NodeState(n) == wire.NodeLive }
	switch op := rng.IntN(12); {
	case st == nil:
		p := rng.Perm(4)
		a := wire.Assignment{Owner: nodes[p[0]], Followers: []string{nodes[p[1]]}, Policy: "majority_durable"}
		apply(StreamCreate(name, 2, "", wire.Retention{}, a, 0)) // refused while a member is not live
	case op == 0:
		apply(StreamDelete(name, 0))
	case op == 1:
		apply(StreamUpdate(name, wire.StreamUpdate{Retention: &wire.Retention{MaxRecords: uint64(step + 1)}}, "", "", 0))
	case op == 2 && st.Recovery == nil && len(st.Assignment.Followers) > 0 && live(st.Assignment.Owner) && live(st.Assignment.Followers[0]):
		p := CloneAssignment(st.Assignment)
		p.Owner, p.Followers = p.Followers[0], append([]string{p.Owner}, p.Followers[1:]...)
		apply(RecoveryBegin(name, st.Version, p, ReasonMove, "", "", 0))
	case op == 3 && st.Recovery != nil:
		// Display only: the state's version moves, not the stream's.
		apply(RecoveryWait(name, st.Recovery.Transition, wire.RecoveryWait{Kind: "answers", Answered: step}, 0))
	case op == 4 && st.Recovery != nil:
		c := CloneAssignment(st.Recovery.Proposal)
		apply(RecoveryCommit(name, st.Recovery.Transition, st.Version, c,
			wire.HistoryStart{Epoch: c.Epoch, Node: c.Owner, RecordTail: uint64(step)}, "", "", 0))
	case op == 5 && st.Recovery != nil:
		apply(RecoveryWithdraw(name, 0)) // fenced past the assignment: the status says recovering
	case op == 6 && st.Recovery == nil && len(st.Assignment.Followers) > 0 && !live(st.Assignment.Owner):
		a := CloneAssignment(st.Assignment)
		a.Owner, a.Followers, a.Epoch = a.Followers[0], []string{}, a.Epoch+1
		apply(RecoveryAccept(name, st.Version, a, &wire.HistoryStart{Epoch: a.Epoch, Node: a.Owner, RecordTail: uint64(step)},
			&wire.AcceptedLoss{Stream: name, Epoch: a.Epoch, Node: a.Owner}, "", "", 0))
	case op == 7 && st.AcceptedLoss != nil:
		apply(AttentionClear(name, 0))
	case op == 8 && len(st.Assignment.Followers) == 1 && st.Recovery == nil:
		a := CloneAssignment(st.Assignment)
		for _, n := range nodes {
			if !a.Includes(n) {
				a.Followers = append(a.Followers, n)
				break
			}
		}
		apply(AssignUpdate(name, st.Version, a, 0))
	case op == 9 && rng.IntN(3) == 0:
		// A node goes down, comes back or is drained: the status of
		// every stream it owns moves with no change of theirs.
		n := nodes[rng.IntN(len(nodes))]
		switch {
		case s.NodeState(n) == wire.NodeDraining:
			apply(NodeUndrain(n, 0))
		case live(n) && rng.IntN(2) == 0:
			apply(NodeDrain(n, 0))
		case live(n):
			apply(NodeExpire(n, incarnation[n], "ttl", 0))
		default:
			incarnation[n]++
			apply(NodeSeen(n, incarnation[n], 0))
		}
	default:
		apply(NodeSeen("h1", incarnation["h1"], 0)) // no change
	}
	if rng.IntN(4) == 0 {
		for _, other := range s.SortedStreams() {
			if other[0] == 'n' && other != name {
				apply(StreamDelete(other, 0))
				break
			}
		}
	}
}

// TestStreamChangesRandom: a reader that lists only the streams changed
// since the version it holds, at random points of a random sequence of
// changes, always holds what a full listing gives at the version reached
// (every stream as the state has it, with its status), though the state
// moves on between the pages of a pull and each page is answered by one of
// two replicas, the second loaded from a snapshot partway (its change log
// starts there). A node's change, which moves the status of the streams
// it owns, and a reader behind a log's floor are answered with a full
// listing.
func TestStreamChangesRandom(t *testing.T) {
	defer func(n int) { minChangeLog = n }(minChangeLog)
	minChangeLog = 8
	fulls, deltas := 0, 0
	changed := map[string]int{}
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 29))
		s := New()
		incarnation := map[string]uint64{}
		for _, n := range []string{"h1", "h2", "h3", "h4"} {
			incarnation[n] = 1
			mustApply(t, s, NodeSeen(n, 1, 0))
		}
		replicas := []*State{s}
		view, have := fullList(s, 3)
		step := 0
		change := func() {
			step++
			randomChange(t, rng, replicas, step, incarnation, changed)
			if step == 150 {
				var b bytes.Buffer
				if err := s.Save(&b); err != nil {
					t.Fatal(err)
				}
				r, err := Load(&b)
				if err != nil {
					t.Fatal(err)
				}
				replicas = append(replicas, r)
			}
		}
		for step < 400 {
			change()
			if rng.IntN(3) != 0 {
				continue
			}
			between := func() {
				if rng.IntN(2) == 0 {
					change()
				}
			}
			v, full := listDelta(t, rng, replicas, view, have, 1+rng.IntN(4), between)
			if full {
				fulls++
				view, v = fullList(s, 1+rng.IntN(4))
			} else {
				deltas++
				if want := fullAt(t, s, v); !reflect.DeepEqual(view, want) {
					t.Fatalf("seed %d step %d: the view after the changes' listing, at version %d\n%v\nwant\n%v", seed, step, v, view, want)
				}
			}
			have = v
		}
		for _, r := range replicas {
			if l := len(r.listed.entries); l > len(r.Streams)+2*max(len(r.Streams), minChangeLog) {
				t.Fatalf("seed %d: list change log of %d entries for %d streams", seed, l, len(r.Streams))
			}
		}
	}
	if fulls == 0 || deltas < 3*fulls {
		t.Fatalf("%d listings of changes, %d full: want mostly changes, and some full", deltas, fulls)
	}
	for _, op := range []string{OpStreamCreate, OpStreamDelete, OpStreamUpdate, OpAssignUpdate, OpRecoveryBegin, OpRecoveryWait,
		OpRecoveryCommit, OpRecoveryWithdraw, OpRecoveryAccept, OpAttentionClear, OpNodeExpire, OpNodeSeen, OpNodeDrain, OpNodeUndrain} {
		if changed[op] == 0 {
			t.Errorf("no %s applied: the sequence does not exercise it (%v)", op, changed)
		}
	}
}

// fullAt is the full listing of s, which must be at version v: a pull's
// last page is answered at the state's latest version, which the test's
// state has not moved past.
func fullAt(t *testing.T, s *State, v uint64) listView {
	t.Helper()
	if s.Version != v {
		t.Fatalf("the last page was answered at version %d, the state is at %d", v, s.Version)
	}
	want, _ := fullList(s, 5)
	return want
}

// TestStreamChangesCost: the changes after a version are read from the
// log alone: after a thousand streams, a recovery's wait lists one stream
// and a reader with nothing new gets an empty page; a node's change and a
// version ahead of the state get the first page of a full listing.
func TestStreamChangesCost(t *testing.T) {
	s := thousandStreams(t)
	a := s.Streams["s0007"].Assignment
	v := s.Version
	if p := (QueryStreamChanges{Since: v, Limit: 500}).Run(s).(StreamChangePage); p.Since != v || len(p.Streams) != 0 || p.NextSince != 0 || p.Version != v {
		t.Fatalf("nothing changed: %+v", p)
	}
	p := CloneAssignment(a)
	p.Owner, p.Followers = "h2", []string{"h1"}
	r := mustApply(t, s, RecoveryBegin("s0007", s.Streams["s0007"].Version, p, ReasonMove, "", "", 0))
	mustApply(t, s, RecoveryWait("s0007", r.Transition, wire.RecoveryWait{Kind: "answers"}, 0))
	got := QueryStreamChanges{Since: v + 1, Limit: 500}.Run(s).(StreamChangePage)
	if len(got.Streams) != 1 || got.Streams[0].Stream.Name != "s0007" || got.Streams[0].Status != wire.StatusWaiting || got.Version != v+2 {
		t.Fatalf("a wait: %+v", got)
	}
	mustApply(t, s, NodeExpire("h3", 1, "ttl", 0))
	for _, since := range []uint64{v + 2, s.Version + 1, 0} {
		if p := (QueryStreamChanges{Since: since, Limit: 10}).Run(s).(StreamChangePage); p.Since != 0 || p.Next != "s0009" || len(p.Streams) != 10 {
			t.Fatalf("since %d: %+v", since, p)
		}
	}
	if p := (QueryStreamChanges{Since: s.Version, Limit: 10}).Run(s).(StreamChangePage); p.Since != s.Version || len(p.Streams) != 0 {
		t.Fatalf("since the node's change: %+v", p)
	}
}
