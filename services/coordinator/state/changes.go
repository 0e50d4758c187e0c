package state

import (
	"maps"
	"slices"
	"sort"

	"github.com/brook-streams/brook/pkg/wire"
)

// changeLog records, in version order, which stream each change of a
// field hosts pull concerned (its assignment, retention, floor, history
// starts, traceparent, its creation and its deletion), so that a host can
// pull only the streams changed since the version it applied
// (AssignmentDelta) and a create costs the same at any cluster size.
//
// Like the index it is kept by Apply beside the streams and never saved:
// a state loaded from a snapshot (or built by hand) starts an empty log
// whose floor is its own version, so a host that asks for the changes
// since an earlier version gets a full pull instead. Replicas therefore
// may hold different logs; each answers correctly for the versions it
// covers.
type changeLog struct {
	// floor is the version at and above which the log holds every
	// change: a delta since a version below floor cannot be answered.
	floor uint64
	// entries are the changes in version order; a stream may have
	// several, of which only its latest counts (compact drops the others).
	entries []change
	// latest is each stream's pull version: the version of its latest
	// entry (of a deleted stream: of its deletion, until compact drops
	// it).
	latest map[string]uint64
	// nodes is the version of the latest change the log cannot name
	// stream by stream, 0 for none: a log that records every change of
	// the streams' listing (State.listed) notes here each change of a
	// node, which moves the status of every stream it owns. A delta since
	// an earlier version is answered in full.
	nodes uint64
}

// clone deep-copies the log (nil stays nil).
func (l *changeLog) clone() *changeLog {
	if l == nil {
		return nil
	}
	return &changeLog{floor: l.floor, entries: slices.Clone(l.entries), latest: maps.Clone(l.latest), nodes: l.nodes}
}

// change is one entry of the change log.
type change struct {
	version uint64
	stream  string
}

// minChangeLog is the least slack compact leaves (a variable for tests).
var minChangeLog = 4096

func newChangeLog(floor uint64) *changeLog {
	return &changeLog{floor: floor, latest: map[string]uint64{}}
}

// record notes a change of stream at version (which only grows); live is
// the number of streams that exist, which bounds the log (compact).
func (l *changeLog) record(version uint64, stream string, live int) {
	l.entries = append(l.entries, change{version: version, stream: stream})
	l.latest[stream] = version
	if len(l.entries) > live+2*max(live, minChangeLog) {
		l.compact(live)
	}
}

// compact keeps each stream's latest entry only, then, if more than
// live+max(live, minChangeLog) remain (the deleted streams' entries), drops
// the oldest and raises the floor past them. record calls it at
// live+2*max(live, minChangeLog) entries, so at least max(live,
// minChangeLog) records pass between two calls, each costing the log's
// length: recording stays O(1) amortized and the log bounded.
func (l *changeLog) compact(live int) {
	kept := l.entries[:0]
	for _, e := range l.entries {
		if l.latest[e.stream] == e.version {
			kept = append(kept, e)
		}
	}
	clear(l.entries[len(kept):])
	l.entries = kept
	if over := len(l.entries) - (live + max(live, minChangeLog)); over > 0 {
		for _, e := range l.entries[:over] {
			delete(l.latest, e.stream)
		}
		l.floor = l.entries[over-1].version
		l.entries = append([]change(nil), l.entries[over:]...)
	}
}

// QueryAssignmentDelta reads the changes of node's assignments since
// version Since (wire.AssignmentSnapshot, see AssignmentDelta).
type QueryAssignmentDelta struct {
	Node  string
	Since uint64
	Limit int
}

// Run implements Query.
func (q QueryAssignmentDelta) Run(s *State) any { return s.AssignmentDelta(q.Node, q.Since, q.Limit) }

// PullVersion is stream's pull version: the version of the latest change
// of a field hosts pull (0 when the change log does not know the stream,
// as after a restart from a snapshot).
func (s *State) PullVersion(stream string) uint64 {
	if s.changes == nil {
		return 0
	}
	return s.changes.latest[stream]
}

// AssignmentDelta is one page of what changed for node since version
// since: of the streams whose pull version is above since (at most limit
// of them, wire.MaxAssignmentPage when 0 or more), the assignments that
// include node, the ids of those that exist, and the names of those
// deleted. NextSince is set when more follow (the next page's since). Its
// cost is the changes since since, not the streams there are.
//
// When the change log cannot answer (since is below its floor, or above the
// state's version, as for a host of an earlier cluster) the reply is the
// first page of a full pull instead (AssignmentPage, Since 0 in the reply).
func (s *State) AssignmentDelta(node string, since uint64, limit int) wire.AssignmentSnapshot {
	if !s.changes.covers(since, s.Version) {
		return s.AssignmentPage(node, "", limit)
	}
	if limit <= 0 || limit > wire.MaxAssignmentPage {
		limit = wire.MaxAssignmentPage
	}
	l := s.changes
	snap := wire.AssignmentSnapshot{
		Version:     s.Version,
		Node:        node,
		Since:       since,
		Assignments: []wire.AssignedStream{},
		Streams:     map[string]uint64{},
	}
	snap.NextSince = l.since(since, limit, func(stream string) {
		st := s.Streams[stream]
		if st == nil {
			snap.Deleted = append(snap.Deleted, stream)
			return
		}
		snap.Streams[stream] = st.ID
		if st.Assignment.Includes(node) {
			snap.Assignments = append(snap.Assignments, assigned(st))
		}
	})
	return snap
}

// covers reports whether the log can say what changed after version since
// in a state at version: since is at or above its floor and above the
// latest change it cannot name stream by stream (nodes), and not past
// version (a reader of an earlier cluster).
func (l *changeLog) covers(since, version uint64) bool {
	return l != nil && since != 0 && since >= l.floor && since >= l.nodes && since <= version
}

// since calls yield, in version order, for each stream whose latest change
// is after version since, at most limit of them (every one when limit is
// 0 or less), and returns the version to ask from for the rest: 0 when
// none is left. Its cost is the changes after since, not the streams there
// are.
func (l *changeLog) since(since uint64, limit int, yield func(stream string)) (next uint64) {
	first := sort.Search(len(l.entries), func(i int) bool { return l.entries[i].version > since })
	n := 0
	for i := first; i < len(l.entries); i++ {
		e := l.entries[i]
		if l.latest[e.stream] != e.version {
			continue // a later entry of the stream follows
		}
		if limit > 0 && n == limit {
			return l.entries[i-1].version
		}
		n++
		yield(e.stream)
	}
	return 0
}
