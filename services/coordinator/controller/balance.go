package controller

import (
	"cmp"
	"maps"
	"slices"
	"time"

	"github.com/brook-streams/brook/services/coordinator/state"
)

// Owner balance: after failovers and rejoins the owners pile up on a few
// hosts (ties go to the lowest node id, and a returning host comes back as
// a follower of everything it held). Like Kafka's preferred-leader
// rebalancing, the leader moves ownership back with planned moves, a few
// at a time, once a host's share of owners is off the even share by more
// than a margin.

// Balance defaults, the one definition (flags and Options read them).
const (
	DefaultBalanceInterval = time.Second
	DefaultBalanceMoves    = 4
	DefaultBalanceMargin   = 0.1
)

// BalanceParams configure the balancer.
type BalanceParams struct {
	// Off turns the balancer off (it is on by default).
	Off bool
	// Interval is the least time between two balancing rounds.
	Interval time.Duration
	// MaxMoves bounds the planned moves in flight at once.
	MaxMoves int
	// Margin is how far (a fraction of the even share) a host's count of
	// owned streams may be off the even share before streams move.
	Margin float64
}

// WithDefaults fills the unset fields with the defaults.
func (p BalanceParams) WithDefaults() BalanceParams {
	p.Interval = cmp.Or(p.Interval, DefaultBalanceInterval)
	p.MaxMoves = cmp.Or(p.MaxMoves, DefaultBalanceMoves)
	if p.Margin <= 0 {
		p.Margin = DefaultBalanceMargin
	}
	return p
}

// Move is one planned owner move the balancer wants.
type Move struct {
	Stream, From, To string
}

// BalanceQuery is the state query of one balancing round: up says
// whether a node may own streams (called under the state's read lock),
// moving holds this replica's planned moves in flight (with their targets)
// and skip the streams backing off after a failed move. It returns, per
// source node, a few more candidates than budget, since Balance may turn
// some down (a lagging target).
func BalanceQuery(up func(*state.State, string) bool, moving map[string]string, skip map[string]bool, budget int, margin float64) state.QueryBalance {
	return state.QueryBalance{Up: up, Moving: moving, Skip: skip, Want: balanceWant(margin), Limit: 4*budget + 8}
}

// balanceWant returns, for owned counts, the nodes above the even share
// (sources) and those below it (targets), or nothing when every node is
// within margin of the even share.
func balanceWant(margin float64) func(owned map[string]int) (from, to map[string]bool) {
	return func(owned map[string]int) (from, to map[string]bool) {
		even, hi, lo := shares(owned, margin)
		if len(owned) < 2 || within(owned, hi, lo) {
			return nil, nil
		}
		from, to = map[string]bool{}, map[string]bool{}
		for n, c := range owned {
			switch {
			case float64(c) > even:
				from[n] = true
			case float64(c) < even:
				to[n] = true
			}
		}
		return from, to
	}
}

// shares returns the even share of owned and the margin's bounds around it.
func shares(owned map[string]int, margin float64) (even, hi, lo float64) {
	total := 0
	for _, c := range owned {
		total += c
	}
	if len(owned) == 0 {
		return 0, 0, 0
	}
	even = float64(total) / float64(len(owned))
	return even, even * (1 + margin), even * (1 - margin)
}

// within reports whether every count is within [lo, hi].
func within(owned map[string]int, hi, lo float64) bool {
	for _, c := range owned {
		if f := float64(c); f > hi || f < lo {
			return false
		}
	}
	return true
}

// Balance is pure: it returns at most budget planned moves that bring the
// owners of replicated streams toward an even share across the nodes of
// v.Owned (those that may own streams), from a BalanceQuery's view: its
// cost is in proportion to the nodes and the candidates, not to the
// streams. Nothing moves while a failover is pending (v.Failover). It
// moves only when some node is off the even share by more than margin,
// and then, one at a time, a candidate of the node owning the most to its
// follower owning the fewest (that lags, if set, does not say lags), as
// long as that lowers the spread (the source owns at least two more than
// the target), until every node is within the margin.
func Balance(v state.BalanceView, lags func(stream, node string) bool, budget int, margin float64) []Move {
	if budget <= 0 || v.Failover || len(v.Owned) < 2 {
		return nil
	}
	owned := maps.Clone(v.Owned)
	nodes := slices.Sorted(maps.Keys(owned))
	_, hi, lo := shares(owned, margin)
	movable := map[string][]state.BalanceCandidate{}
	for n, cs := range v.Candidates {
		movable[n] = slices.Clone(cs)
	}
	var moves []Move
	for len(moves) < budget && !within(owned, hi, lo) {
		// Sources from the most loaded down; the first that can give a
		// stream to a follower owning at least two fewer gives it.
		srcs := slices.Clone(nodes)
		slices.SortStableFunc(srcs, func(a, b string) int { return cmp.Compare(owned[b], owned[a]) })
		var mv *Move
		for _, src := range srcs {
			for i, st := range movable[src] {
				to := ""
				for _, f := range st.Followers {
					if _, ok := owned[f]; !ok || owned[f] > owned[src]-2 || lags != nil && lags(st.Stream, f) {
						continue
					}
					if to == "" || owned[f] < owned[to] || owned[f] == owned[to] && f < to {
						to = f
					}
				}
				if to == "" {
					continue
				}
				mv = &Move{Stream: st.Stream, From: src, To: to}
				movable[src] = slices.Delete(movable[src], i, i+1)
				break
			}
			if mv != nil {
				break
			}
		}
		if mv == nil {
			break // nothing left that lowers the spread
		}
		owned[mv.From]--
		owned[mv.To]++
		moves = append(moves, *mv)
	}
	return moves
}
