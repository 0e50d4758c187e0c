package state

import (
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
// more follow. The reply's size, and the page's cost, are bounded by the
// page, whatever the number of streams (the index keeps the names in
// order).
func (s *State) AssignmentPage(node, after string, limit int) wire.AssignmentSnapshot {
	if limit <= 0 || limit > wire.MaxAssignmentPage {
		limit = wire.MaxAssignmentPage
	}
	names, more := s.namesPage(after, limit)
	snap := wire.AssignmentSnapshot{
		Version:     s.Version,
		Node:        node,
		Assignments: []wire.AssignedStream{},
		Streams:     make(map[string]uint64, len(names)),
	}
	if more {
		snap.Next = names[len(names)-1]
	}
	for _, name := range names {
		st := s.Streams[name]
		if st == nil { // never, while the index holds
			continue
		}
		snap.Streams[name] = st.ID
		if st.Assignment.Includes(node) {
			snap.Assignments = append(snap.Assignments, assigned(st))
		}
	}
	return snap
}
