package state

import (
	"maps"

	"github.com/brook-streams/brook/pkg/wire"
)

// Counts are the state's numbers the coordinator's metrics report, read
// from one version of the state.
type Counts struct {
	// StreamsByStatus counts streams by Status (serving, recovering,
	// waiting).
	StreamsByStatus map[string]int
	// UnderReplicated counts streams whose assignment holds fewer copies
	// than the stream's E, and UnderReplicatedAtRisk those of them where
	// one more loss would lose confirmed records (W now is 1); both by
	// Stream.UnderReplicated, the rule stream.info and attention show.
	UnderReplicated       int
	UnderReplicatedAtRisk int
	// NodesByState counts nodes by state (live, expired, draining, left).
	NodesByState map[string]int
	// PendingByReason counts pending recoveries by their reason (expired,
	// left, drain, sealed, ...); WaitingByKind counts those whose worker
	// recorded a wait, by the wait's kind (answers, confirmed_prefix).
	PendingByReason map[string]int
	WaitingByKind   map[string]int
}

// Counts counts; every status and node state is present, at 0 if need be.
// It looks only at the streams that can be other than serving and fully
// replicated (those with a pending recovery or needing attention, and those
// owned by a node that is not live), so its cost is theirs, not every
// stream's.
func (s *State) Counts() Counts {
	c := newCounts()
	x := s.ix()
	set := maps.Clone(x.attention)
	maps.Copy(set, x.pending)
	for id, n := range s.Nodes {
		c.NodesByState[n.State]++
		if n.State != wire.NodeLive {
			maps.Copy(set, x.ownedBy[id])
		}
	}
	// Every other stream has no recovery, no fence above its epoch, all
	// its copies and a live owner: serving, fully replicated.
	c.StreamsByStatus[wire.StatusServing] = x.streams - len(set)
	for name := range set {
		c.add(s, s.Streams[name])
	}
	return c
}

// newCounts returns Counts with every status and node state at 0.
func newCounts() Counts {
	return Counts{
		StreamsByStatus: map[string]int{wire.StatusServing: 0, wire.StatusRecovering: 0, wire.StatusWaiting: 0},
		NodesByState:    map[string]int{wire.NodeLive: 0, wire.NodeExpired: 0, wire.NodeDraining: 0, wire.NodeLeft: 0},
		PendingByReason: map[string]int{},
		WaitingByKind:   map[string]int{},
	}
}

// add counts st, a stream of s.
func (c *Counts) add(s *State, st *Stream) {
	c.StreamsByStatus[s.Status(st)]++
	if u := st.UnderReplicated(); u != nil {
		c.UnderReplicated++
		if u.LossLosesConfirmed {
			c.UnderReplicatedAtRisk++
		}
	}
	if r := st.Recovery; r != nil {
		c.PendingByReason[r.Reason]++
		if r.Wait != nil {
			c.WaitingByKind[r.Wait.Kind]++
		}
	}
}

// QueryCounts reads Counts without copying the state.
type QueryCounts struct{}

// Run implements Query.
func (QueryCounts) Run(s *State) any { return s.Counts() }
