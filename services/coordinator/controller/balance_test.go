package controller

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/state"
)

// TestBalance: table tests of the balancer's pure decision.
func TestBalance(t *testing.T) {
	type stream struct {
		owner     string
		followers []string
	}
	// pile is n streams owned by owner, followed by the given nodes.
	pile := func(n int, owner string, followers ...string) []stream {
		out := make([]stream, n)
		for i := range out {
			out[i] = stream{owner, followers}
		}
		return out
	}
	cat := func(ss ...[]stream) []stream {
		var out []stream
		for _, s := range ss {
			out = append(out, s...)
		}
		return out
	}
	for _, c := range []struct {
		name    string
		nodes   []string
		down    []string
		streams []stream
		moving  []int // indexes of streams being moved
		skip    []int // indexes of streams backing off
		short   []int // indexes of streams short of a copy
		lags    []string
		pending int // index of a stream with a failover pending (-1: none)
		budget  int
		margin  float64
		want    []Move
	}{
		{name: "balanced", nodes: []string{"h1", "h2"}, pending: -1, budget: 4, margin: 0.1,
			streams: cat(pile(2, "h1", "h2"), pile(2, "h2", "h1")), want: nil},
		{name: "all on one host, bounded by the budget", nodes: []string{"h1", "h2", "h3"}, pending: -1, budget: 2, margin: 0.1,
			streams: pile(6, "h1", "h2", "h3"),
			want:    []Move{{"s0", "h1", "h2"}, {"s1", "h1", "h3"}}},
		{name: "all on one host, to even", nodes: []string{"h1", "h2", "h3"}, pending: -1, budget: 10, margin: 0.1,
			streams: pile(6, "h1", "h2", "h3"),
			want:    []Move{{"s0", "h1", "h2"}, {"s1", "h1", "h3"}, {"s2", "h1", "h2"}, {"s3", "h1", "h3"}}},
		{name: "within the margin", nodes: []string{"h1", "h2"}, pending: -1, budget: 4, margin: 0.25,
			streams: cat(pile(9, "h1", "h2"), pile(11, "h2", "h1")), want: nil},
		{name: "only to followers", nodes: []string{"h1", "h2", "h3"}, pending: -1, budget: 4, margin: 0.1,
			streams: pile(4, "h1", "h2"),
			want:    []Move{{"s0", "h1", "h2"}, {"s1", "h1", "h2"}}},
		{name: "never to a host that is not up", nodes: []string{"h1", "h2", "h3"}, down: []string{"h2"}, pending: -1, budget: 4, margin: 0.1,
			streams: pile(4, "h1", "h2", "h3"),
			want:    []Move{{"s0", "h1", "h3"}, {"s1", "h1", "h3"}}},
		{name: "no move that does not lower the spread", nodes: []string{"h1", "h2", "h3", "h4"}, pending: -1, budget: 4, margin: 0.1,
			streams: cat(pile(2, "h1", "h2"), pile(1, "h2", "h1"), pile(1, "h3", "h4"), pile(1, "h4", "h3")), want: nil},
		{name: "streams being moved stay", nodes: []string{"h1", "h2"}, pending: -1, budget: 4, margin: 0.1,
			streams: pile(4, "h1", "h2"), moving: []int{0},
			want: []Move{{"s1", "h1", "h2"}, {"s2", "h1", "h2"}}},
		{name: "nothing while a failover is pending", nodes: []string{"h1", "h2", "h3"}, pending: 5, budget: 4, margin: 0.1,
			streams: pile(6, "h1", "h2", "h3"), want: nil},
		{name: "streams backing off stay", nodes: []string{"h1", "h2"}, pending: -1, budget: 4, margin: 0.1,
			streams: pile(4, "h1", "h2"), skip: []int{0},
			want: []Move{{"s1", "h1", "h2"}, {"s2", "h1", "h2"}}},
		{name: "streams short of a copy stay", nodes: []string{"h1", "h2"}, pending: -1, budget: 4, margin: 0.1,
			streams: pile(4, "h1", "h2"), short: []int{0, 1},
			want: []Move{{"s2", "h1", "h2"}, {"s3", "h1", "h2"}}},
		{name: "never to a lagging follower", nodes: []string{"h1", "h2", "h3"}, lags: []string{"h2"}, pending: -1, budget: 4, margin: 0.1,
			streams: pile(6, "h1", "h2", "h3"),
			want:    []Move{{"s0", "h1", "h3"}, {"s1", "h1", "h3"}, {"s2", "h1", "h3"}}},
		{name: "owner-only streams do not count", nodes: []string{"h1", "h2"}, pending: -1, budget: 4, margin: 0.1,
			streams: cat(pile(4, "h1"), pile(1, "h2", "h1")), want: nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := state.New()
			for _, n := range c.nodes {
				s.Apply(state.NodeSeen(n, 1, 1))
			}
			for i, st := range c.streams {
				name := fmt.Sprintf("s%d", i)
				f := append([]string{}, st.followers...)
				if r := s.Apply(state.StreamCreate(name, 1+len(f), "", wire.Retention{}, wire.Assignment{Owner: st.owner, Followers: f, Policy: "majority_durable"}, 1)); r.Err() != nil {
					t.Fatal(r.Err())
				}
			}
			if c.pending >= 0 {
				st := s.Streams[fmt.Sprintf("s%d", c.pending)]
				if r := s.Apply(state.RecoveryBegin(st.Name, st.Version, st.Assignment, state.ReasonGrow, "", "", 1)); r.Err() != nil {
					t.Fatal(r.Err())
				}
			}
			moving := map[string]string{}
			for _, i := range c.moving {
				moving[fmt.Sprintf("s%d", i)] = ""
			}
			down, lags, skip := map[string]bool{}, map[string]bool{}, map[string]bool{}
			for _, n := range c.down {
				down[n] = true
			}
			for _, n := range c.lags {
				lags[n] = true
			}
			for _, i := range c.skip {
				skip[fmt.Sprintf("s%d", i)] = true
			}
			for _, i := range c.short {
				s.Streams[fmt.Sprintf("s%d", i)].Copies++
			}
			up := func(n string) bool { return !down[n] && s.NodeState(n) == wire.NodeLive }
			got := balance(s, up, moving, skip, func(_, n string) bool { return lags[n] }, c.budget, c.margin)
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("moves %v, want %v", got, c.want)
			}
		})
	}
}

// TestBalanceDefaults: the one set of defaults fills unset fields only.
func TestBalanceDefaults(t *testing.T) {
	if p := (BalanceParams{}).WithDefaults(); p.Interval != DefaultBalanceInterval || p.MaxMoves != DefaultBalanceMoves || p.Margin != DefaultBalanceMargin || p.Off {
		t.Fatalf("defaults %+v", p)
	}
	if p := (BalanceParams{Off: true, MaxMoves: 1}).WithDefaults(); !p.Off || p.MaxMoves != 1 {
		t.Fatalf("set fields kept: %+v", p)
	}
}

// balance runs one balancing round over s as the server does: the query,
// then Balance.
func balance(s *state.State, up func(string) bool, moving map[string]string, skip map[string]bool, lags func(string, string) bool, budget int, margin float64) []Move {
	q := BalanceQuery(func(_ *state.State, n string) bool { return up(n) }, moving, skip, budget, margin)
	return Balance(q.Run(s).(state.BalanceView), lags, budget, margin, 0)
}

// TestBalanceShortStreams: streams a recovery left short of a copy count
// at their owner but stay (they get their copy back first).
func TestBalanceShortStreams(t *testing.T) {
	f := newFixture(t, "h1", "h2", "h3")
	for _, n := range []string{"a1", "a2", "a3", "a4"} {
		f.create(n, 3, "h1", "h2", "h3")
	}
	f.create("b1", 3, "h2", "h1", "h3")
	f.create("c1", 3, "h3", "h1", "h2")
	// a1 and a2 lose a follower by a recovery: short of a copy.
	for _, n := range []string{"a1", "a2"} {
		st := f.s.Streams[n]
		f.apply(state.RecoveryBegin(n, st.Version, st.Assignment, state.ReasonGrow, "", "", t0.UnixMilli()))
		a := state.CloneAssignment(st.Assignment)
		a.Epoch, a.Followers = 2, []string{"h2"}
		f.apply(state.RecoveryCommit(n, f.s.Streams[n].Recovery.Transition, f.s.Streams[n].Version, a, wire.HistoryStart{Epoch: 2, Node: "h1"}, "", "", t0.UnixMilli()))
	}
	up := func(string) bool { return true }
	// h1 owns 4 of 6: a3 and a4 move (a1 and a2 are short of a copy and
	// stay).
	want := []Move{{"a3", "h1", "h2"}, {"a4", "h1", "h3"}}
	if got := balance(f.s, up, nil, nil, nil, 4, 0.1); !reflect.DeepEqual(got, want) {
		t.Fatalf("moves %v, want %v", got, want)
	}
}

// TestBalanceQueryBounded: the query returns at most its limit of
// candidates per source, whatever the streams, and nothing when balanced.
func TestBalanceQueryBounded(t *testing.T) {
	f := newFixture(t, "h1", "h2", "h3")
	for i := range 200 {
		f.create(fmt.Sprintf("s%03d", i), 3, "h1", "h2", "h3")
	}
	up := func(*state.State, string) bool { return true }
	v := BalanceQuery(up, nil, nil, 2, 0.1).Run(f.s).(state.BalanceView)
	if want := map[string]int{"h1": 200, "h2": 0, "h3": 0}; !reflect.DeepEqual(v.Owned, want) {
		t.Fatalf("owned %v, want %v", v.Owned, want)
	}
	if n := len(v.Candidates["h1"]); n != 4*2+8 || len(v.Candidates) != 1 {
		t.Fatalf("candidates %d of h1, %d sources", n, len(v.Candidates))
	}
	g := newFixture(t, "h1", "h2")
	g.create("a", 2, "h1", "h2")
	g.create("b", 2, "h2", "h1")
	if v := BalanceQuery(func(*state.State, string) bool { return true }, nil, nil, 2, 0.1).Run(g.s).(state.BalanceView); len(v.Candidates) != 0 {
		t.Fatalf("candidates when balanced: %v", v.Candidates)
	}
}

// TestBalanceMovesInFlight: moves in flight (a pending recovery of reason
// move, or a hand-off not recorded yet) count at their target, so the next
// round does not move more than even.
func TestBalanceMovesInFlight(t *testing.T) {
	f := newFixture(t, "h1", "h2", "h3")
	for _, n := range []string{"s0", "s1", "s2", "s3", "s4", "s5"} {
		f.create(n, 3, "h1", "h2", "h3")
	}
	up := func(string) bool { return true }
	first := balance(f.s, up, nil, nil, nil, 4, 0.1)
	if len(first) != 4 {
		t.Fatalf("first round %v", first)
	}
	// The first move commits, two are recorded (pending), one is still in
	// its hand-off.
	moving := map[string]string{}
	for i, m := range first {
		st := f.s.Streams[m.Stream]
		p := state.CloneAssignment(st.Assignment)
		p.Owner, p.Followers = m.To, []string{"h1"}
		for _, x := range st.Assignment.Followers {
			if x != m.To {
				p.Followers = append(p.Followers, x)
			}
		}
		if i == 3 {
			moving[m.Stream] = m.To
			continue
		}
		r := f.apply(state.RecoveryBegin(m.Stream, st.Version, p, state.ReasonMove, "", "", t0.UnixMilli()))
		if i == 0 {
			st = f.s.Streams[m.Stream]
			p.Epoch = st.Assignment.Epoch + 1
			f.apply(state.RecoveryCommit(m.Stream, r.Transition, st.Version, p, wire.HistoryStart{Epoch: p.Epoch, Node: m.To}, "", "", t0.UnixMilli()))
		} else {
			moving[m.Stream] = ""
		}
	}
	if second := balance(f.s, up, moving, nil, nil, 4-len(moving), 0.1); len(second) > 0 {
		t.Fatalf("moves beyond even with %d in flight: %v", len(moving), second)
	}
}

// TestBalanceMovesPerHost: a host hands off at most perHost moves at
// once, those in flight (a pending move, a hand-off not recorded yet)
// included; a mass failover left 1,363 promotions on one host and the
// balancer moved four at a time from it while it was still loaded (issue
// 17, session 28).
func TestBalanceMovesPerHost(t *testing.T) {
	f := newFixture(t, "h1", "h2", "h3", "h4")
	for i := range 12 {
		f.create(fmt.Sprintf("s%02d", i), 3, "h1", "h2", "h3")
	}
	f.create("t0", 3, "h4", "h1", "h2")
	up := func(*state.State, string) bool { return true }
	run := func(moving map[string]string, budget int) []Move {
		v := BalanceQuery(up, moving, nil, budget, 0.1).Run(f.s).(state.BalanceView)
		return Balance(v, nil, budget, 0.1, 2)
	}
	first := run(nil, 4)
	if len(first) != 2 || first[0].From != "h1" || first[1].From != "h1" {
		t.Fatalf("first round %v, want two moves from h1 (two at most per host)", first)
	}
	// One hand-off is recorded (a pending move), one is still running.
	m := first[0]
	st := f.s.Streams[m.Stream]
	p := state.CloneAssignment(st.Assignment)
	p.Owner, p.Followers = m.To, []string{"h1", "h3"}
	f.apply(state.RecoveryBegin(m.Stream, st.Version, p, state.ReasonMove, "", "", t0.UnixMilli()))
	if again := run(map[string]string{first[1].Stream: first[1].To}, 2); len(again) != 0 {
		t.Fatalf("moves %v from h1 with two of its moves in flight", again)
	}
}

// TestBalanceSettles: the balancer moves nothing until a quiet period has
// passed since it last saw a failover pending or the hosts that may own
// change; at 10,000 streams it moved streams from the host a failover had
// just loaded one second after the last recovery committed (issue 17,
// session 28).
func TestBalanceSettles(t *testing.T) {
	const quiet = 10 * time.Second
	var s Settling
	hosts := func(ns ...string) state.BalanceView {
		v := state.BalanceView{Owned: map[string]int{}}
		for _, n := range ns {
			v.Owned[n] = 1
		}
		return v
	}
	steps := []struct {
		at   time.Duration
		v    state.BalanceView
		want bool
	}{
		{0, hosts("h1", "h2", "h3"), false},                               // first view: starts the quiet period
		{quiet, hosts("h1", "h2", "h3"), true},                            // quiet since
		{quiet + time.Second, hosts("h2", "h3"), false},                   // h1 expired
		{quiet + 2*time.Second, state.BalanceView{Failover: true}, false}, // its failover pending
		{2*quiet + time.Second, hosts("h2", "h3"), false},                 // last seen pending at quiet+2s
		{2*quiet + 2*time.Second, hosts("h2", "h3"), true},
		{2*quiet + 3*time.Second, hosts("h1", "h2", "h3"), false}, // h1 rejoins
		{3*quiet + 2*time.Second, hosts("h1", "h2", "h3"), false},
		{3*quiet + 3*time.Second, hosts("h1", "h2", "h3"), true},
	}
	for i, st := range steps {
		if got := s.Settled(st.v, t0.Add(st.at), quiet); got != st.want {
			t.Fatalf("step %d (at %v): settled %v, want %v", i, st.at, got, st.want)
		}
	}
}
