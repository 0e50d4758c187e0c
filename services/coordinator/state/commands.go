package state

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
)

// Command operations. Each is one Raft entry.
const (
	OpNodeSeen         = "node.seen"         // register a node, a new incarnation, or a node back from expired/left
	OpNodeExpire       = "node.expire"       // live/draining -> expired (TTL or advisory); guarded on incarnation
	OpNodeLeave        = "node.leave"        // -> left (a host shutting down gracefully)
	OpNodeDrainBegin   = "node.drain.begin"  // live: drain requested, no copy or ownership moves to it (operator)
	OpNodeDrain        = "node.drain"        // live -> draining (operator; with IfRequested only while the drain is requested)
	OpNodeUndrain      = "node.undrain"      // draining or drain requested -> live (operator)
	OpStreamCreate     = "stream.create"     // a new stream with its first assignment
	OpStreamDelete     = "stream.delete"     // drop a stream, its starts and any recovery
	OpStreamUpdate     = "stream.update"     // operator changes policy, retention, min_copies; a policy needing more copies records a recovery
	OpAssignUpdate     = "assign.update"     // keep owner, epoch and followers; add followers (W' <= W); guarded
	OpRecoveryBegin    = "recovery.begin"    // record a pending recovery; guarded
	OpRecoveryCommit   = "recovery.commit"   // the worker's one guarded write
	OpRecoveryWait     = "recovery.wait"     // store the worker's latest wait; unguarded, display only
	OpRecoveryWithdraw = "recovery.withdraw" // operator removes a pending recovery
	OpRecoveryAccept   = "recovery.accept"   // operator accepts owner loss; guarded
	OpAttentionClear   = "attention.clear"   // operator clears an accepted-loss warning
)

// Command is one proposed change. It is a flat record: each op reads the
// fields it needs (see the constructors below) and ignores the rest. AtMS
// is the proposer's clock, the only time the state machine ever sees.
type Command struct {
	Op          string `json:"op"`
	AtMS        int64  `json:"at_ms"`
	Node        string `json:"node,omitempty"`
	Incarnation uint64 `json:"incarnation,omitempty"`
	// IfRequested makes a node.drain apply only while the node's drain is
	// requested (node.drain.begin), so a node.undrain or a restart
	// meanwhile is not undone.
	IfRequested bool   `json:"if_requested,omitempty"`
	Reason      string `json:"reason,omitempty"`
	Stream      string `json:"stream,omitempty"`
	// Version is the stream Version the proposer read (guarded ops).
	Version    uint64 `json:"version,omitempty"`
	Transition uint64 `json:"transition,omitempty"`
	Copies     int    `json:"copies,omitempty"`
	MinCopies  int    `json:"min_copies,omitempty"`
	// MaxStreams and MaxCopiesPerHost are the limits a create is held to
	// (0: none, as in every create logged before they existed).
	MaxStreams       int                `json:"max_streams,omitempty"`
	MaxCopiesPerHost int                `json:"max_copies_per_host,omitempty"`
	Update           *wire.StreamUpdate `json:"update,omitempty"`
	Policy           string             `json:"policy,omitempty"`
	Retention        wire.Retention     `json:"retention"`
	Assignment       *wire.Assignment   `json:"assignment,omitempty"`
	Proposal         *wire.Assignment   `json:"proposal,omitempty"`
	Start            *wire.HistoryStart `json:"start,omitempty"`
	Wait             *wire.RecoveryWait `json:"wait,omitempty"`
	AcceptedLoss     *wire.AcceptedLoss `json:"accepted_loss,omitempty"`
	TraceID          string             `json:"trace_id,omitempty"`
	TraceParent      string             `json:"traceparent,omitempty"`
	// HandoffMS is a planned move's hand-off bound (recovery.begin of
	// reason move; wire.PendingRecovery.HandoffMS).
	HandoffMS int64 `json:"handoff_ms,omitempty"`
}

// Encode renders the command as the bytes of a Raft entry.
func (c Command) Encode() []byte {
	b, err := json.Marshal(c)
	if err != nil {
		// Every field is a plain value; Marshal cannot fail on it.
		panic(fmt.Sprintf("state: encode command: %v", err))
	}
	return b
}

// DecodeCommand reads a Raft entry.
func DecodeCommand(b []byte) (Command, error) {
	var c Command
	if err := json.Unmarshal(b, &c); err != nil {
		return Command{}, fmt.Errorf("decode command: %w", err)
	}
	return c, nil
}

// Result is the outcome of applying one command. Code is empty on success
// and a wire error code (conflict, not_found, exists, bad_request) when the
// state machine refused the command; a refused command changed nothing.
type Result struct {
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
	// Changed is false for a successful no-op (e.g. a node already live).
	Changed bool `json:"changed,omitempty"`
	// Version is the state Version after the command.
	Version uint64 `json:"version"`
	// StreamVersion is the stream's Version after the command, if it names one.
	StreamVersion uint64 `json:"stream_version,omitempty"`
	StreamID      uint64 `json:"stream_id,omitempty"`
	Transition    uint64 `json:"transition,omitempty"`
}

// Err returns the refusal as a *wire.Error, or nil on success.
func (r Result) Err() error {
	if r.Code == "" {
		return nil
	}
	return &wire.Error{Code: r.Code, Message: r.Message}
}

// NodeSeen registers node or its new incarnation, or brings it back live.
func NodeSeen(node string, incarnation uint64, atMS int64) Command {
	return Command{Op: OpNodeSeen, Node: node, Incarnation: incarnation, AtMS: atMS}
}

// NodeExpire marks node expired if it still runs incarnation.
func NodeExpire(node string, incarnation uint64, reason string, atMS int64) Command {
	return Command{Op: OpNodeExpire, Node: node, Incarnation: incarnation, Reason: reason, AtMS: atMS}
}

// NodeLeave marks node left; incarnation 0 matches any.
func NodeLeave(node string, incarnation uint64, atMS int64) Command {
	return Command{Op: OpNodeLeave, Node: node, Incarnation: incarnation, AtMS: atMS}
}

// NodeDrainBegin records that node is being drained: while it is live,
// no copy and no ownership moves to it (placement, planned moves, the
// balancer, on every coordinator), and recovery prefers not to promote it.
func NodeDrainBegin(node string, atMS int64) Command {
	return Command{Op: OpNodeDrainBegin, Node: node, AtMS: atMS}
}

// NodeDrain marks node draining.
func NodeDrain(node string, atMS int64) Command {
	return Command{Op: OpNodeDrain, Node: node, AtMS: atMS}
}

// NodeDrainRequested marks node draining if its drain is still requested
// (node.drain.begin, not undone by node.undrain or a restart since).
func NodeDrainRequested(node string, atMS int64) Command {
	return Command{Op: OpNodeDrain, Node: node, IfRequested: true, AtMS: atMS}
}

// NodeUndrain ends node's drain.
func NodeUndrain(node string, atMS int64) Command {
	return Command{Op: OpNodeUndrain, Node: node, AtMS: atMS}
}

// StreamCreate creates a stream with its first assignment (owner, followers
// and policy stamp; the state machine sets the id and epoch 1). policy is
// what the create named ("" for the cluster default).
func StreamCreate(stream string, copies int, policy string, ret wire.Retention, a wire.Assignment, atMS int64) Command {
	return Command{Op: OpStreamCreate, Stream: stream, Copies: copies, Policy: policy, Retention: ret, Assignment: &a, AtMS: atMS}
}

// WithMinCopies sets the floor of a StreamCreate (0: none).
func (c Command) WithMinCopies(n int) Command {
	c.MinCopies = n
	return c
}

// WithLimits holds a StreamCreate to the cluster's limits: at most
// maxStreams streams, and no copy on a node that holds maxPerHost copies
// (0: no limit).
func (c Command) WithLimits(maxStreams, maxPerHost int) Command {
	c.MaxStreams, c.MaxCopiesPerHost = maxStreams, maxPerHost
	return c
}

// StreamUpdate changes the policy, retention and floor of stream as u says
// (its Stream is ignored); traceID and traceParent name the trace of the
// recovery a policy needing more copies to confirm records.
func StreamUpdate(stream string, u wire.StreamUpdate, traceID, traceParent string, atMS int64) Command {
	u.Stream = stream
	return Command{Op: OpStreamUpdate, Stream: stream, Update: &u, TraceID: traceID, TraceParent: traceParent, AtMS: atMS}
}

// StreamDelete deletes a stream.
func StreamDelete(stream string, atMS int64) Command {
	return Command{Op: OpStreamDelete, Stream: stream, AtMS: atMS}
}

// AssignUpdate replaces the assignment of stream, read at version, by a,
// which must keep its owner, epoch and followers and need no more copies to
// confirm.
func AssignUpdate(stream string, version uint64, a wire.Assignment, atMS int64) Command {
	return Command{Op: OpAssignUpdate, Stream: stream, Version: version, Assignment: &a, AtMS: atMS}
}

// RecoveryBegin records a pending recovery of stream, read at version.
func RecoveryBegin(stream string, version uint64, proposal wire.Assignment, reason, traceID, traceParent string, atMS int64) Command {
	return Command{Op: OpRecoveryBegin, Stream: stream, Version: version, Proposal: &proposal, Reason: reason,
		TraceID: traceID, TraceParent: traceParent, AtMS: atMS}
}

// WithHandoff sets the hand-off bound of a planned move's RecoveryBegin.
func (c Command) WithHandoff(d time.Duration) Command {
	c.HandoffMS = d.Milliseconds()
	return c
}

// RecoveryCommit is the worker's guarded write.
func RecoveryCommit(stream string, transition, version uint64, a wire.Assignment, start wire.HistoryStart, traceID, traceParent string, atMS int64) Command {
	return Command{Op: OpRecoveryCommit, Stream: stream, Transition: transition, Version: version, Assignment: &a,
		Start: &start, TraceID: traceID, TraceParent: traceParent, AtMS: atMS}
}

// RecoveryWait stores the worker's wait on the pending recovery transition.
func RecoveryWait(stream string, transition uint64, w wire.RecoveryWait, atMS int64) Command {
	return Command{Op: OpRecoveryWait, Stream: stream, Transition: transition, Wait: &w, AtMS: atMS}
}

// RecoveryWithdraw removes the pending recovery of stream.
func RecoveryWithdraw(stream string, atMS int64) Command {
	return Command{Op: OpRecoveryWithdraw, Stream: stream, AtMS: atMS}
}

// RecoveryAccept moves stream, read at version, to a without sealing,
// recording start (if any) and the accepted-loss warning (if any).
func RecoveryAccept(stream string, version uint64, a wire.Assignment, start *wire.HistoryStart, loss *wire.AcceptedLoss, traceID, traceParent string, atMS int64) Command {
	return Command{Op: OpRecoveryAccept, Stream: stream, Version: version, Assignment: &a, Start: start,
		AcceptedLoss: loss, TraceID: traceID, TraceParent: traceParent, AtMS: atMS}
}

// AttentionClear clears the accepted-loss warning of stream.
func AttentionClear(stream string, atMS int64) Command {
	return Command{Op: OpAttentionClear, Stream: stream, AtMS: atMS}
}
