package controller

import (
	"fmt"
	"reflect"
	"testing"

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
		pending int   // index of a stream with a failover pending (-1: none)
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
				s.Streams[fmt.Sprintf("s%d", c.pending)].Recovery = &wire.PendingRecovery{Transition: 1, Reason: "expired"}
			}
			moving := map[string]bool{}
			for _, i := range c.moving {
				moving[fmt.Sprintf("s%d", i)] = true
			}
			down := map[string]bool{}
			for _, n := range c.down {
				down[n] = true
			}
			got := Balance(s, func(n string) bool { return !down[n] && s.NodeState(n) == wire.NodeLive }, moving, c.budget, c.margin)
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
