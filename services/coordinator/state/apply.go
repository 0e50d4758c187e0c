package state

import (
	"fmt"
	"slices"
	"strings"

	"github.com/brook-streams/brook/pkg/policy"
	"github.com/brook-streams/brook/pkg/wire"
)

// MaxCopies bounds E.
const MaxCopies = 7

// The coordinators' default limits (--max-streams, --max-copies-per-host):
// twice issue 17's goal of ten thousand streams, and as many copies per
// host as three hosts need to hold every copy of that many streams of three
// copies. A create carries the limits its proposer was configured with.
const (
	DefaultMaxStreams       = 20000
	DefaultMaxCopiesPerHost = 20000
)

// Apply applies one command. It is deterministic and never fails: a command
// that is invalid or stale against the current state is refused with a
// coded Result and changes nothing, so every replica refuses it alike. The
// state machine re-checks what the proposer decided from an older read
// (that an owner is really lost, that a new follower is live), so a stale
// plan can at worst be refused, never applied.
func (s *State) Apply(c Command) Result {
	// Every command changes at most the stream it names: unindex it as it
	// is and index it as the command leaves it.
	x := s.ix()
	existed := false
	if st := s.Streams[c.Stream]; st != nil && c.Stream != "" {
		x.remove(st)
		existed = true
	}
	assignVersion, version := s.AssignVersion, s.Version
	var r Result
	switch c.Op {
	case OpNodeSeen:
		r = s.nodeSeen(c)
	case OpNodeExpire:
		r = s.nodeExpire(c)
	case OpNodeLeave:
		r = s.nodeLeave(c)
	case OpNodeDrainBegin:
		r = s.nodeDrainBegin(c)
	case OpNodeDrain:
		r = s.nodeDrain(c)
	case OpNodeUndrain:
		r = s.nodeUndrain(c)
	case OpStreamCreate:
		r = s.streamCreate(c)
	case OpStreamDelete:
		r = s.streamDelete(c)
	case OpStreamUpdate:
		r = s.streamUpdate(c)
	case OpAssignUpdate:
		r = s.assignUpdate(c)
	case OpRecoveryBegin:
		r = s.recoveryBegin(c)
	case OpRecoveryCommit:
		r = s.recoveryCommit(c)
	case OpRecoveryWait:
		r = s.recoveryWait(c)
	case OpRecoveryWithdraw:
		r = s.recoveryWithdraw(c)
	case OpRecoveryAccept:
		r = s.recoveryAccept(c)
	case OpAttentionClear:
		r = s.attentionClear(c)
	default:
		r = refuse(wire.CodeBadRequest, "unknown op %q", c.Op)
	}
	r.Version = s.Version
	if s.AssignVersion != assignVersion && c.Stream != "" && s.changes != nil {
		// Every change of a field hosts pull moves AssignVersion, and
		// only for the stream the command names.
		s.changes.record(s.AssignVersion, c.Stream, x.streams)
	}
	if s.Version != version && s.listed != nil {
		// A command that names a stream changes that stream alone; a
		// node's command (and any naming no stream) changes a node, and
		// with it the status of the streams the node owns.
		if c.Stream != "" {
			s.listed.record(s.Version, c.Stream, x.streams)
		}
		if c.Stream == "" || nodeOps[c.Op] {
			s.listed.nodes = s.Version
		}
	}
	st := s.Streams[c.Stream]
	if exists := st != nil && c.Stream != ""; exists != existed {
		x.setExists(c.Stream, exists)
	}
	if st != nil && c.Stream != "" {
		x.add(st)
		if r.StreamVersion == 0 {
			r.StreamVersion = st.Version
		}
		if r.StreamID == 0 {
			r.StreamID = st.ID
		}
	}
	return r
}

func refuse(code, format string, args ...any) Result {
	return Result{Code: code, Message: fmt.Sprintf(format, args...)}
}

// bump records one change and returns the new Version.
func (s *State) bump() uint64 {
	s.Version++
	return s.Version
}

// touch records a guarded change of st (and, if assign, of its assignment).
func (s *State) touch(st *Stream, assign bool) {
	v := s.bump()
	st.Version = v
	if assign {
		s.AssignVersion = v
	}
}

var changed = Result{Changed: true}

// nodeOps are the commands that change a node.
var nodeOps = map[string]bool{OpNodeSeen: true, OpNodeExpire: true, OpNodeLeave: true, OpNodeDrainBegin: true, OpNodeDrain: true,
	OpNodeUndrain: true}

func (s *State) nodeSeen(c Command) Result {
	if err := wire.ValidName("node", c.Node); err != nil {
		return refuse(wire.CodeBadRequest, "%v", err)
	}
	n := s.Nodes[c.Node]
	switch {
	case n == nil:
		s.Nodes[c.Node] = &Node{ID: c.Node, Incarnation: c.Incarnation, State: wire.NodeLive, SinceMS: c.AtMS}
	case n.Incarnation != c.Incarnation:
		// A restarted host is live again even if it was drained: a drain
		// lasts for the process it was asked of.
		n.Incarnation = c.Incarnation
		n.turn(wire.NodeLive, "", c.AtMS)
	case n.State == wire.NodeExpired || n.State == wire.NodeLeft:
		n.turn(wire.NodeLive, "", c.AtMS)
	default:
		return Result{}
	}
	s.bump()
	return changed
}

func (s *State) nodeExpire(c Command) Result {
	n := s.Nodes[c.Node]
	if n == nil {
		return refuse(wire.CodeNotFound, "node %s is unknown", c.Node)
	}
	if n.Incarnation != c.Incarnation {
		return refuse(wire.CodeConflict, "node %s runs incarnation %d, not %d", c.Node, n.Incarnation, c.Incarnation)
	}
	if n.State != wire.NodeLive && n.State != wire.NodeDraining {
		return Result{}
	}
	n.turn(wire.NodeExpired, c.Reason, c.AtMS)
	s.bump()
	return changed
}

func (s *State) nodeLeave(c Command) Result {
	n := s.Nodes[c.Node]
	if n == nil {
		return refuse(wire.CodeNotFound, "node %s is unknown", c.Node)
	}
	if c.Incarnation != 0 && n.Incarnation != c.Incarnation {
		return refuse(wire.CodeConflict, "node %s runs incarnation %d, not %d", c.Node, n.Incarnation, c.Incarnation)
	}
	if n.State == wire.NodeLeft {
		return Result{}
	}
	n.turn(wire.NodeLeft, "leave", c.AtMS)
	s.bump()
	return changed
}

// nodeDrainBegin records that a live node is being drained; a node in
// another state is left alone (a draining one takes nothing already).
func (s *State) nodeDrainBegin(c Command) Result {
	n := s.Nodes[c.Node]
	if n == nil {
		return refuse(wire.CodeNotFound, "node %s is unknown", c.Node)
	}
	if n.State != wire.NodeLive || n.DrainRequested {
		return Result{}
	}
	n.DrainRequested = true
	s.bump()
	return changed
}

func (s *State) nodeDrain(c Command) Result {
	if n := s.Nodes[c.Node]; c.IfRequested && n != nil && !n.DrainRequested {
		return Result{} // undrained or restarted since the drain began
	}
	// Already draining, or gone: its streams fail over anyway.
	return s.nodeTurn(c, wire.NodeLive, wire.NodeDraining, "drain")
}

// nodeUndrain ends a drain, or a drain requested: the node may take copies
// and ownership again.
func (s *State) nodeUndrain(c Command) Result {
	if n := s.Nodes[c.Node]; n != nil && n.State == wire.NodeLive && n.DrainRequested {
		n.DrainRequested = false
		s.bump()
		return changed
	}
	return s.nodeTurn(c, wire.NodeDraining, wire.NodeLive, "")
}

// nodeTurn moves c's node from state from to state to (with reason); a
// node in another state is left alone.
func (s *State) nodeTurn(c Command, from, to, reason string) Result {
	n := s.Nodes[c.Node]
	if n == nil {
		return refuse(wire.CodeNotFound, "node %s is unknown", c.Node)
	}
	if n.State != from {
		return Result{}
	}
	n.turn(to, reason, c.AtMS)
	s.bump()
	return changed
}

// turn moves n to state to, for reason, at atMS. A drain requested ends
// with any change of state: it is a request of a live node's drain, so a
// node that expires, leaves, restarts or is marked draining drops it, and
// one heard again with the same incarnation comes back live and undrained
// (node.drain again to drain it), not with a drain requested that no drain
// finishes.
func (n *Node) turn(to, reason string, atMS int64) {
	n.State, n.Reason, n.SinceMS, n.DrainRequested = to, reason, atMS, false
}

// checkMembers validates the copies of a new or changed assignment: distinct
// valid names, and every node in need (those without a copy before) live
// and not being drained.
func (s *State) checkMembers(copies []string, need func(string) bool) *Result {
	seen := map[string]bool{}
	for _, n := range copies {
		if err := wire.ValidName("node", n); err != nil {
			r := refuse(wire.CodeBadRequest, "%v", err)
			return &r
		}
		if seen[n] {
			r := refuse(wire.CodeBadRequest, "node %s holds two copies", n)
			return &r
		}
		seen[n] = true
		if need(n) && s.NodeState(n) != wire.NodeLive {
			r := refuse(wire.CodeConflict, "node %s is not live (state %q)", n, s.NodeState(n))
			return &r
		}
		if need(n) && s.DrainRequested(n) {
			r := refuse(wire.CodeConflict, "node %s is being drained: it takes no new copy", n)
			return &r
		}
	}
	return nil
}

func (s *State) streamCreate(c Command) Result {
	if err := wire.ValidName("stream", c.Stream); err != nil {
		return refuse(wire.CodeBadRequest, "%v", err)
	}
	if c.Copies < 1 || c.Copies > MaxCopies {
		return refuse(wire.CodeBadRequest, "copies %d: want 1..%d", c.Copies, MaxCopies)
	}
	named, err := policy.Normalize(c.Policy)
	if err != nil {
		return refuse(wire.CodeBadRequest, "%v", err)
	}
	if r := checkMinCopies(c.MinCopies, c.Copies); r != nil {
		return *r
	}
	if s.Streams[c.Stream] != nil {
		return refuse(wire.CodeExists, "stream %s exists", c.Stream)
	}
	if x := s.ix(); c.MaxStreams > 0 && x.streams >= c.MaxStreams {
		return refuse(wire.CodeStreamLimit, "the cluster holds %d streams, its maximum (--max-streams %d)", x.streams, c.MaxStreams)
	}
	if c.Assignment == nil {
		return refuse(wire.CodeBadRequest, "create of %s carries no assignment", c.Stream)
	}
	a := CloneAssignment(*c.Assignment)
	if len(a.Copies()) != c.Copies {
		return refuse(wire.CodeBadRequest, "assignment has %d copies, want %d", len(a.Copies()), c.Copies)
	}
	if r := s.checkMembers(a.Copies(), func(string) bool { return true }); r != nil {
		return *r
	}
	for _, n := range a.Copies() {
		if held := s.ix().holds[n]; c.MaxCopiesPerHost > 0 && held >= c.MaxCopiesPerHost {
			return refuse(wire.CodeHostLimit, "node %s holds %d copies, its maximum (--max-copies-per-host %d)", n, held, c.MaxCopiesPerHost)
		}
	}
	s.NextStreamID++
	a.Stream, a.StreamID, a.Epoch = c.Stream, s.NextStreamID, 1
	st := &Stream{
		Name: c.Stream, ID: a.StreamID, Copies: c.Copies, Policy: named, Retention: c.Retention, MinCopies: c.MinCopies,
		Assignment: a, Starts: []wire.HistoryStart{}, CreatedMS: c.AtMS,
	}
	s.Streams[c.Stream] = st
	s.touch(st, true)
	return Result{Changed: true, StreamID: st.ID}
}

// checkMinCopies validates a floor of copies for a stream of e copies: 1 to
// e, or 0 for none.
func checkMinCopies(minCopies, e int) *Result {
	if minCopies < 0 || minCopies > e {
		r := refuse(wire.CodeBadRequest, "min_copies %d: want 1..%d (the stream's copies), or 0 for no floor", minCopies, e)
		return &r
	}
	return nil
}

// streamUpdate is the operator's change of a stream's policy, retention and
// floor. Retention and floor are the stream's own (hosts take them with the
// assignment). A policy that needs no more copies to confirm under the
// current assignment (W' <= W) is stamped on it at once: a record confirmed
// on W copies meets any E - W' + 1 copies. One that needs more records a
// pending recovery (reason "policy") whose proposal is the assignment at
// the next epoch under the new stamp, so the stream moves to it only
// through a seal and a promotion, as for an owner change.
func (s *State) streamUpdate(c Command) Result {
	st := s.Streams[c.Stream]
	if st == nil {
		return refuse(wire.CodeNotFound, "stream %s does not exist", c.Stream)
	}
	u := c.Update
	if u == nil {
		return refuse(wire.CodeBadRequest, "update of %s carries no change", c.Stream)
	}
	named := ""
	if strings.TrimSpace(u.Policy) != "" {
		var err error
		if named, err = policy.Normalize(u.Policy); err != nil {
			return refuse(wire.CodeBadRequest, "%v", err)
		}
	}
	if u.Retention != nil && u.Retention.MaxAgeMS < 0 {
		return refuse(wire.CodeBadRequest, "retention max_age_ms %d is negative", u.Retention.MaxAgeMS)
	}
	if u.MinCopies != nil {
		if r := checkMinCopies(*u.MinCopies, st.Copies); r != nil {
			return *r
		}
	}
	cur := st.Assignment
	stamp := named != "" && named != cur.Policy
	// Any policy change waits for a pending recovery to end: the
	// recovery commits the policy it was planned with, and st.Policy
	// must not name another one meanwhile.
	if named != "" && (stamp || named != st.Policy) && st.Recovery != nil {
		return refuse(wire.CodeConflict, "stream %s has a pending recovery (transition %d); change its policy once it serves again",
			c.Stream, st.Recovery.Transition)
	}
	differs := (named != "" && named != st.Policy) || stamp ||
		(u.Retention != nil && *u.Retention != st.Retention) || (u.MinCopies != nil && *u.MinCopies != st.MinCopies)
	if !differs {
		return Result{}
	}
	e := len(cur.Copies())
	// A change that needs more copies to confirm goes through a recovery
	// that seals R copies of the old assignment; with fewer live it would
	// wait until an operator accepts a loss. Refuse it instead.
	viaRecovery := stamp && policy.StampW(named, e) > policy.StampW(cur.Policy, e)
	if r, live := policy.StampR(cur.Policy, e), s.liveMembers(cur); viaRecovery && live < r {
		return refuse(wire.CodeConflict, "stream %s: the policy change goes through a recovery that seals %d copies, and only %d of %v are live",
			c.Stream, r, live, cur.Copies())
	}
	if u.Retention != nil {
		st.Retention = *u.Retention
	}
	if u.MinCopies != nil {
		st.MinCopies = *u.MinCopies
	}
	if named != "" {
		st.Policy = named
	}
	if !stamp {
		// The assignment stays; hosts pull the new retention and floor.
		s.AssignVersion = s.bump()
		return changed
	}
	if !viaRecovery {
		st.Assignment.Policy = named
		st.TraceParent = ""
		s.touch(st, true)
		return changed
	}
	p := CloneAssignment(cur)
	p.Policy = named
	tr := s.recordRecovery(st, p, ReasonPolicy, c.TraceID, c.TraceParent, c.AtMS)
	// The stream version moves (a plan read before it is refused) and so
	// does the assignment version, so hosts take the new retention and
	// floor without waiting for the recovery.
	s.touch(st, true)
	return Result{Changed: true, Transition: tr}
}

func (s *State) streamDelete(c Command) Result {
	if s.Streams[c.Stream] == nil {
		return refuse(wire.CodeNotFound, "stream %s does not exist", c.Stream)
	}
	// The history starts go with the stream, so a recreated stream does not
	// inherit them.
	delete(s.Streams, c.Stream)
	v := s.bump()
	s.AssignVersion = v
	return changed
}

// guard returns the stream named by c if c read its current version.
func (s *State) guard(c Command) (*Stream, *Result) {
	st := s.Streams[c.Stream]
	if st == nil {
		r := refuse(wire.CodeNotFound, "stream %s does not exist", c.Stream)
		return nil, &r
	}
	if c.Version != st.Version {
		r := refuse(wire.CodeConflict, "stream %s is at version %d, the write read %d", c.Stream, st.Version, c.Version)
		return nil, &r
	}
	return st, nil
}

// setAssignment installs a and keeps ShortSinceMS: the time the stream fell
// below its copy count, kept while it stays short.
func (st *Stream) setAssignment(a wire.Assignment, atMS int64) {
	st.Assignment = CloneAssignment(a)
	if a.Epoch >= st.FencedEpoch {
		// The assignment reached the fence: copies it includes release
		// their seals there.
		st.FencedEpoch = 0
	}
	switch {
	case len(a.Copies()) >= st.Copies:
		st.ShortSinceMS = 0
	case st.ShortSinceMS == 0:
		st.ShortSinceMS = atMS
	}
}

func (s *State) assignUpdate(c Command) Result {
	st, bad := s.guard(c)
	if bad != nil {
		return *bad
	}
	if st.Recovery != nil {
		return refuse(wire.CodeConflict, "stream %s has a pending recovery", c.Stream)
	}
	if c.Assignment == nil {
		return refuse(wire.CodeBadRequest, "update of %s carries no assignment", c.Stream)
	}
	a, cur := *c.Assignment, st.Assignment
	if a.StreamID != st.ID || a.Stream != st.Name {
		return refuse(wire.CodeConflict, "assignment is for %s/%d, the stream is %s/%d", a.Stream, a.StreamID, st.Name, st.ID)
	}
	if a.Epoch != cur.Epoch || a.Owner != cur.Owner {
		return refuse(wire.CodeBadRequest, "a direct update must keep owner %s and epoch %d", cur.Owner, cur.Epoch)
	}
	for _, f := range cur.Followers {
		if !slices.Contains(a.Followers, f) {
			return refuse(wire.CodeBadRequest, "a direct update must keep follower %s", f)
		}
	}
	if len(a.Copies()) > MaxCopies {
		return refuse(wire.CodeBadRequest, "%d copies, more than %d", len(a.Copies()), MaxCopies)
	}
	if r := s.checkMembers(a.Copies(), func(n string) bool { return !cur.Includes(n) }); r != nil {
		return *r
	}
	// A record confirmed on W old copies meets any E'-W'+1 new copies only
	// when W' <= W; otherwise the change must go through recovery.
	if wNew, wOld := policy.StampW(a.Policy, len(a.Copies())), policy.StampW(cur.Policy, len(cur.Copies())); wNew > wOld {
		return refuse(wire.CodeBadRequest, "the change needs W'=%d > W=%d copies to confirm; it must go through recovery", wNew, wOld)
	}
	st.setAssignment(a, c.AtMS)
	st.TraceParent = ""
	s.touch(st, true)
	return changed
}

// ownerLost reports whether the owner of a is not live in the state.
func (s *State) ownerLost(a wire.Assignment) bool {
	return s.NodeState(a.Owner) != wire.NodeLive
}

func (s *State) recoveryBegin(c Command) Result {
	st, bad := s.guard(c)
	if bad != nil {
		return *bad
	}
	if st.Recovery != nil {
		return refuse(wire.CodeConflict, "stream %s already has pending recovery %d", c.Stream, st.Recovery.Transition)
	}
	if c.Proposal == nil {
		return refuse(wire.CodeBadRequest, "recovery of %s carries no proposal", c.Stream)
	}
	// Only "grow" (adding copies that need more to confirm) and "sealed"
	// (copies fenced past the assignment's epoch) may seal a stream whose
	// owner is live; every other reason is an owner loss, and the state
	// machine checks that it still holds. A sealed copy is known from
	// heartbeats, which are not replicated, so that reason rests on the
	// version guard alone; an extra recovery costs a brief pause, never a
	// record.
	if c.Reason == ReasonMove {
		if r := s.checkPlannedMove(st, *c.Proposal); r != nil {
			return *r
		}
	} else if c.Reason != ReasonGrow && c.Reason != ReasonSealed && !s.ownerLost(st.Assignment) {
		return refuse(wire.CodeConflict, "owner %s of %s is live", st.Assignment.Owner, c.Stream)
	}
	tr := s.recordRecovery(st, *c.Proposal, c.Reason, c.TraceID, c.TraceParent, c.AtMS)
	if c.Reason == ReasonMove && c.HandoffMS > 0 {
		st.Recovery.HandoffMS = c.HandoffMS
	}
	s.touch(st, false)
	return Result{Changed: true, Transition: tr}
}

// recordRecovery sets a pending recovery of st from its assignment to
// proposal (at the next epoch) and returns its transition; the caller
// bumps the versions.
func (s *State) recordRecovery(st *Stream, proposal wire.Assignment, reason, traceID, traceParent string, atMS int64) uint64 {
	s.NextTransition++
	p := CloneAssignment(proposal)
	p.Stream, p.StreamID, p.Epoch = st.Name, st.ID, st.Assignment.Epoch+1
	st.Recovery = &wire.PendingRecovery{
		Stream:      st.Name,
		Transition:  s.NextTransition,
		Old:         CloneAssignment(st.Assignment),
		Proposal:    p,
		Reason:      reason,
		Since:       atMS,
		TraceID:     traceID,
		TraceParent: traceParent,
	}
	if traceID != "" {
		st.LastTraceID = traceID
	}
	return s.NextTransition
}

// ReasonGrow is the pending-recovery reason of a copy-count increase that
// needs more copies to confirm (W' > W) while the owner is live.
const ReasonGrow = "grow"

// ReasonPolicy is the pending-recovery reason of a stream.update to a
// policy that needs more copies to confirm (W' > W) than the current one.
const ReasonPolicy = "policy"

// ReasonMove is the pending-recovery reason of a planned owner move
// (stream.move, node.drain, the balancer): the owner is live and handed
// its intake over, and the worker promotes the proposal's owner if its
// seal answer is among the furthest (checkPlannedMove).
const ReasonMove = "move"

// checkPlannedMove refuses a planned move whose proposal does not promote
// a live follower, not being drained, of the current assignment while its
// owner is live.
func (s *State) checkPlannedMove(st *Stream, p wire.Assignment) *Result {
	a := st.Assignment
	var r Result
	switch {
	case s.ownerLost(a):
		r = refuse(wire.CodeConflict, "owner %s of %s is not live: a recovery, not a move", a.Owner, st.Name)
	case p.Owner == a.Owner || !slices.Contains(a.Followers, p.Owner):
		r = refuse(wire.CodeBadRequest, "node %s is not a follower of %s", p.Owner, st.Name)
	case s.NodeState(p.Owner) != wire.NodeLive:
		r = refuse(wire.CodeBadRequest, "node %s is not live (state %q)", p.Owner, s.NodeState(p.Owner))
	case s.DrainRequested(p.Owner):
		// Whichever coordinator planned the move, from whatever state it
		// read: no ownership moves to a node being drained.
		r = refuse(wire.CodeConflict, "node %s is being drained: no move targets it", p.Owner)
	default:
		return nil
	}
	return &r
}

// ReasonSealed is the pending-recovery reason of a stream whose copies are
// sealed past its assignment's epoch with no recovery pending (a withdrawn
// recovery's seals): its owner may be live but cannot confirm, and only an
// assignment at the fence epoch or later releases the seals.
const ReasonSealed = "sealed"

// checkMove validates an ownership move of st to a (recovery or accepted
// loss): the stream's id, the next epoch, an owner that held a copy of old,
// and new members that are live.
func (s *State) checkMove(st *Stream, old, a wire.Assignment) *Result {
	if a.StreamID != st.ID || a.Stream != st.Name {
		r := refuse(wire.CodeConflict, "assignment is for %s/%d, the stream is %s/%d", a.Stream, a.StreamID, st.Name, st.ID)
		return &r
	}
	if a.Epoch != old.Epoch+1 {
		r := refuse(wire.CodeBadRequest, "new epoch %d, want %d", a.Epoch, old.Epoch+1)
		return &r
	}
	if !old.Includes(a.Owner) {
		r := refuse(wire.CodeBadRequest, "new owner %s held no copy at epoch %d", a.Owner, old.Epoch)
		return &r
	}
	if len(a.Copies()) > MaxCopies {
		r := refuse(wire.CodeBadRequest, "%d copies, more than %d", len(a.Copies()), MaxCopies)
		return &r
	}
	// New members need only be known: placement chose them live, and one
	// that died since holds nothing yet, so refusing the commit for it
	// would only stall the recovery.
	if r := s.checkMembers(a.Copies(), func(string) bool { return false }); r != nil {
		return r
	}
	for _, n := range a.Copies() {
		if s.Nodes[n] == nil {
			r := refuse(wire.CodeBadRequest, "node %s is unknown", n)
			return &r
		}
	}
	return nil
}

func (s *State) recoveryCommit(c Command) Result {
	st, bad := s.guard(c)
	if bad != nil {
		return *bad
	}
	pr := st.Recovery
	if pr == nil || pr.Transition != c.Transition {
		return refuse(wire.CodeConflict, "stream %s has no pending recovery %d", c.Stream, c.Transition)
	}
	if c.Assignment == nil || c.Start == nil {
		return refuse(wire.CodeBadRequest, "commit of %s carries no assignment or start", c.Stream)
	}
	if r := s.checkMove(st, pr.Old, *c.Assignment); r != nil {
		return *r
	}
	if c.Start.Epoch != c.Assignment.Epoch || c.Start.Node != c.Assignment.Owner {
		return refuse(wire.CodeBadRequest, "start %+v does not match the new owner %s at epoch %d", *c.Start, c.Assignment.Owner, c.Assignment.Epoch)
	}
	st.setAssignment(*c.Assignment, c.AtMS)
	st.Recovery = nil
	st.Starts = append(st.Starts, *c.Start)
	st.TraceParent = c.TraceParent
	if c.TraceID != "" {
		st.LastTraceID = c.TraceID
	}
	s.touch(st, true)
	return changed
}

func (s *State) recoveryWait(c Command) Result {
	st := s.Streams[c.Stream]
	if st == nil || st.Recovery == nil || st.Recovery.Transition != c.Transition {
		return refuse(wire.CodeNotFound, "stream %s has no pending recovery %d", c.Stream, c.Transition)
	}
	if c.Wait == nil {
		return refuse(wire.CodeBadRequest, "wait of %s carries no wait", c.Stream)
	}
	w := ClonePending(&wire.PendingRecovery{Wait: c.Wait}).Wait
	st.Recovery.Wait = w
	// Display only: the stream's guard version stays, so the wait never
	// makes the worker's own commit conflict.
	s.bump()
	return changed
}

func (s *State) recoveryWithdraw(c Command) Result {
	st := s.Streams[c.Stream]
	if st == nil {
		return refuse(wire.CodeNotFound, "stream %s does not exist", c.Stream)
	}
	if st.Recovery == nil {
		return refuse(wire.CodeNotFound, "stream %s has no pending recovery", c.Stream)
	}
	// Its worker may have sealed copies at the fence: remember it until an
	// assignment reaches it (see FencedEpoch).
	st.FencedEpoch = max(st.FencedEpoch, st.Recovery.Old.Epoch+1)
	st.Recovery = nil
	// Bumping the stream version makes an in-flight commit of the withdrawn
	// transition conflict.
	s.touch(st, false)
	return changed
}

func (s *State) recoveryAccept(c Command) Result {
	st, bad := s.guard(c)
	if bad != nil {
		return *bad
	}
	if c.Assignment == nil {
		return refuse(wire.CodeBadRequest, "accept-loss of %s carries no assignment", c.Stream)
	}
	old := st.Assignment
	if st.Recovery != nil {
		old = st.Recovery.Old
	}
	if r := s.checkMove(st, old, *c.Assignment); r != nil {
		return *r
	}
	if c.Start != nil && (c.Start.Epoch != c.Assignment.Epoch || c.Start.Node != c.Assignment.Owner) {
		return refuse(wire.CodeBadRequest, "start %+v does not match the new owner %s at epoch %d", *c.Start, c.Assignment.Owner, c.Assignment.Epoch)
	}
	st.setAssignment(*c.Assignment, c.AtMS)
	st.Recovery = nil
	if c.Start != nil {
		st.Starts = append(st.Starts, *c.Start)
	}
	if c.AcceptedLoss != nil {
		al := *c.AcceptedLoss
		st.AcceptedLoss = &al
	}
	st.TraceParent = c.TraceParent
	if c.TraceID != "" {
		st.LastTraceID = c.TraceID
	}
	s.touch(st, true)
	return changed
}

func (s *State) attentionClear(c Command) Result {
	st := s.Streams[c.Stream]
	if st == nil {
		return refuse(wire.CodeNotFound, "stream %s does not exist", c.Stream)
	}
	if st.AcceptedLoss == nil {
		return refuse(wire.CodeNotFound, "stream %s has no accepted-loss warning", c.Stream)
	}
	st.AcceptedLoss = nil
	s.bump()
	return changed
}

// liveMembers counts the copies of a whose nodes are live or draining (a
// draining host still answers seals).
func (s *State) liveMembers(a wire.Assignment) int {
	n := 0
	for _, id := range a.Copies() {
		if node := s.Nodes[id]; node != nil && (node.State == wire.NodeLive || node.State == wire.NodeDraining) {
			n++
		}
	}
	return n
}
