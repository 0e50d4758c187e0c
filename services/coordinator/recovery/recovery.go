// Package recovery is the heart of a replicated stream's failover: the pure
// rules that choose the copy to promote (Decide, AcceptLoss) and the Worker
// that drives one pending recovery on the coordination leader from seal to
// guarded commit.
//
// The safety of a promotion rests on two facts (seed, "Safety argument" and
// "The confirmed prefix"): R = E - W + 1 sealed copies meet every set of W
// copies that confirmed a record, so the furthest sealed copy holds every
// record confirmed under the old assignment; and no copy below the latest
// history start is promoted, so records confirmed under earlier assignments
// are kept too.
package recovery

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/brook-streams/brook/pkg/wire"
)

// Answer is one copy's reply to a seal (Reply nil and Err set if it did not
// answer in time).
type Answer struct {
	Node  string
	Reply *wire.SealReply
	Err   error
	Took  time.Duration

	// incarnation is the node's incarnation as Worker.Incarnation told
	// it just before the seal was sent (incKnown false: unknown).
	incarnation uint64
	incKnown    bool
	// kept marks an answer of an earlier round reused in this one
	// (runState.kept): promoted only after its copy is sealed again or
	// its node heard since (Worker.decideFresh).
	kept bool
	// at is when the answer came (Worker.Now's clock).
	at time.Time
}

// Decision kinds.
const (
	Promote     = "promote"
	WaitAnswers = "wait_answers"
	WaitPrefix  = "wait_confirmed_prefix"
)

// RecoveryWait kinds as stored in wire.RecoveryWait.Kind.
const (
	WaitKindAnswers = "answers"
	WaitKindPrefix  = "confirmed_prefix"
)

// Decision is what Decide concluded for one round.
type Decision struct {
	Kind string
	// Assignment is, for Promote, the new assignment.
	Assignment wire.Assignment
	// Start is, for Promote, where the new owner's history starts.
	Start wire.HistoryStart
	// Wait is set for the two wait kinds.
	Wait *wire.RecoveryWait
	// Reason is one line: why this copy, or why waiting.
	Reason string
}

// CopyTails is one copy's tails as its node last published them in a
// heartbeat, for AcceptLoss.
type CopyTails struct {
	Node      string
	Live      bool
	Published bool
	// Epoch is the copy's epoch as published (wire.CopyStatus.Epoch: its
	// last log epoch, which a seal does not advance), from which its host
	// cuts a longer history.
	Epoch      uint64
	RecordTail uint64
	CursorTail uint64
}

// Sealer sends one seal and waits for the answer.
type Sealer interface {
	// Seal sends req to node and waits for its answer. budget is the
	// seal's time once it is sent: a Sealer that queues seals before
	// sending them (the coordinator's batcher under a mass failover)
	// starts it when the seal leaves, so time spent in its queue is not
	// taken from the host's. ctx bounds the whole call, queue included.
	Seal(ctx context.Context, node string, req wire.SealRequest, budget time.Duration) (*wire.SealReply, error)
}

// State is the coordinator's replicated state as the worker needs it.
type State interface {
	// Read returns the stream's pending recovery (nil if none), its history
	// starts, the set of leaving nodes, and the state version these were
	// read at, all from one snapshot of the state machine.
	Read(ctx context.Context, stream string) (pr *wire.PendingRecovery, starts []wire.HistoryStart, leaving map[string]bool, version uint64, err error)
	// Commit is the one guarded write: new assignment, pending recovery
	// transition cleared, start appended; rejected with ErrConflict
	// (wrapped) if the stream changed since version.
	Commit(ctx context.Context, stream string, transition uint64, version uint64, a wire.Assignment, start wire.HistoryStart, traceParent string) error
	// RecordWait stores the worker's latest wait on the pending recovery.
	// Not guarded by version; it must not change anything else.
	RecordWait(ctx context.Context, stream string, transition uint64, w wire.RecoveryWait) error
}

// ErrConflict is what State.Commit wraps when the stream changed since the
// version the worker read.
var ErrConflict = errors.New("recovery: state changed since it was read")

// Worker drives one pending recovery to its commit.
type Worker struct {
	Sealer      Sealer
	State       State
	SealTimeout time.Duration
	Logger      *slog.Logger
	Tracer      trace.Tracer
	Now         func() time.Time
	// Gone reports whether the liveness view counts node as gone (expired
	// or left). Once the answers of a seal round already promote (at
	// least R, at or past the latest start), the round does not wait for
	// copies on gone nodes. Nil waits for every copy up to SealTimeout.
	Gone func(node string) bool
	// Committed, if set, is told of each recovery this worker committed
	// (the pending recovery as read for the round) and when; metrics
	// count failovers and their duration with it.
	Committed func(pr wire.PendingRecovery, at time.Time)
	// Incarnation, if set, reports node's incarnation as the liveness
	// view last heard it (ok false: not known). A seal answer kept from
	// an earlier round (see runState) is dropped once the node's
	// incarnation is not the one it had when it was asked: a restarted
	// host may have lost what it answered. Nil: unknown for every node.
	Incarnation func(node string) (incarnation uint64, ok bool)
	// LastHeard, if set, reports when the liveness view last decoded a
	// heartbeat of node (Worker.Now's clock) and the incarnation it named
	// (ok false: none since its last disconnect, or never). A copy chosen
	// on a seal answer kept from an earlier round is promoted without
	// sealing it again when its node was heard after that answer, within
	// one seal timeout of now, at the incarnation that answered: proof of
	// life as recent as a re-seal's (Worker.decideFresh). Nil, or an
	// answer whose incarnation was unknown (Incarnation): always re-seal.
	LastHeard func(node string) (at time.Time, incarnation uint64, ok bool)
	// Waits, if set, takes the repeated "recovery: waiting" lines of
	// this worker (a wait of the kind it logged last) into its periodic
	// summary; nil logs every round's wait.
	Waits *WaitLog

	// sleep replaces the backoff wait in tests.
	sleep func(ctx context.Context, d time.Duration) error
}
