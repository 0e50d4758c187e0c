package controller

import (
	"cmp"
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

// BalanceView is what Balance needs to know beyond the state.
type BalanceView struct {
	// Up says whether a node may own streams (live, heard, not draining,
	// leaving or being drained).
	Up func(node string) bool
	// Moving holds the streams planned moves are running on, each with its
	// target ("" when not known yet).
	Moving map[string]string
	// Skip, if set, says a stream must not move now (it backs off after an
	// aborted move).
	Skip func(stream string) bool
	// Lags, if set, says node's copy of stream lags its owner's (as their
	// heartbeats last told), so a hand-off to it would likely time out.
	Lags func(stream, node string) bool
}

// Balance is pure: it returns at most budget planned moves that bring the
// owners of replicated streams toward an even share across the hosts
// v.Up says may own streams. It reads every stream: on a Partial view
// (whose streams are not all the state's) it returns nothing, since its
// counts would be wrong. Nothing moves while a recovery other than a
// planned move is pending anywhere. A move in flight (a pending recovery
// of reason move, or a stream in v.Moving) counts at its target, and its
// stream stays; so do the streams v.Skip names and those short of copies.
// It moves only when some host is off the even share by more than margin,
// and then, one at a time, a stream of the host owning the most to the
// follower owning the fewest (that v.Lags does not say lags), as long as
// that lowers the spread (the source owns at least two more than the
// target), until every host is within the margin.
func Balance(s *state.State, v BalanceView, budget int, margin float64) []Move {
	if budget <= 0 || s.StreamCount() != len(s.Streams) {
		return nil
	}
	owned := map[string]int{}
	var nodes []string
	for _, id := range s.SortedNodes() {
		if v.Up(id) {
			owned[id] = 0
			nodes = append(nodes, id)
		}
	}
	if len(nodes) < 2 {
		return nil
	}
	// Streams that may move, by owner.
	movable := map[string][]*state.Stream{}
	total := 0
	for _, name := range s.SortedStreams() {
		st := s.Streams[name]
		if st.Recovery != nil && st.Recovery.Reason != state.ReasonMove {
			return nil // a failover is under way: leave the cluster alone
		}
		a := st.Assignment
		if len(a.Copies()) < 2 {
			continue
		}
		owner := a.Owner
		to, moving := v.Moving[name]
		switch {
		case st.Recovery != nil:
			owner = st.Recovery.Proposal.Owner
		case to != "":
			owner = to
		}
		if _, ok := owned[owner]; !ok {
			continue
		}
		owned[owner]++
		total++
		if st.Recovery == nil && !moving && len(a.Copies()) >= st.Copies && (v.Skip == nil || !v.Skip(name)) {
			movable[owner] = append(movable[owner], st)
		}
	}
	even := float64(total) / float64(len(nodes))
	hi, lo := even*(1+margin), even*(1-margin)
	within := func() bool {
		for _, n := range nodes {
			if c := float64(owned[n]); c > hi || c < lo {
				return false
			}
		}
		return true
	}
	if within() {
		return nil
	}
	var moves []Move
	for len(moves) < budget && !within() {
		// Sources from the most loaded down; the first that can give a
		// stream to a follower owning at least two fewer gives it.
		srcs := slices.Clone(nodes)
		slices.SortStableFunc(srcs, func(a, b string) int { return cmp.Compare(owned[b], owned[a]) })
		var mv *Move
		for _, src := range srcs {
			for i, st := range movable[src] {
				to := ""
				for _, f := range st.Assignment.Followers {
					if _, ok := owned[f]; !ok || owned[f] > owned[src]-2 || v.Lags != nil && v.Lags(st.Name, f) {
						continue
					}
					if to == "" || owned[f] < owned[to] || owned[f] == owned[to] && f < to {
						to = f
					}
				}
				if to == "" {
					continue
				}
				mv = &Move{Stream: st.Name, From: src, To: to}
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
