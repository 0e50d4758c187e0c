package wire

import "time"

// StreamMove asks the coordinators to move ownership of a live stream to
// Node, one of its followers, or to the best live follower when Node is
// empty (stream.move). The owner stops taking publishes, the target catches
// up to its tail, then the stream is sealed and committed at the next epoch
// as a recovery does; the old owner follows the new one.
type StreamMove struct {
	Stream string `json:"stream"`
	Node   string `json:"node,omitempty"`
	// TimeoutMS bounds the owner's hand-off (stop intake, wait for the
	// target's durable ack of the tail); 0: DefaultMoveTimeoutMS; at most
	// MaxMoveTimeoutMS. The request's deadline covers it and the recovery
	// after it: the reply comes within MoveReplyWithin(TimeoutMS).
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
}

// DefaultMoveTimeoutMS is a move's hand-off timeout when the request names
// none.
const DefaultMoveTimeoutMS = 2000

// MoveReplyMargin is how much longer than its hand-off timeout a
// stream.move may take to be answered: the coordinator's read and the
// move's record (5 s), the hand-off's answer (1 s), the recovery after it
// (two seal rounds at the default seal timeout of 2 s and a second), and
// a second for the reply to travel. A coordinator with a longer seal
// timeout may answer a slow move later, by twice the difference.
const MoveReplyMargin = 12 * time.Second

// MoveReplyWithin is how long a stream.move with timeoutMS (0: the
// default) may take to be answered at the default seal timeout: how long
// a caller should wait.
func MoveReplyWithin(timeoutMS int64) time.Duration {
	if timeoutMS <= 0 {
		timeoutMS = DefaultMoveTimeoutMS
	}
	return time.Duration(timeoutMS)*time.Millisecond + MoveReplyMargin
}

// MaxMoveTimeoutMS bounds a move's hand-off timeout (stream.move's
// timeout_ms and a hand-off's timeout_ms; a hand-off's hold_ms is at most
// twice it): an owner never refuses publishes longer for one move.
const MaxMoveTimeoutMS = 30_000

// StreamMoveReply is the answer of a completed stream.move.
type StreamMoveReply struct {
	Stream string `json:"stream"`
	From   string `json:"from"`
	To     string `json:"to"`
	Epoch  uint64 `json:"epoch"`
	// HeldMS is how long the hand-off took, from its request to the old
	// owner's answer (it refuses publishes from then until the seal);
	// TookMS the whole move.
	HeldMS  int64  `json:"held_ms"`
	TookMS  int64  `json:"took_ms"`
	Version uint64 `json:"version"`
}

// NodeDrainReply is the answer of node.drain once the drain is recorded:
// from then on no copy and no ownership moves to the node. Moving lists
// the replicated streams it owns, which the coordinator moves to other
// hosts by planned moves after replying (node.undrain, a restart, or the
// node expiring or leaving stops the moves not yet begun); then the node
// is draining (it takes no copies and no ownership until node.undrain or
// its restart) and whatever it still owns fails over by recovery when a
// follower may take it, else stays there. cluster.info shows
// drain_requested on the node while the moves run, then state draining.
//
// Staying lists the streams the node owns that no planned move can take
// from it when the drain replies, each with why (DrainStay*). The drain
// still tries each with a follower (no_live_follower, recovery_pending),
// planned from a fresh read at its turn: a follower up by then takes it.
// What is left stays on the node once it is draining, or fails over by
// recovery, and attention lists it (drain_stuck) until it is gone.
type NodeDrainReply struct {
	OK      bool          `json:"ok"`
	Version uint64        `json:"version"`
	Moving  []string      `json:"moving"`
	Staying []DrainStayer `json:"staying"`
}

// The reasons of DrainStayer (also the drain_stuck entry's figures).
const (
	DrainStayOneCopy        = "one_copy"
	DrainStayNoLiveFollower = "no_live_follower"
	DrainStayRecovering     = "recovery_pending"
	DrainStayNotMoved       = "not_moved"
)

// DrainStayer is a stream a drain leaves on its node, and why: one_copy
// (E = 1: no follower to move it to; add copies with stream.update, or
// let it wait for the node), no_live_follower (none of its followers is on
// a live node, so no move and no recovery may take it), recovery_pending
// (a recovery decides its owner), not_moved (attention only: a live
// follower exists but the drain's move did not complete; node.drain
// again does nothing for a node already draining: stream.move to a live
// follower moves it, or node.undrain then node.drain tries every stream
// again, and a recovery takes it off a draining owner anyway).
type DrainStayer struct {
	Stream string `json:"stream"`
	Reason string `json:"reason"`
}

// HandoffRequest asks the owner of Stream at Epoch to hand its ownership
// over to Target, a follower: stop taking publishes (refused with sealed,
// which clients retry), wait until Target has durably acknowledged the
// owner's record and cursor tails, and answer with them. Intake stays
// stopped until a seal ends the role or HoldMS passes. Resume instead
// takes publishes again at once (an aborted move). MoveID names the move:
// a resume, or the owner's own timeout, ends only the hold of the same
// move, never a later move's.
type HandoffRequest struct {
	Stream    string `json:"stream"`
	StreamID  uint64 `json:"stream_id"`
	Epoch     uint64 `json:"epoch"`
	Target    string `json:"target"`
	TimeoutMS int64  `json:"timeout_ms"`
	HoldMS    int64  `json:"hold_ms"`
	Resume    bool   `json:"resume,omitempty"`
	MoveID    string `json:"move_id,omitempty"`
}

// HandoffReply is the owner's answer once the target holds its tails.
type HandoffReply struct {
	Node       string `json:"node"`
	Stream     string `json:"stream"`
	Epoch      uint64 `json:"epoch"`
	RecordTail uint64 `json:"record_tail"`
	CursorTail uint64 `json:"cursor_tail"`
	// Digest is the running digest at RecordTail, in hex.
	Digest string `json:"digest"`
	// TookMS is how long intake was held before this answer.
	TookMS int64 `json:"took_ms"`
}

// HandoffSubject is answered by the stream host node with HandoffReply.
func HandoffSubject(node string) string { return "brook.host." + node + ".handoff" }
