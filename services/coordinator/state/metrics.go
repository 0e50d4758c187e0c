package state

import "github.com/brook-streams/brook/pkg/wire"

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
func (s *State) Counts() Counts {
	c := Counts{
		StreamsByStatus: map[string]int{wire.StatusServing: 0, wire.StatusRecovering: 0, wire.StatusWaiting: 0},
		NodesByState:    map[string]int{wire.NodeLive: 0, wire.NodeExpired: 0, wire.NodeDraining: 0, wire.NodeLeft: 0},
		PendingByReason: map[string]int{},
		WaitingByKind:   map[string]int{},
	}
	for _, n := range s.Nodes {
		c.NodesByState[n.State]++
	}
	for _, st := range s.Streams {
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
	return c
}

// QueryCounts reads Counts without copying the state.
type QueryCounts struct{}

// Run implements Query.
func (QueryCounts) Run(s *State) any { return s.Counts() }
