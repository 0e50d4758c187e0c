package controller

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/liveness"
	"github.com/brook-streams/brook/services/coordinator/state"
)

// incremental is a control round as the control loop runs it: the
// state.QueryControl read, then Plan over that view.
func (f *fixture) incremental(now time.Time) ([]Action, *state.State) {
	view := controlRead(f.s, f.live, now)
	return Plan(view, f.live, now, params), view
}

// sameAsFull fails unless the incremental round plans exactly what a plan
// over the whole state does, and returns the view's streams.
func (f *fixture) sameAsFull(now time.Time) []string {
	f.t.Helper()
	full := f.plan(now)
	inc, view := f.incremental(now)
	if !reflect.DeepEqual(inc, full) {
		f.t.Fatalf("incremental round %s\nfull round %s", kinds(inc), kinds(full))
	}
	return view.SortedStreams()
}

func TestIncrementalRoundPlansOnlyTheStreamsConcerned(t *testing.T) {
	f := newFixture(t, "h1", "h2", "h3", "h4")
	f.create("calm", 3, "h1", "h2", "h3")
	f.create("lost", 3, "h4", "h1", "h2")
	f.create("sealed", 3, "h2", "h3", "h1")
	now := t0.Add(time.Second)
	// Nothing changed: no stream is read or planned.
	if got := f.sameAsFull(now); len(got) != 0 {
		t.Fatalf("a healthy cluster's round read %v", got)
	}
	// h4 goes silent: the round that expires it plans its stream too (from
	// Losing), and only that stream.
	for _, n := range []string{"h1", "h2", "h3"} {
		f.beat(n, t0.Add(2*time.Second))
	}
	now = t0.Add(2 * time.Second)
	if got := f.sameAsFull(now); !slices.Equal(got, []string{"lost"}) {
		t.Fatalf("the round expiring h4 read %v, want [lost]", got)
	}
	if acts, _ := f.incremental(now); find(acts, ActExpire, "h4") == nil || find(acts, ActRecover, "lost") == nil {
		t.Fatalf("expiry round: %s", kinds(acts))
	}
	// A copy reported sealed past the epoch: an input from outside the
	// state, read through SealedReports.
	f.beat("h3", now, wire.CopyStatus{Stream: "sealed", StreamID: 3, Epoch: 1, Sealed: true})
	if got := f.sameAsFull(now); !slices.Equal(got, []string{"lost", "sealed"}) {
		t.Fatalf("read %v, want lost and sealed", got)
	}
}

// TestIncrementalRoundEqualsFullRound compares the two on many random
// states: nodes live, expired, draining or left, heard or silent, leaving
// or disconnected; streams short, fenced, pending, with sealed copies.
func TestIncrementalRoundEqualsFullRound(t *testing.T) {
	nodes := []string{"h1", "h2", "h3", "h4", "h5"}
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 17))
		f := newFixture(t, nodes...)
		for i := range 30 {
			e := 1 + rng.IntN(3)
			perm := rng.Perm(len(nodes))
			var copies []string
			for _, k := range perm[:e] {
				copies = append(copies, nodes[k])
			}
			name := fmt.Sprintf("s%02d", i)
			f.create(name, e, copies[0], copies[1:]...)
			st := f.s.Streams[name]
			switch rng.IntN(5) {
			case 0: // a recovery that committed fewer copies: short
				if e > 1 {
					f.apply(state.RecoveryBegin(name, st.Version, st.Assignment, state.ReasonGrow, "", "", t0.UnixMilli()))
					tr := f.s.Streams[name].Recovery.Transition
					a := state.CloneAssignment(st.Assignment)
					a.Epoch, a.Followers = 2, a.Followers[1:]
					f.apply(state.RecoveryCommit(name, tr, f.s.Streams[name].Version, a, wire.HistoryStart{Epoch: 2, Node: a.Owner}, "", "", t0.UnixMilli()))
				}
			case 1: // a withdrawn recovery: fenced
				f.apply(state.RecoveryBegin(name, st.Version, st.Assignment, state.ReasonGrow, "", "", t0.UnixMilli()))
				f.apply(state.RecoveryWithdraw(name, t0.UnixMilli()))
			case 2: // pending
				f.apply(state.RecoveryBegin(name, st.Version, st.Assignment, state.ReasonGrow, "", "", t0.UnixMilli()))
			}
		}
		now := t0.Add(time.Duration(1+rng.IntN(40)) * time.Second)
		for _, n := range nodes {
			switch rng.IntN(6) {
			case 0:
				f.apply(state.NodeExpire(n, 1, "ttl", t0.UnixMilli()))
			case 1:
				f.apply(state.NodeDrain(n, t0.UnixMilli()))
			case 2:
				f.apply(state.NodeLeave(n, 1, t0.UnixMilli()))
			}
			seen := liveness.Seen{Node: n, Incarnation: 1, LastSeen: now.Add(-time.Duration(rng.IntN(4000)) * time.Millisecond),
				Leaving: rng.IntN(8) == 0, Copies: map[string]wire.CopyStatus{}}
			if rng.IntN(8) == 0 {
				seen.DisconnectedAt = seen.LastSeen.Add(time.Millisecond)
			}
			for name, st := range f.s.Streams {
				if rng.IntN(10) == 0 {
					seen.Copies[name] = wire.CopyStatus{Stream: name, StreamID: st.ID, Epoch: st.Assignment.Epoch, Sealed: rng.IntN(2) == 0}
				}
			}
			f.live.Nodes[n] = seen
		}
		f.sameAsFull(now)
	}
}

func TestPlaceWithinTheCopiesPerHost(t *testing.T) {
	f := newFixture(t, "h1", "h2", "h3")
	f.create("s1", 2, "h1", "h2")
	if _, _, err := PlaceWithin(f.s, f.live.Nodes, t0, params.TTL, "s2", 2, 1); wire.CodeOf(err) != wire.CodeHostLimit {
		t.Fatalf("two copies with only h3 below one copy: %v, want host_limit", err)
	}
	owner, followers, err := PlaceWithin(f.s, f.live.Nodes, t0, params.TTL, "s2", 1, 1)
	if err != nil || owner != "h3" || len(followers) != 0 {
		t.Fatalf("one copy: %s %v %v, want h3", owner, followers, err)
	}
	if _, _, err := PlaceWithin(f.s, f.live.Nodes, t0, params.TTL, "s2", 4, 0); wire.CodeOf(err) != wire.CodeUnavailable {
		t.Fatalf("four copies on three hosts: %v, want unavailable", err)
	}
}
