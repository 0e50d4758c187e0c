// Package controller holds the coordinator leader's decisions as pure
// functions of a state snapshot plus this coordinator's liveness view:
// Plan (node expiry, eager failover on leave and drain, pending recoveries,
// follower re-adds and replacements) and Place (where a new stream's copies
// go). Nothing here talks to Raft or NATS; the coordinator's control loop
// executes the actions as guarded proposals, and the state machine
// re-checks each one, so a plan made from a stale snapshot is refused, not
// applied.
package controller

import (
	"cmp"
	"maps"
	"slices"
	"time"

	"github.com/brook-streams/brook/pkg/policy"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/liveness"
	"github.com/brook-streams/brook/services/coordinator/state"
)

// Action kinds.
const (
	// ActRegister registers a node, its new incarnation, or its return.
	ActRegister = "register"
	// ActLeave marks a node that announced it is leaving as left.
	ActLeave = "leave"
	// ActExpire marks a silent node expired (Reason "ttl" or "advisory").
	ActExpire = "expire"
	// ActRecover records a pending recovery (Assignment is the proposal).
	ActRecover = "recover"
	// ActUpdate commits a follower addition directly (W' <= W).
	ActUpdate = "update"
)

// DefaultReplaceAfter is how long a stream may miss a copy before a fresh
// node replaces it, unless configured (the coordinator's --replace-after
// and server.Options.ReplaceAfter take it).
const DefaultReplaceAfter = 30 * time.Second

// Detection reasons for ActExpire and ActRecover.Detected.
const (
	DetectTTL      = "ttl"
	DetectAdvisory = "advisory"
	DetectLeave    = "leave"
	DetectDrain    = "drain"
	// For a "sealed" recovery: the state remembers a withdrawn
	// recovery's fence, or a copy's heartbeat says it is sealed past the
	// assignment's epoch.
	DetectWithdrawnFence = "withdrawn_fence"
	DetectSealedCopy     = "sealed_copy"
)

// Action is one change the controller wants. Which fields matter depends on
// Kind.
type Action struct {
	Kind        string
	Node        string
	Incarnation uint64
	// Reason: for ActExpire how it was detected; for ActRecover the pending
	// recovery's reason (expired, left, drain, grow); for ActUpdate
	// "readd" or "replace".
	Reason string
	Stream string
	// Version is the stream version the action was planned from.
	Version uint64
	// Assignment is the proposal (ActRecover) or the new assignment (ActUpdate).
	Assignment wire.Assignment
	// Detected and LostSinceMS say, for ActRecover, how and when the owner
	// was lost (for the failover's "detect" span).
	Detected    string
	LostSinceMS int64
}

// Params are the controller's settings.
type Params struct {
	TTL             time.Duration
	DisconnectGrace time.Duration
	// ReplaceAfter is how long a stream may miss a copy before a fresh
	// node replaces it (DefaultReplaceAfter unless configured).
	ReplaceAfter time.Duration
	// DefaultPolicy is stamped on assignments of streams whose create named
	// no policy.
	DefaultPolicy string
}

// Liveness is the leader's view of the hosts plus what bounds it: when it
// began leading and when it could last hear the hosts.
type Liveness struct {
	LeaderSince time.Time
	// HeardSince is when this coordinator's own NATS connections last
	// came back after a disconnect, or its process after a stall (zero if
	// neither happened): it heard nothing meanwhile, so silence counts
	// from then at the earliest, and disconnect advisories received before
	// it do not count.
	HeardSince time.Time
	// Deaf says this coordinator cannot hear the hosts now (its NATS
	// connection is down or its reconnect not yet noted): it expires
	// nobody, since the silence it sees is its own.
	Deaf  bool
	Nodes map[string]liveness.Seen
	// Probing are the nodes whose TTL expiry waits for the answer to a
	// liveness probe (see ExpireAfterProbe): no TTL expiry is planned for
	// them meanwhile, so neither are the failovers that would follow it.
	// A disconnect advisory or a leave still counts.
	Probing map[string]bool
	// Grace is the disconnect grace this round gives a host whose
	// connection closed, when longer than Params.DisconnectGrace
	// (AdvisoryGrace: it stretches with how late beats arrive now).
	Grace time.Duration
}

// Stamp is the policy stamp for st's assignments: what its create named, or
// the cluster default.
func (p Params) Stamp(st *state.Stream) string {
	if st.Policy != "" {
		return st.Policy
	}
	if p.DefaultPolicy != "" {
		return p.DefaultPolicy
	}
	return policy.Default
}

// Up reports whether node may take copies or ownership now: Reachable and
// its drain not requested (state.DrainRequested).
func Up(s *state.State, live map[string]liveness.Seen, node string, now time.Time, ttl time.Duration) bool {
	return Reachable(s, live, node, now, ttl) && !s.DrainRequested(node)
}

// Reachable reports whether node serves now: live in the state, heard
// within the TTL, not leaving and not just disconnected. A node being
// drained is reachable (it hands its streams off) but not Up.
func Reachable(s *state.State, live map[string]liveness.Seen, node string, now time.Time, ttl time.Duration) bool {
	if s.NodeState(node) != wire.NodeLive {
		return false
	}
	seen, ok := live[node]
	if !ok || !seen.Serving(now, ttl) {
		return false
	}
	n := s.Nodes[node]
	return n == nil || seen.Incarnation == n.Incarnation
}

// Plan decides what the leader should change now. Node actions come first;
// stream actions are planned against the state as it will be once those
// are applied, so a node expired in this round fails its streams over in the
// same round.
//
// s may be a state.Partial view: Plan plans over the streams it holds, and
// reads the rest of the state only through the nodes and the load counts.
// The control loop reads the view state.QueryControl returns, with Losing
// and SealedReports: it holds every stream that can yield an action, so the
// plan equals the plan over the whole state at a cost in proportion to the
// streams concerned.
func Plan(s *state.State, live Liveness, now time.Time, p Params) []Action {
	acts := planNodes(s, live, now, p)
	sim := s
	if len(acts) > 0 {
		sim = s.Clone()
		for _, a := range acts {
			sim.Apply(nodeCommand(a, now))
		}
	}
	return append(acts, planStreams(sim, live, now, p)...)
}

// Losing returns the nodes the plan of this round expires or marks left.
// Their streams fail over in the same round, so a control round's read
// (state.QueryControl) includes the streams they own.
func Losing(s *state.State, live Liveness, now time.Time, p Params) []string {
	var out []string
	for _, a := range planNodes(s, live, now, p) {
		if a.Kind == ActLeave || a.Kind == ActExpire {
			out = append(out, a.Node)
		}
	}
	return out
}

// SealedReports returns, sorted, the streams of which a heard node reports
// a sealed copy: the one input of a stream's plan that is not in the state
// (see fenced), so a control round's read includes them.
func SealedReports(live Liveness) []string {
	set := map[string]bool{}
	for _, seen := range live.Nodes {
		for name, c := range seen.Copies {
			if c.Sealed {
				set[name] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// nodeCommand is the state command of a node action.
func nodeCommand(a Action, now time.Time) state.Command {
	at := now.UnixMilli()
	switch a.Kind {
	case ActRegister:
		return state.NodeSeen(a.Node, a.Incarnation, at)
	case ActLeave:
		return state.NodeLeave(a.Node, a.Incarnation, at)
	default:
		return state.NodeExpire(a.Node, a.Incarnation, a.Reason, at)
	}
}

// Command returns the state command of a node action (ActRegister,
// ActLeave, ActExpire), stamped with now.
func (a Action) Command(now time.Time) state.Command { return nodeCommand(a, now) }

func planNodes(s *state.State, live Liveness, now time.Time, p Params) []Action {
	ids := map[string]bool{}
	for id := range s.Nodes {
		ids[id] = true
	}
	for id := range live.Nodes {
		ids[id] = true
	}
	var acts, ttl []Action
	anyFresh := false // a live or draining node of the state heard within the TTL
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		n := s.Nodes[id]
		seen, heard := live.Nodes[id]
		fresh := heard && seen.Fresh(now, p.TTL)
		if fresh && n != nil && n.Incarnation == seen.Incarnation && (n.State == wire.NodeLive || n.State == wire.NodeDraining) {
			anyFresh = true
		}
		switch {
		case heard && seen.Leaving:
			// Eager failover: a host that says it is leaving is gone now,
			// whichever incarnation the state last registered. The
			// command is guarded on that incarnation, so it cannot undo
			// a registration that raced with it.
			if n != nil && n.State != wire.NodeLeft {
				acts = append(acts, Action{Kind: ActLeave, Node: id, Incarnation: n.Incarnation})
			}
			continue
		case fresh && n == nil:
			acts = append(acts, Action{Kind: ActRegister, Node: id, Incarnation: seen.Incarnation})
			continue
		case fresh && n.Incarnation != seen.Incarnation:
			acts = append(acts, Action{Kind: ActRegister, Node: id, Incarnation: seen.Incarnation})
			continue
		case fresh && (n.State == wire.NodeExpired || n.State == wire.NodeLeft) && seen.LastSeen.UnixMilli() > n.SinceMS:
			// Heard again after it was declared gone: it is back.
			acts = append(acts, Action{Kind: ActRegister, Node: id, Incarnation: seen.Incarnation})
			continue
		}
		if n == nil || (n.State != wire.NodeLive && n.State != wire.NodeDraining) {
			continue
		}
		if live.Deaf {
			// A coordinator that cannot hear does not judge.
			continue
		}
		// Fast detection: the host's connection closed and no heartbeat
		// came within the grace. An advisory received before this
		// coordinator's own reconnect may be about the bus going down
		// under everyone; the TTL, counted from the reconnect, judges
		// those hosts instead.
		if heard && !seen.DisconnectedAt.IsZero() && !seen.HeardSinceDisconnect() &&
			!seen.DisconnectedAt.Before(live.HeardSince) &&
			now.Sub(seen.DisconnectedAt) >= max(p.DisconnectGrace, live.Grace) {
			acts = append(acts, Action{Kind: ActExpire, Node: id, Incarnation: n.Incarnation, Reason: DetectAdvisory})
			continue
		}
		// A new leader has heard nothing older than its leadership, so it
		// counts silence from then: it waits one TTL before expiring anyone.
		// Likewise after its own NATS connection came back: hosts it did
		// not hear while it was cut off get a fresh TTL.
		last := live.LeaderSince
		if live.HeardSince.After(last) {
			last = live.HeardSince
		}
		if heard && seen.Incarnation == n.Incarnation && seen.LastSeen.After(last) {
			last = seen.LastSeen
		}
		if now.Sub(last) >= p.TTL && !live.Probing[id] {
			ttl = append(ttl, Action{Kind: ActExpire, Node: id, Incarnation: n.Incarnation, Reason: DetectTTL})
		}
	}
	if len(ttl) > 1 && !anyFresh {
		// Every host silent at once is the observer's silence (its
		// process or its NATS servers starved, as on an overloaded
		// machine), not every host's death; and were they all dead,
		// expiring them would move nothing, since a failover needs a
		// survivor. Withheld until at least one host is heard again:
		// then the silent ones expire as usual.
		return acts
	}
	return append(acts, ttl...)
}

// lostReason maps the owner's node state to the pending recovery's reason.
func lostReason(nodeState string) string {
	switch nodeState {
	case wire.NodeLeft:
		return "left"
	case wire.NodeDraining:
		return "drain"
	default:
		return "expired"
	}
}

func planStreams(s *state.State, live Liveness, now time.Time, p Params) []Action {
	var acts []Action
	for _, name := range s.SortedStreams() {
		st := s.Streams[name]
		if st.Recovery != nil {
			continue // the recovery worker owns it
		}
		if s.NodeState(st.Assignment.Owner) != wire.NodeLive {
			if st.Copies <= 1 {
				// An owner-only stream has no other copy to move to: it
				// waits for its owner (status waiting).
				continue
			}
			if s.NodeState(st.Assignment.Owner) == wire.NodeDraining && !anyUp(s, st.Assignment.Followers, live, now, p) {
				// A draining owner still serves: with no follower that
				// may take ownership (all draining, left, expired or
				// being drained), a recovery would promote a leaving
				// copy again, and again. The stream stays until a
				// follower is up or the owner is undrained.
				continue
			}
			acts = append(acts, ownerLost(s, st, live, now, p))
			continue
		}
		if a, ok := fenced(s, st, live, now, p); ok {
			acts = append(acts, a)
			continue
		}
		if a, ok := grow(s, st, live, now, p); ok {
			acts = append(acts, a)
		}
	}
	return acts
}

// anyUp reports whether one of nodes is Up.
func anyUp(s *state.State, nodes []string, live Liveness, now time.Time, p Params) bool {
	return slices.ContainsFunc(nodes, func(n string) bool { return Up(s, live.Nodes, n, now, p.TTL) })
}

// ownerLost proposes a new owner for st, whose owner is expired, left or
// draining: the first follower that is up (else the first follower), the
// other old copies as followers. The recovery worker decides the real owner
// from the seals; the proposal contributes its policy stamp and any member
// that held no copy.
func ownerLost(s *state.State, st *state.Stream, live Liveness, now time.Time, p Params) Action {
	old := st.Assignment
	owner := ""
	for _, f := range old.Followers {
		if Up(s, live.Nodes, f, now, p.TTL) {
			owner = f
			break
		}
	}
	if owner == "" && len(old.Followers) > 0 {
		owner = old.Followers[0]
	}
	if owner == "" {
		owner = old.Owner // a replicated stream down to one copy: only it can be promoted
	}
	prop := wire.Assignment{Stream: st.Name, StreamID: st.ID, Epoch: old.Epoch + 1, Owner: owner, Followers: []string{}, Policy: p.Stamp(st)}
	for _, f := range old.Followers {
		if f != owner {
			prop.Followers = append(prop.Followers, f)
		}
	}
	ownerState := s.NodeState(old.Owner)
	detected := DetectTTL
	var since int64
	if n := s.Nodes[old.Owner]; n != nil {
		if n.Reason != "" {
			detected = n.Reason
		}
		since = n.SinceMS
	}
	return Action{Kind: ActRecover, Stream: st.Name, Version: st.Version, Assignment: prop,
		Reason: lostReason(ownerState), Node: old.Owner, Detected: detected, LostSinceMS: since}
}

// fenced records a recovery (reason "sealed") for a replicated stream whose
// live owner cannot confirm because copies of its assignment are sealed past
// the assignment's epoch, which happens when an operator withdraws a
// recovery and the owner comes back before the controller records a new
// one: the withdrawn worker's seals stay, no later assignment includes the
// copies at the fence epoch, and nothing else would plan a recovery for a
// live owner. Its worker seals at the same fence with a newer transition,
// taking the seals over, and commits the next epoch (with the same owner if
// it is furthest), which releases them.
//
// Two signals, either enough: the state remembers the fence of a withdrawn
// recovery until an assignment reaches it (FencedEpoch), which covers seals
// whose answers never arrived; and a copy of the assignment on an up node
// publishes sealed at an epoch at or past the assignment's. That copy has
// applied the assignment's epoch, which would have released any seal at or
// below it, so its seal is above it. A sealed copy that still publishes an
// older epoch is not counted: right after every recovery commit the copies
// sealed at the new epoch publish exactly that until they apply it.
func fenced(s *state.State, st *state.Stream, live Liveness, now time.Time, p Params) (Action, bool) {
	if st.Copies <= 1 {
		return Action{}, false
	}
	cur := st.Assignment
	detected := ""
	if st.FencedEpoch > cur.Epoch {
		detected = DetectWithdrawnFence
	} else {
		for _, n := range cur.Copies() {
			if !Reachable(s, live.Nodes, n, now, p.TTL) {
				continue
			}
			if c, ok := live.Nodes[n].Copies[st.Name]; ok && c.StreamID == st.ID && c.Sealed && c.Epoch >= cur.Epoch {
				detected = DetectSealedCopy
				break
			}
		}
	}
	if detected == "" {
		return Action{}, false
	}
	prop := state.CloneAssignment(cur)
	prop.Epoch = cur.Epoch + 1
	prop.Policy = p.Stamp(st)
	return Action{Kind: ActRecover, Stream: st.Name, Version: st.Version, Assignment: prop, Reason: state.ReasonSealed,
		Node: cur.Owner, Detected: detected}, true
}

// grow brings st back to its copy count: first live nodes that still hold
// a copy (known from heartbeats) at once, then, once the stream has been
// short for ReplaceAfter, live nodes without a copy. A change that needs no
// more copies to confirm (W' <= W) commits directly and keeps the epoch;
// otherwise it goes through recovery with reason "grow".
func grow(s *state.State, st *state.Stream, live Liveness, now time.Time, p Params) (Action, bool) {
	cur := st.Assignment
	missing := st.Copies - len(cur.Copies())
	if missing <= 0 {
		return Action{}, false
	}
	var holders, others []string
	for _, id := range s.SortedNodes() {
		if cur.Includes(id) || !Up(s, live.Nodes, id, now, p.TTL) {
			continue
		}
		if c, ok := live.Nodes[id].Copies[st.Name]; ok && c.StreamID == st.ID {
			holders = append(holders, id)
		} else {
			others = append(others, id)
		}
	}
	// The furthest holders first: they have the least to catch up.
	slices.SortStableFunc(holders, func(a, b string) int {
		return cmp.Compare(live.Nodes[b].Copies[st.Name].RecordTail, live.Nodes[a].Copies[st.Name].RecordTail)
	})
	cands := holders
	reason := "readd"
	if st.ShortSinceMS > 0 && now.UnixMilli()-st.ShortSinceMS >= p.ReplaceAfter.Milliseconds() {
		owned, copies := s.Load()
		slices.SortStableFunc(others, func(a, b string) int {
			return cmp.Or(cmp.Compare(copies[a], copies[b]), cmp.Compare(owned[a], owned[b]), cmp.Compare(a, b))
		})
		cands = append(cands, others...)
		if len(holders) < missing {
			reason = "replace"
		}
	}
	if len(cands) == 0 {
		return Action{}, false
	}
	cands = cands[:min(missing, len(cands))]
	stamp := p.Stamp(st)
	w := policy.StampW(cur.Policy, len(cur.Copies()))
	// Prefer the largest direct addition; adding fewer copies keeps W'
	// lower, so a partial addition may commit without sealing.
	for k := len(cands); k >= 1; k-- {
		next := state.CloneAssignment(cur)
		next.Followers = append(next.Followers, cands[:k]...)
		next.Policy = stamp
		if policy.StampW(stamp, len(next.Copies())) <= w {
			return Action{Kind: ActUpdate, Stream: st.Name, Version: st.Version, Assignment: next, Reason: reason}, true
		}
	}
	prop := state.CloneAssignment(cur)
	prop.Epoch = cur.Epoch + 1
	prop.Followers = append(prop.Followers, cands...)
	prop.Policy = stamp
	return Action{Kind: ActRecover, Stream: st.Name, Version: st.Version, Assignment: prop, Reason: state.ReasonGrow,
		Node: cur.Owner, Detected: reason}, true
}
