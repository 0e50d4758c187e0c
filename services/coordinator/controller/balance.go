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
// than a margin, and only once the cluster has settled: no failover
// pending and none (nor a host joining or leaving the hosts that may own)
// for a quiet period (Settled), as Kafka's auto leader rebalancing and
// PD's schedulers put repair and a quiet spell before balance. A move
// holds its owner's intake for the hand-off, so a host hands off at most
// a few at once (MaxMovesPerHost): a mass failover leaves most promotions
// on one host, the one a balancer would move them all from.

// Balance defaults, the one definition (flags and Options read them).
const (
	DefaultBalanceInterval = time.Second
	DefaultBalanceMoves    = 4
	DefaultBalanceMargin   = 0.1
	// DefaultBalanceSettle is the quiet period after a failover or a
	// change of the hosts that may own before the balancer moves
	// anything: at 10,000 streams a failover's recoveries commit over
	// ~20 s and the promoted hosts stay loaded a while after; moves that
	// started 1 s after the last commit timed out their hand-offs and
	// held their owner's intake 4 s each (issue 17, session 28).
	// 5 s is a tail past the last pending recovery (the rounds already
	// skip while one is), short enough that a host's restart still
	// rebalances well within issue 15's 60 s.
	DefaultBalanceSettle = 5 * time.Second
	// DefaultBalanceMovesPerHost bounds the planned moves in flight from
	// one owner. A failover leaves its promotions on one or two owners,
	// so the excess a restart's rebalance moves back comes mostly from
	// one: at 2, 300 streams (78 moved from one owner) took 48.8 s to
	// balance after the restart on a loaded machine, close to issue 15's
	// 60 s; at 3 one of the default 4 slots still goes to another owner.
	DefaultBalanceMovesPerHost = 3
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
	// Settle is the quiet period (see Settled).
	Settle time.Duration
	// MaxMovesPerHost bounds the planned moves in flight from one owner.
	MaxMovesPerHost int
}

// WithDefaults fills the unset fields with the defaults.
func (p BalanceParams) WithDefaults() BalanceParams {
	p.Interval = cmp.Or(p.Interval, DefaultBalanceInterval)
	p.MaxMoves = cmp.Or(p.MaxMoves, DefaultBalanceMoves)
	p.Settle = cmp.Or(p.Settle, DefaultBalanceSettle)
	p.MaxMovesPerHost = cmp.Or(p.MaxMovesPerHost, DefaultBalanceMovesPerHost)
	if p.Margin <= 0 {
		p.Margin = DefaultBalanceMargin
	}
	return p
}

// Settling is the balancer's memory of when the cluster last changed:
// when a balancing round last saw a failover pending, or the hosts that
// may own change. The zero value has seen nothing (the first view starts
// the quiet period).
type Settling struct {
	changed time.Time
	hosts   []string
}

// Settled notes v, read at now, and reports whether quiet has passed since
// the last change it noted: a pending failover (v.Failover) or another set
// of hosts that may own (a host expired, left, joined or rejoined) than
// the last view's. A balancer that moved during a failover's recoveries or
// while the promoted hosts caught up took intake from the hosts the
// failover had just loaded (issue 17).
func (s *Settling) Settled(v state.BalanceView, now time.Time, quiet time.Duration) bool {
	hosts := slices.Sorted(maps.Keys(v.Owned))
	if v.Failover || s.changed.IsZero() || !slices.Equal(hosts, s.hosts) {
		s.changed = now
		if !v.Failover {
			s.hosts = hosts
		}
		return false
	}
	return now.Sub(s.changed) >= quiet
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
// the target), until every node is within the margin. A node that is
// the source of perHost moves in flight (v.Sources and those picked here)
// gives none (perHost <= 0: no bound).
func Balance(v state.BalanceView, lags func(stream, node string) bool, budget int, margin float64, perHost int) []Move {
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
	sources := maps.Clone(v.Sources)
	var moves []Move
	for len(moves) < budget && !within(owned, hi, lo) {
		// Sources from the most loaded down; the first that can give a
		// stream to a follower owning at least two fewer gives it.
		srcs := slices.Clone(nodes)
		slices.SortStableFunc(srcs, func(a, b string) int { return cmp.Compare(owned[b], owned[a]) })
		var mv *Move
		for _, src := range srcs {
			if perHost > 0 && sources[src] >= perHost {
				continue
			}
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
		if sources == nil {
			sources = map[string]int{}
		}
		sources[mv.From]++
		owned[mv.From]--
		owned[mv.To]++
		moves = append(moves, *mv)
	}
	return moves
}
