package state

import (
	"slices"
	"strings"
)

// QueryBalance reads what the owner balancer needs (BalanceView) from the
// index, at a cost in proportion to the nodes, the recoveries pending and
// the candidates it returns, not to the streams: the balancer runs every
// second or so on the leader. Up and Want are called under the read lock
// (they must be quick and must not keep the state).
type QueryBalance struct {
	// Up says whether node may own streams (live, heard, not draining).
	Up func(s *State, node string) bool
	// Moving holds the streams planned moves of this replica are running,
	// each with its target ("" until planned): they count at their target
	// and are no candidates.
	Moving map[string]string
	// Skip names streams that must not move now (backing off).
	Skip map[string]bool
	// Want, given the owned counts, names the nodes streams should move
	// from and to (nil when the owners are balanced enough).
	Want func(owned map[string]int) (from, to map[string]bool)
	// Limit bounds the candidates returned per source node.
	Limit int
}

// BalanceView is the owner balancer's input, from one version of the
// state.
type BalanceView struct {
	// Owned counts, per node Up names, the replicated streams (two copies
	// or more) it owns, a planned move in flight (a pending recovery of
	// reason move, or a stream in Moving with a target) counted at its
	// target.
	Owned map[string]int
	// Failover is true while a recovery other than a planned move is
	// pending: then Owned and Candidates are empty.
	Failover bool
	// Sources counts, per node, the planned moves in flight (pending
	// move recoveries, streams in Moving) of streams it owns: the
	// balancer bounds the moves a host hands off at once.
	Sources map[string]int
	// Candidates holds, per node Want named a source, up to Limit streams
	// it owns that may move (no recovery pending, not moving nor skipped,
	// all their copies) and that have a follower Want named a target,
	// sorted by name.
	Candidates map[string][]BalanceCandidate
}

// BalanceCandidate is a stream the balancer may move.
type BalanceCandidate struct {
	Stream    string
	Followers []string
}

// Run implements Query.
func (q QueryBalance) Run(s *State) any {
	x := s.ix()
	v := BalanceView{Owned: map[string]int{}, Sources: map[string]int{}, Candidates: map[string][]BalanceCandidate{}}
	for n := range s.Nodes {
		if q.Up == nil || q.Up(s, n) {
			v.Owned[n] = x.replOwns[n]
		}
	}
	shift := func(st *Stream, to string) {
		if len(st.Assignment.Followers) == 0 || to == "" || to == st.Assignment.Owner {
			return
		}
		if _, ok := v.Owned[st.Assignment.Owner]; ok {
			v.Owned[st.Assignment.Owner]--
		}
		if _, ok := v.Owned[to]; ok {
			v.Owned[to]++
		}
	}
	for name := range x.pending {
		st := s.Streams[name]
		if st == nil || st.Recovery == nil {
			continue
		}
		if st.Recovery.Reason != ReasonMove {
			return BalanceView{Failover: true}
		}
		v.Sources[st.Assignment.Owner]++
		shift(st, st.Recovery.Proposal.Owner)
	}
	for name, to := range q.Moving {
		if st := s.Streams[name]; st != nil && st.Recovery == nil {
			v.Sources[st.Assignment.Owner]++
			shift(st, to)
		}
	}
	if q.Want == nil || q.Limit <= 0 {
		return v
	}
	from, to := q.Want(v.Owned)
	for src := range from {
		var out []BalanceCandidate
		for name := range x.ownedBy[src] {
			if len(out) >= q.Limit {
				break
			}
			st := s.Streams[name]
			_, moving := q.Moving[name]
			if st == nil || moving || q.Skip[name] || st.Recovery != nil || len(st.Assignment.Followers) == 0 ||
				1+len(st.Assignment.Followers) < st.Copies || !slices.ContainsFunc(st.Assignment.Followers, func(f string) bool { return to[f] }) {
				continue
			}
			out = append(out, BalanceCandidate{Stream: name, Followers: slices.Clone(st.Assignment.Followers)})
		}
		if len(out) > 0 {
			slices.SortFunc(out, func(a, b BalanceCandidate) int { return strings.Compare(a.Stream, b.Stream) })
			v.Candidates[src] = out
		}
	}
	return v
}
