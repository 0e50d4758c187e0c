package recovery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/state"
)

// Planned moves (stream.move, node.drain, the balancer) move ownership of a
// live stream to one of its followers with the smallest write gap:
//
//  1. Begin: one guarded write records a pending recovery with reason
//     state.ReasonMove whose proposal names the target as owner, on the
//     stream version the move was planned from (so a change meanwhile, a
//     recovery or another move, is refused with conflict, and the move
//     ends having changed nothing). The owner still takes publishes: the
//     write is outside the write gap.
//  2. Hand-off: the owner stops taking publishes (refusing them with
//     sealed, which clients retry) and answers once the target durably
//     holds its record and cursor tails. A failure here (timeout, the
//     owner or target gone) no longer aborts cleanly: the move is
//     recorded, so it goes on as a recovery (step 3), whose seal ends the
//     owner's hold; the furthest copy is promoted (often the old owner
//     again, at the next epoch), and the move answers the hand-off's code.
//     The recovery runs on a context of its own (Mover.Finish), so a
//     move whose caller gave up after the begin still seals, or else
//     sends the owner a resume.
//  3. Recover: the recovery worker seals the copies at the next epoch and
//     commits as any recovery does; Decide promotes the target when its
//     sealed tails are among the furthest (plannedTarget), else the
//     furthest copy as usual, so a target that died or fell behind after
//     the hand-off costs a recovery, never a confirmed record.
//
// Why the begin may come first (docs/failover.md, "Planned moves"): the
// recovery's safety rests on its seal, its choice and its guarded commit,
// all after the hand-off, never on what the owner did before the seal;
// records confirmed between the begin and the hold are fenced by the seal
// like any other. The states this order adds (a move recorded, the owner
// not yet holding) are ones a recovery already meets: an owner that dies,
// or a hand-off that fails, after the begin leaves a pending recovery that
// the worker finishes from the seals; the leader leaves it to the mover
// for the hand-off's bound (HandoffMS) plus the usual grace, so two workers
// do not seal at once.

// plannedTarget returns, for a planned move, the target's sealed copy when
// its tails equal the furthest and the target is not leaving (draining,
// left or its drain requested, as the worker read the state: a target that
// began a graceful leave or a drain after the move began gets no
// ownership; the usual choice, which prefers copies not leaving, stands).
func plannedTarget(pr wire.PendingRecovery, got []sealed, best sealed, leaving map[string]bool) (sealed, bool) {
	if pr.Reason != state.ReasonMove || leaving[pr.Proposal.Owner] {
		return sealed{}, false
	}
	for _, s := range got {
		if s.node == pr.Proposal.Owner && s.recordTail == best.recordTail && s.cursorTail == best.cursorTail {
			return s, true
		}
	}
	return sealed{}, false
}

// MoveView is what PlanMove needs to know beyond the stream: whether a
// node may take ownership now, each node's record tail of the stream as
// its last heartbeat published it, and how many streams each node owns.
type MoveView struct {
	Up    func(node string) bool
	Tails map[string]uint64
	Owned map[string]int
}

// PlanMove is pure: it checks that st may move to target (a follower; ""
// for the best one) and returns the proposal: the target as owner, the
// old owner and the other followers as followers, the same policy stamp,
// at the next epoch. The best follower is the up one with the furthest
// published record tail (the least to catch up), then the one owning the
// fewest streams, then the lowest node id. Coded errors: not_found for no
// stream, conflict while a recovery is pending, bad_request for a target
// that is not a live follower, unavailable when no follower is up.
func PlanMove(st *state.Stream, target string, v MoveView) (wire.Assignment, error) {
	if st == nil {
		return wire.Assignment{}, wire.Errorf(wire.CodeNotFound, "no such stream")
	}
	old := st.Assignment
	if st.Recovery != nil {
		return wire.Assignment{}, wire.Errorf(wire.CodeConflict, "stream %s has pending recovery %d (%s); move it once it completes",
			st.Name, st.Recovery.Transition, st.Recovery.Reason)
	}
	if !v.Up(old.Owner) {
		return wire.Assignment{}, wire.Errorf(wire.CodeConflict, "owner %s of %s is not up: it fails over by recovery, not a move", old.Owner, st.Name)
	}
	if target != "" {
		if target == old.Owner || !slices.Contains(old.Followers, target) {
			return wire.Assignment{}, wire.Errorf(wire.CodeBadRequest, "node %s is not a follower of %s (owner %s, followers %v)", target, st.Name, old.Owner, old.Followers)
		}
		if !v.Up(target) {
			return wire.Assignment{}, wire.Errorf(wire.CodeBadRequest, "follower %s of %s is not live", target, st.Name)
		}
	} else {
		var cands []string
		for _, f := range old.Followers {
			if f != old.Owner && v.Up(f) {
				cands = append(cands, f)
			}
		}
		if len(cands) == 0 {
			return wire.Assignment{}, wire.Errorf(wire.CodeUnavailable, "stream %s has no live follower to move to (followers %v)", st.Name, old.Followers)
		}
		target = slices.MinFunc(cands, func(a, b string) int {
			return cmp.Or(cmp.Compare(v.Tails[b], v.Tails[a]), cmp.Compare(v.Owned[a], v.Owned[b]), cmp.Compare(a, b))
		})
	}
	p := state.CloneAssignment(old)
	p.Epoch = old.Epoch + 1
	p.Owner = target
	p.Followers = []string{old.Owner}
	for _, f := range old.Followers {
		if f != target && f != old.Owner {
			p.Followers = append(p.Followers, f)
		}
	}
	return p, nil
}

// Handoffer asks an owner to hand its ownership over (wire.HandoffRequest).
type Handoffer interface {
	Handoff(ctx context.Context, node string, req wire.HandoffRequest) (*wire.HandoffReply, error)
}

// MoveState is the coordinator's part of a move.
type MoveState interface {
	// Begin records the pending recovery of reason state.ReasonMove,
	// guarded on version; handoff bounds the hand-off that follows it.
	Begin(ctx context.Context, stream string, version uint64, proposal wire.Assignment, handoff time.Duration) (transition uint64, err error)
	// Recover drives the stream's pending recovery (transition, as Begin
	// recorded it) to its commit (or until it is gone) and returns the
	// stream's assignment then, and the state version it was read at.
	Recover(ctx context.Context, stream string, transition uint64) (wire.Assignment, uint64, error)
}

// Mover runs planned moves.
type Mover struct {
	Handoffer Handoffer
	State     MoveState
	// Timeout bounds the hand-off (default DefaultMoveTimeout); the owner
	// holds its intake at most Hold (default twice Timeout) waiting for
	// the seal.
	Timeout time.Duration
	Hold    time.Duration
	// ID names the move in its hand-off requests, so that its resume ends
	// its own hold only.
	ID string
	// Finish bounds the recovery after the hand-off (default
	// DefaultMoveFinish). It runs on a context of its own, not the
	// caller's: a move cut by its caller (a request's deadline, leadership
	// lost, shutdown) after the begin still seals, which ends the owner's
	// hold, or, should the recovery not commit within Finish, sends the
	// owner a resume; the pending recovery then goes to the leader's
	// worker as any other.
	Finish time.Duration
	Logger *slog.Logger
}

// DefaultMoveFinish bounds a move's recovery after its hand-off when
// nothing else is said: seals, the commit and the read after it.
const DefaultMoveFinish = 10 * time.Second

// DefaultMoveTimeout bounds a hand-off when nothing else is said.
const DefaultMoveTimeout = wire.DefaultMoveTimeoutMS * time.Millisecond

// MoveResult is a completed move.
type MoveResult struct {
	Assignment wire.Assignment
	Version    uint64        // the state version Assignment was read at
	Held       time.Duration // from the hand-off request to its answer
	Took       time.Duration
}

// HandoffBound is the bound of a move's hand-off whose owner timeout is
// timeout (0: DefaultMoveTimeout): that timeout plus a second for the
// answer. It is the hand-off request's deadline and the bound a move's
// pending recovery carries.
func HandoffBound(timeout time.Duration) time.Duration {
	return cmp.Or(timeout, DefaultMoveTimeout) + time.Second
}

// ErrMoveAborted marks a move that ended without moving the stream to its
// target; the error says why and carries a wire code.
var ErrMoveAborted = errors.New("move aborted")

// Run moves the stream of old (read at stream version) to proposal's owner.
func (m *Mover) Run(ctx context.Context, old wire.Assignment, version uint64, proposal wire.Assignment) (MoveResult, error) {
	began := time.Now()
	timeout := cmp.Or(m.Timeout, DefaultMoveTimeout)
	bound := HandoffBound(m.Timeout)
	hold := cmp.Or(m.Hold, 2*timeout)
	log := cmp.Or(m.Logger, slog.New(slog.DiscardHandler)).With("stream", old.Stream, "from", old.Owner, "to", proposal.Owner, "epoch", old.Epoch)
	req := wire.HandoffRequest{Stream: old.Stream, StreamID: old.StreamID, Epoch: old.Epoch, Target: proposal.Owner,
		TimeoutMS: timeout.Milliseconds(), HoldMS: hold.Milliseconds(), MoveID: m.ID}
	transition, err := m.State.Begin(ctx, old.Stream, version, proposal, bound)
	if err != nil {
		code := codeOr(err, wire.CodeConflict)
		return MoveResult{}, fmt.Errorf("%w: %w", ErrMoveAborted, wire.Errorf(code, "move of %s to %s: not recorded: %v", old.Stream, proposal.Owner, err))
	}
	hbegan := time.Now()
	hctx, cancel := context.WithTimeout(ctx, bound)
	_, herr := m.Handoffer.Handoff(hctx, old.Owner, req)
	cancel()
	held := time.Since(hbegan)
	if herr != nil {
		// The move is recorded: it goes on as a recovery, whose seal ends
		// the owner's hold (if it began one).
		log.Warn("move: hand-off failed after the move was recorded; it goes on as a recovery of the furthest copy", "err", herr)
	}
	// Not on ctx: a move cut after the begin must still end the owner's
	// hold (by the recovery's seal, or else a resume).
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), cmp.Or(m.Finish, DefaultMoveFinish))
	a, version, err := m.State.Recover(fctx, old.Stream, transition)
	fcancel()
	if err != nil {
		m.resume(ctx, old.Owner, req, log)
		return MoveResult{}, wire.Errorf(wire.CodeTimeout, "move of %s to %s: recorded, not committed (%v); the recovery goes on", old.Stream, proposal.Owner, err)
	}
	res := MoveResult{Assignment: a, Version: version, Held: held, Took: time.Since(began)}
	if herr != nil && a.Owner != proposal.Owner {
		code := codeOr(herr, wire.CodeTimeout)
		return res, fmt.Errorf("%w: %w", ErrMoveAborted, wire.Errorf(code, "move of %s to %s: hand-off by %s: %v; the recovery promoted %s at epoch %d",
			old.Stream, proposal.Owner, old.Owner, herr, a.Owner, a.Epoch))
	}
	if a.Owner != proposal.Owner {
		return res, fmt.Errorf("%w: %w", ErrMoveAborted, wire.Errorf(wire.CodeConflict,
			"move of %s to %s: the recovery promoted %s at epoch %d instead (the target's sealed tails were not the furthest)", old.Stream, proposal.Owner, a.Owner, a.Epoch))
	}
	log.Info("move committed", "new_epoch", a.Epoch, "held", held, "took", res.Took)
	return res, nil
}

// resume asks owner to end this move's hold (req with Resume), on a short
// context of its own: the move's recovery did not commit, and its seal may
// not have reached the owner. Taking publishes again at the old epoch is
// safe: the pending recovery's seal fences them as any records confirmed
// between the begin and the hold.
func (m *Mover) resume(ctx context.Context, owner string, req wire.HandoffRequest, log *slog.Logger) {
	req.Resume = true
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if _, err := m.Handoffer.Handoff(rctx, owner, req); err != nil {
		log.Warn("move: resume not confirmed; the owner takes publishes again once its hold passes or a seal comes", "err", err)
		return
	}
	log.Warn("move: the recovery did not commit; the owner takes publishes again until the recovery's seal")
}

// codeOr is err's wire code, or def when err carries none (a transport
// error, a deadline).
func codeOr(err error, def string) string {
	if we, ok := errors.AsType[*wire.Error](err); ok {
		return we.Code
	}
	return def
}
