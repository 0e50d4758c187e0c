package raftstore

import (
	"fmt"

	"github.com/brook-streams/brook/services/coordinator/state"
)

// LocalCounts reads this replica's state.Counts without a quorum round and
// without copying the state, for metrics; it may lag.
func (s *Store) LocalCounts() (state.Counts, error) {
	v, err := s.nh.StaleRead(ShardID, state.QueryCounts{})
	if err != nil {
		return state.Counts{}, fmt.Errorf("stale read of the counts: %w", err)
	}
	return v.(state.Counts), nil
}
