package state

import (
	"slices"

	"github.com/brook-streams/brook/pkg/wire"
)

// QueryAssignmentPage reads one page of node's assignment snapshot
// (wire.AssignmentSnapshot): the streams whose names sort after After, at
// most Limit of them (wire.MaxAssignmentPage when 0 or more).
type QueryAssignmentPage struct {
	Node  string
	After string
	Limit int
}

// Run implements Query.
func (q QueryAssignmentPage) Run(s *State) any { return s.AssignmentPage(q.Node, q.After, q.Limit) }

// AssignmentPage is one page of what node pulls: of the streams whose names
// sort after after (at most limit of them, wire.MaxAssignmentPage when 0 or
// more), every assignment that includes node, as AssignmentSnapshot has
// them, and the id of every one; Next names the page's last stream when
// more follow. The reply's size is bounded by the page, whatever the
// number of streams; choosing the page reads every name once.
func (s *State) AssignmentPage(node, after string, limit int) wire.AssignmentSnapshot {
	if limit <= 0 || limit > wire.MaxAssignmentPage {
		limit = wire.MaxAssignmentPage
	}
	var names []string
	for name := range s.Streams {
		if name > after {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	snap := wire.AssignmentSnapshot{
		Version:     s.Version,
		Node:        node,
		Assignments: []wire.AssignedStream{},
		Streams:     make(map[string]uint64, min(len(names), limit)),
	}
	if len(names) > limit {
		names = names[:limit]
		snap.Next = names[len(names)-1]
	}
	for _, name := range names {
		st := s.Streams[name]
		snap.Streams[name] = st.ID
		if st.Assignment.Includes(node) {
			snap.Assignments = append(snap.Assignments, assigned(st))
		}
	}
	return snap
}
