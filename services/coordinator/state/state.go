// Package state is the coordinator's replicated state: the stream hosts
// (nodes) and their liveness state, the streams with their assignments,
// pending recoveries, history starts and accepted-loss warnings, and the
// versions that guard writes.
//
// The state changes only through Apply, which is deterministic: it reads
// nothing but the state and the command (times travel in the command), so
// every Raft replica that applies the same log reaches the same state. A
// guarded command that lost to a newer change is rejected as a Result with a
// code, never as an error, so a stale proposal cannot break the state machine.
//
// This package knows nothing of Raft; package raftstore runs it inside a
// Dragonboat shard.
//
// Beside the streams the state keeps an index (index.go) that Apply updates
// for the one stream each command names, so that creates, deletes and
// control rounds cost in proportion to the streams they concern; Partial
// views and the queries built on them copy only those streams.
//
// # Locks and goroutines
//
// State has no lock and starts no goroutine. raftstore's state machine (a
// Dragonboat concurrent state machine) runs Apply under its own mutex
// (machine.mu) and every Query's Run under that mutex's read lock, several
// at once; a snapshot is saved from a Clone taken under the read lock, so
// Apply goes on while it is encoded. A query must not write, which is why the
// index is built by New, Load, Clone and Partial and never on a query's
// first use, and why QueryControl's Losing callback must only read.
package state

import (
	"maps"
	"slices"

	"github.com/brook-streams/brook/pkg/wire"
)

// State is the whole replicated state.
type State struct {
	// Version counts applied changes; every change bumps it by one.
	Version uint64 `json:"version"`
	// AssignVersion is the Version of the latest change to any assignment
	// (or to the set of streams); hosts pull when it passes what they applied.
	AssignVersion uint64 `json:"assign_version"`
	// NextStreamID and NextTransition are the last ids handed out.
	NextStreamID   uint64             `json:"next_stream_id"`
	NextTransition uint64             `json:"next_transition"`
	Nodes          map[string]*Node   `json:"nodes"`
	Streams        map[string]*Stream `json:"streams"`
	// idx indexes the streams (see index); Apply keeps it, snapshots do
	// not hold it.
	idx *index
	// changes records which streams each change concerned, for pulls of
	// changes (changeLog); Apply keeps it, snapshots do not hold it, Clone
	// copies it and Partial views have none.
	changes *changeLog
	// listed records, the same way, every change of what stream.list
	// shows of a stream (any change of the stream, a recovery's wait
	// included) and, in its nodes mark, the latest change of a node, for
	// listings of changes (QueryStreamChanges).
	listed *changeLog
}

// Node is one stream host.
type Node struct {
	ID          string `json:"id"`
	Incarnation uint64 `json:"incarnation"`
	// State is one of wire.NodeLive, NodeExpired, NodeDraining, NodeLeft.
	State string `json:"state"`
	// Reason says how the node stopped being live: "ttl", "advisory",
	// "leave" or "drain"; empty while live.
	Reason string `json:"reason,omitempty"`
	// SinceMS is when State last changed (proposer's clock).
	SinceMS int64 `json:"since_ms"`
	// DrainRequested is set on a live node by node.drain.begin while
	// node.drain moves its streams away: no copy and no ownership moves
	// to it, on any coordinator. Cleared once it is draining, by
	// node.undrain, by a new incarnation, and when the node expires or
	// leaves (heard again, it is live and not drained).
	DrainRequested bool `json:"drain_requested,omitempty"`
}

// Stream is one stream and everything the coordinator keeps about it.
type Stream struct {
	Name string `json:"name"`
	ID   uint64 `json:"id"`
	// Copies is E, the number of copies the stream should have.
	Copies int `json:"copies"`
	// Policy is the confirm policy the create named, or "" for the
	// cluster's default (which the controller stamps on assignments).
	Policy    string         `json:"policy,omitempty"`
	Retention wire.Retention `json:"retention"`
	// MinCopies is the stream's floor (0: none, as in every snapshot
	// written before it existed): while the assignment holds fewer copies
	// the owner refuses publishes (wire.BelowFloor).
	MinCopies  int                   `json:"min_copies,omitempty"`
	Assignment wire.Assignment       `json:"assignment"`
	Recovery   *wire.PendingRecovery `json:"recovery,omitempty"`
	// Starts are the history starts, oldest first; never nil.
	Starts       []wire.HistoryStart `json:"starts"`
	AcceptedLoss *wire.AcceptedLoss  `json:"accepted_loss,omitempty"`
	// LastTraceID is the trace of the stream's latest failover.
	LastTraceID string `json:"last_trace_id,omitempty"`
	// TraceParent is the traceparent of the commit that made the current
	// assignment, handed to hosts so their apply spans link to it.
	TraceParent string `json:"traceparent,omitempty"`
	// FencedEpoch is the fence epoch of the latest withdrawn recovery while
	// no assignment has reached it (0 otherwise). Its worker may have
	// sealed copies there, and a sealed copy accepts nothing at an older
	// epoch, so the controller records a new recovery (reason "sealed")
	// even if the owner is live again; the recovery that moves the stream
	// to that epoch releases the seals and clears it.
	FencedEpoch uint64 `json:"fenced_epoch,omitempty"`
	// ShortSinceMS is when the assignment last fell below Copies copies;
	// zero while it has them all. Placement replaces a missing copy once it
	// has been short for the replace-after period.
	ShortSinceMS int64 `json:"short_since_ms,omitempty"`
	// Version is the state Version of the stream's latest guarded change;
	// guarded writes name the Version they read.
	Version   uint64 `json:"version"`
	CreatedMS int64  `json:"created_ms"`
}

// UnderReplicated is how the stream stands while its assignment holds
// fewer copies than Copies (wire.Assignment.UnderReplicated), or nil.
func (st *Stream) UnderReplicated() *wire.UnderReplication {
	return st.Assignment.UnderReplicated(st.Copies, st.MinCopies, st.ShortSinceMS)
}

// New returns an empty state.
func New() *State {
	return &State{Nodes: map[string]*Node{}, Streams: map[string]*Stream{}, idx: newIndex(), changes: newChangeLog(0), listed: newChangeLog(0)}
}

// Clone returns a deep copy, so a reader can use it while the state machine
// moves on.
func (s *State) Clone() *State {
	c := s.cloneStreams()
	c.changes, c.listed = s.changes.clone(), s.listed.clone()
	return c
}

// cloneStreams is Clone without the change log.
func (s *State) cloneStreams() *State {
	c := s.SnapshotCopy()
	c.idx = s.ix().clone()
	return c
}

// Clone returns a deep copy of the stream.
func (st *Stream) Clone() *Stream {
	c := *st
	c.Assignment = CloneAssignment(st.Assignment)
	c.Recovery = ClonePending(st.Recovery)
	c.Starts = append([]wire.HistoryStart{}, st.Starts...)
	if st.AcceptedLoss != nil {
		al := *st.AcceptedLoss
		c.AcceptedLoss = &al
	}
	return &c
}

// CloneAssignment deep-copies an assignment; Followers is never nil in the
// copy, so it encodes as [] rather than null.
func CloneAssignment(a wire.Assignment) wire.Assignment {
	a.Followers = append([]string{}, a.Followers...)
	return a
}

// ClonePending deep-copies a pending recovery (nil stays nil).
func ClonePending(pr *wire.PendingRecovery) *wire.PendingRecovery {
	if pr == nil {
		return nil
	}
	c := *pr
	c.Old = CloneAssignment(pr.Old)
	c.Proposal = CloneAssignment(pr.Proposal)
	if pr.Wait != nil {
		w := *pr.Wait
		w.Unanswered = slices.Clone(pr.Wait.Unanswered)
		if pr.Wait.Start != nil {
			s := *pr.Wait.Start
			w.Start = &s
		}
		c.Wait = &w
	}
	return &c
}

// NodeState returns the state of node, or "" if the node is unknown.
func (s *State) NodeState(node string) string {
	if n := s.Nodes[node]; n != nil {
		return n.State
	}
	return ""
}

// DrainRequested reports whether node is live with its drain requested
// (node.drain.begin): it takes no copy and no ownership.
func (s *State) DrainRequested(node string) bool {
	n := s.Nodes[node]
	return n != nil && n.State == wire.NodeLive && n.DrainRequested
}

// Leaving returns the nodes that are draining, left or live with their
// drain requested: recovery prefers not to promote them, nor a planned
// move's target among them.
func (s *State) Leaving() map[string]bool {
	m := map[string]bool{}
	for id, n := range s.Nodes {
		if n.State == wire.NodeDraining || n.State == wire.NodeLeft || s.DrainRequested(id) {
			m[id] = true
		}
	}
	return m
}

// Load counts, per node, the streams it owns and the copies it holds
// (nodes with none are absent). It reads the index: its cost is the
// number of nodes, not of streams.
func (s *State) Load() (owned, copies map[string]int) {
	x := s.ix()
	return maps.Clone(x.owns), maps.Clone(x.holds)
}

// SortedStreams returns the stream names in order, for deterministic walks.
func (s *State) SortedStreams() []string { return slices.Clone(s.ix().names) }

// namesPage returns, in order, the names of the streams that sort after
// after: at most limit of them (0: no limit), and whether more follow. It
// copies only the names it returns, from the index.
func (s *State) namesPage(after string, limit int) (names []string, more bool) {
	rest := s.ix().namesAfter(after)
	if limit > 0 && len(rest) > limit {
		return slices.Clone(rest[:limit]), true
	}
	return slices.Clone(rest), false
}

// SortedNodes returns the node ids in order.
func (s *State) SortedNodes() []string {
	ids := make([]string, 0, len(s.Nodes))
	for id := range s.Nodes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// LatestStart returns the start with the highest epoch, or nil.
func LatestStart(starts []wire.HistoryStart) *wire.HistoryStart {
	var best *wire.HistoryStart
	for i := range starts {
		if best == nil || starts[i].Epoch >= best.Epoch {
			best = &starts[i]
		}
	}
	if best == nil {
		return nil
	}
	c := *best
	return &c
}
