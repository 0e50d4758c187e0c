package state

import (
	"maps"
	"slices"

	"github.com/brook-streams/brook/pkg/wire"
)

// index is what the state machine keeps beside the streams so that a
// create, a delete, a control round and a page of a listing cost in
// proportion to the streams they concern, not to all the streams there
// are: the load of each node (for placement), the streams each node owns
// (those a lost node fails over), the streams the controller must look
// at, and the names in order (for pages). Apply keeps it up to date for
// the one stream a command names; it is never saved (Load and Clone
// rebuild or copy it), so snapshots and the Raft log are unchanged.
type index struct {
	// owns and holds count, per node, the streams it owns and the copies
	// it holds; streams counts all streams. A node with none has no key.
	owns    map[string]int
	holds   map[string]int
	streams int
	// replOwns counts, per node, the streams it owns whose assignment
	// holds two copies or more (those a planned move can move: the owner
	// balancer's counts).
	replOwns map[string]int
	// ownedBy holds, per node, the names of the streams it owns.
	ownedBy map[string]map[string]struct{}
	// pending are the streams with a pending recovery (their workers run).
	pending map[string]struct{}
	// attention are the streams without a pending recovery whose own
	// state asks the controller to act whatever the nodes do: fewer
	// copies than their copy count, or a withdrawn recovery's fence
	// above their epoch.
	attention map[string]struct{}
	// names holds every stream's name in order, for the pages of
	// stream.list and of assignment pulls: a page starts with a binary
	// search and reads only its own names, where sorting every name cost
	// 1.5 ms a page at 10,000 streams (BenchmarkPages). Apply changes it
	// only when a stream comes or goes (setExists), at the cost of moving
	// the names after it (a memmove of 160 KB at 10,000 streams, a few
	// microseconds); update, which runs on every change of a stream,
	// leaves it alone. A sorted slice, not a tree: equal states have equal
	// indexes (the state's tests compare states whole).
	names []string
}

func newIndex() *index {
	return &index{owns: map[string]int{}, holds: map[string]int{}, replOwns: map[string]int{}, ownedBy: map[string]map[string]struct{}{},
		pending: map[string]struct{}{}, attention: map[string]struct{}{}}
}

// setExists records in names that stream exists or not, as Apply leaves it.
func (x *index) setExists(stream string, exists bool) {
	i, found := slices.BinarySearch(x.names, stream)
	switch {
	case exists && !found:
		x.names = slices.Insert(x.names, i, stream)
	case !exists && found:
		x.names = slices.Delete(x.names, i, i+1)
		if len(x.names) == 0 {
			x.names = nil // as a new index's: equal states, equal indexes
		}
	}
}

// namesAfter returns the stream names that sort after after, in order
// (the index's own slice: not to be changed).
func (x *index) namesAfter(after string) []string {
	i, found := slices.BinarySearch(x.names, after)
	if found {
		i++
	}
	return x.names[i:]
}

// needsAttention reports whether st's own state asks the controller to
// act (see index.attention).
func needsAttention(st *Stream) bool {
	// Copies() is the owner and the followers; counted without a copy.
	return st.Recovery == nil && (st.FencedEpoch > st.Assignment.Epoch || 1+len(st.Assignment.Followers) < st.Copies)
}

// count adds d (1 or -1) to key's count, dropping the key at zero.
func count(m map[string]int, key string, d int) {
	if m[key]+d == 0 {
		delete(m, key)
		return
	}
	m[key] += d
}

// add indexes st; remove unindexes it as it was when added.
func (x *index) add(st *Stream) { x.update(st, 1) }

func (x *index) remove(st *Stream) { x.update(st, -1) }

func (x *index) update(st *Stream, d int) {
	x.streams += d
	owner := st.Assignment.Owner
	count(x.owns, owner, d)
	count(x.holds, owner, d)
	if len(st.Assignment.Followers) > 0 {
		count(x.replOwns, owner, d)
	}
	for _, n := range st.Assignment.Followers {
		count(x.holds, n, d)
	}
	if d < 0 {
		delete(x.ownedBy[owner], st.Name)
		if len(x.ownedBy[owner]) == 0 {
			delete(x.ownedBy, owner)
		}
		delete(x.pending, st.Name)
		delete(x.attention, st.Name)
		return
	}
	if x.ownedBy[owner] == nil {
		x.ownedBy[owner] = map[string]struct{}{}
	}
	x.ownedBy[owner][st.Name] = struct{}{}
	if st.Recovery != nil {
		x.pending[st.Name] = struct{}{}
	}
	if needsAttention(st) {
		x.attention[st.Name] = struct{}{}
	}
}

// clone deep-copies the index.
func (x *index) clone() *index {
	c := &index{owns: maps.Clone(x.owns), holds: maps.Clone(x.holds), streams: x.streams, replOwns: maps.Clone(x.replOwns),
		ownedBy: make(map[string]map[string]struct{}, len(x.ownedBy)),
		pending: maps.Clone(x.pending), attention: maps.Clone(x.attention), names: slices.Clone(x.names)}
	for n, set := range x.ownedBy {
		c.ownedBy[n] = maps.Clone(set)
	}
	return c
}

// indexOf builds the index of streams.
func indexOf(streams map[string]*Stream) *index {
	x := newIndex()
	for name, st := range streams {
		x.add(st)
		x.names = append(x.names, name)
	}
	slices.Sort(x.names)
	return x
}

// ix returns the index, building it from the streams if the state has
// none yet (a State built by hand or just decoded).
func (s *State) ix() *index {
	if s.idx == nil {
		s.idx = indexOf(s.Streams)
	}
	return s.idx
}

// StreamCount is the number of streams (in a partial view, of the whole
// state it was taken from).
func (s *State) StreamCount() int { return s.ix().streams }

// Pending returns the names of the streams with a pending recovery, sorted.
func (s *State) Pending() []string { return slices.Sorted(maps.Keys(s.ix().pending)) }

// Concerned returns, sorted, the streams a control round must plan over:
// those with a pending recovery (their workers must run), those needing
// attention on their own (short of copies, fenced), the replicated streams
// owned by a node that is not live, the streams owned by the nodes in
// losing (the nodes the round itself is about to expire or mark left), and
// extra (known to need a look from outside the state, such as a copy a
// heartbeat reports sealed). No other stream can yield an action, so a plan
// over these equals a plan over all.
func (s *State) Concerned(losing, extra []string) []string {
	x := s.ix()
	set := maps.Clone(x.attention)
	maps.Copy(set, x.pending)
	owners := slices.Clone(losing)
	for n, node := range s.Nodes {
		if node.State != wire.NodeLive {
			owners = append(owners, n)
		}
	}
	for _, n := range owners {
		for name := range x.ownedBy[n] {
			if st := s.Streams[name]; st != nil && st.Copies > 1 {
				set[name] = struct{}{}
			}
		}
	}
	for _, name := range extra {
		if s.Streams[name] != nil {
			set[name] = struct{}{}
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// Partial returns a copy of the state with every node, the versions and
// ids, the load counts of the whole state (Load, StreamCount), and only the
// named streams (those that exist): what placement and a control round
// read, at a cost in proportion to the streams named rather than to all.
func (s *State) Partial(names []string) *State {
	c := &State{
		Version: s.Version, AssignVersion: s.AssignVersion, NextStreamID: s.NextStreamID, NextTransition: s.NextTransition,
		Nodes: make(map[string]*Node, len(s.Nodes)), Streams: make(map[string]*Stream, len(names)),
	}
	for k, n := range s.Nodes {
		nn := *n
		c.Nodes[k] = &nn
	}
	x := s.ix()
	cx := &index{owns: maps.Clone(x.owns), holds: maps.Clone(x.holds), streams: x.streams, replOwns: maps.Clone(x.replOwns),
		ownedBy: map[string]map[string]struct{}{}, pending: map[string]struct{}{}, attention: map[string]struct{}{}}
	for _, name := range names {
		st := s.Streams[name]
		if st == nil {
			continue
		}
		c.Streams[name] = st.Clone()
		cx.names = append(cx.names, name)
		// Only the sets: the counts are already the whole state's.
		one := newIndex()
		one.add(st)
		for n, set := range one.ownedBy {
			if cx.ownedBy[n] == nil {
				cx.ownedBy[n] = map[string]struct{}{}
			}
			maps.Copy(cx.ownedBy[n], set)
		}
		maps.Copy(cx.pending, one.pending)
		maps.Copy(cx.attention, one.attention)
	}
	slices.Sort(cx.names)
	cx.names = slices.Compact(cx.names)
	c.idx = cx
	return c
}
