package state

import (
	"github.com/brook-streams/brook/pkg/wire"
)

// Query is a read of the state. Run is called under the state machine's
// read lock, so everything it returns is from one version of the state; it
// must return copies, never references into the state.
type Query interface {
	Run(s *State) any
}

// QueryAll reads a deep copy of the whole state (*State), without the
// change log (which differs between replicas and no reader of a copy
// needs).
type QueryAll struct{}

// Run implements Query.
func (QueryAll) Run(s *State) any { return s.cloneStreams() }

// QueryNodeState reads the state of one node (wire.NodeLive etc., or "" if
// the node is unknown) as a string, without copying the rest of the state.
type QueryNodeState struct{ Node string }

// Run implements Query.
func (q QueryNodeState) Run(s *State) any { return s.NodeState(q.Node) }

// QueryNodes reads the ids of all known nodes, sorted ([]string), without
// copying the rest of the state.
type QueryNodes struct{}

// Run implements Query.
func (QueryNodes) Run(s *State) any { return s.SortedNodes() }

// QueryStream reads one stream (StreamView) without copying the others:
// stream.info is asked by every client whose publishes find no owner, so
// during a mass failover it must not cost a copy of the whole state.
type QueryStream struct{ Stream string }

// StreamView is one stream and its status, from one version of the state.
// Stream is nil if there is no such stream.
type StreamView struct {
	Stream *Stream
	Status string
}

// Run implements Query.
func (q QueryStream) Run(s *State) any {
	st := s.Streams[q.Stream]
	if st == nil {
		return StreamView{}
	}
	return StreamView{Stream: st.Clone(), Status: s.Status(st)}
}

// QueryRecovery reads the RecoveryView of one stream.
type QueryRecovery struct{ Stream string }

// Run implements Query.
func (q QueryRecovery) Run(s *State) any { return s.RecoveryView(q.Stream) }

// AssignmentSnapshot is what node pulls: every assignment that includes it,
// each with its stream's starts (never nil), retention and the traceparent
// of the commit that made it, and the ids of all streams.
func (s *State) AssignmentSnapshot(node string) wire.AssignmentSnapshot {
	snap := wire.AssignmentSnapshot{
		Version:     s.Version,
		Node:        node,
		Assignments: []wire.AssignedStream{},
		Streams:     make(map[string]uint64, len(s.Streams)),
	}
	for _, name := range s.SortedStreams() {
		st := s.Streams[name]
		snap.Streams[name] = st.ID
		if !st.Assignment.Includes(node) {
			continue
		}
		snap.Assignments = append(snap.Assignments, assigned(st))
	}
	return snap
}

// AssignedOf is st's assignment as a host pulls it (a recovery's notice
// carries it too).
func AssignedOf(st *Stream) wire.AssignedStream { return assigned(st) }

// assigned is st's assignment as a host pulls it.
func assigned(st *Stream) wire.AssignedStream {
	return wire.AssignedStream{
		Assignment:  CloneAssignment(st.Assignment),
		Starts:      append([]wire.HistoryStart{}, st.Starts...),
		Retention:   st.Retention,
		MinCopies:   st.MinCopies,
		TraceParent: st.TraceParent,
	}
}

// RecoveryView is what the recovery worker reads: the stream's pending
// recovery (nil if none or no stream), its history starts, the leaving nodes
// and the stream version, all from one version of the state.
type RecoveryView struct {
	Recovery *wire.PendingRecovery
	Starts   []wire.HistoryStart
	Leaving  map[string]bool
	Version  uint64
}

// RecoveryView reads the view of stream.
func (s *State) RecoveryView(stream string) RecoveryView {
	v := RecoveryView{Starts: []wire.HistoryStart{}, Leaving: s.Leaving()}
	st := s.Streams[stream]
	if st == nil {
		return v
	}
	v.Recovery = ClonePending(st.Recovery)
	v.Starts = append(v.Starts, st.Starts...)
	v.Version = st.Version
	return v
}

// Status is the stream's status as stream.info shows it: recovering while a
// pending recovery runs (or is about to be recorded for a lost owner or for
// a withdrawn recovery's seals),
// waiting when the recovery waits or an owner-only stream's owner is gone,
// serving otherwise.
func (s *State) Status(st *Stream) string {
	if st.Recovery != nil {
		if st.Recovery.Wait != nil {
			return wire.StatusWaiting
		}
		return wire.StatusRecovering
	}
	if st.FencedEpoch > st.Assignment.Epoch {
		// A withdrawn recovery's seals: the controller records a new one.
		return wire.StatusRecovering
	}
	switch s.NodeState(st.Assignment.Owner) {
	case wire.NodeLive:
		return wire.StatusServing
	case wire.NodeDraining:
		// A draining owner still serves; a replicated stream moves off it.
		if st.Copies > 1 {
			return wire.StatusRecovering
		}
		return wire.StatusServing
	default:
		if st.Copies > 1 {
			return wire.StatusRecovering
		}
		return wire.StatusWaiting
	}
}

// QueryStreamChanges reads one page of the streams whose listing changed
// after version Since (StreamChangePage): what a reader holding the list
// at Since needs to bring it to the state's version. Limit bounds the
// page as QueryStreamPage's does (0: no bound).
type QueryStreamChanges struct {
	Since uint64
	Limit int
}

// StreamChangePage is one page of the changes of the stream list after
// Since: the streams changed (each as it is now, with its status) and the
// names of those deleted, in the order of their latest change. NextSince,
// when set, is the Since of the next page. When the state cannot say what
// changed after the version asked (it is below the change log's floor, as
// after a restart from a snapshot, or before a node's latest change, which
// moved the status of every stream the node owns) the page is the first
// of a full listing instead: Since is 0 and Next the name cursor of the
// next page, as QueryStreamPage's.
type StreamChangePage struct {
	StreamPage
	Since     uint64
	NextSince uint64
	Deleted   []string
}

// Run implements Query. Its cost is the changes after Since, not the
// streams there are.
func (q QueryStreamChanges) Run(s *State) any {
	if !s.listed.covers(q.Since, s.Version) {
		return StreamChangePage{StreamPage: QueryStreamPage{Limit: q.Limit}.Run(s).(StreamPage)}
	}
	p := StreamChangePage{StreamPage: StreamPage{Streams: []StreamView{}, Version: s.Version}, Since: q.Since}
	p.NextSince = s.listed.since(q.Since, q.Limit, func(name string) {
		st := s.Streams[name]
		if st == nil {
			p.Deleted = append(p.Deleted, name)
			return
		}
		p.Streams = append(p.Streams, StreamView{Stream: st.Clone(), Status: s.Status(st)})
	})
	return p
}

// QueryPlacement reads what stream.create needs to place a stream
// (*State): a Partial view with every node and the load counts, and the
// stream itself if it exists. Its cost is the number of nodes, not of
// streams.
type QueryPlacement struct{ Stream string }

// Run implements Query.
func (q QueryPlacement) Run(s *State) any { return s.Partial([]string{q.Stream}) }

// QueryControl reads what one control round plans over (*State): a
// Partial view holding the streams Concerned returns. Losing, if set, is
// called under the read lock with the state to name the nodes the round
// will expire or mark left (it must be quick and must not keep the state);
// Extra names streams known to need a look from outside the state.
type QueryControl struct {
	Losing func(*State) []string
	Extra  []string
}

// Run implements Query.
func (q QueryControl) Run(s *State) any {
	var losing []string
	if q.Losing != nil {
		losing = q.Losing(s)
	}
	return s.Partial(s.Concerned(losing, q.Extra))
}

// QueryStreamPage reads one page of the streams in name order
// (StreamPage): up to Limit streams whose names sort after After.
type QueryStreamPage struct {
	After string
	Limit int
}

// StreamPage is one page of streams, each with its status, from one
// version of the state. Next is the name of the page's last stream when
// more follow, "" otherwise.
type StreamPage struct {
	Streams []StreamView
	Next    string
	Version uint64
}

// Run implements Query. It reads and copies only the page's streams (the
// index keeps the names in order).
func (q QueryStreamPage) Run(s *State) any {
	names, more := s.namesPage(q.After, q.Limit)
	p := StreamPage{Streams: []StreamView{}, Version: s.Version}
	if more {
		p.Next = names[len(names)-1]
	}
	for _, name := range names {
		if st := s.Streams[name]; st != nil { // always, while the index holds
			p.Streams = append(p.Streams, StreamView{Stream: st.Clone(), Status: s.Status(st)})
		}
	}
	return p
}
