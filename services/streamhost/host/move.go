package host

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/wire"
)

// Planned moves (stream.move, node.drain, the balancer): the coordinator
// asks the owner to hand its ownership over to a follower before it seals
// the copies, so that the seal finds the target at the owner's tail and the
// write gap is one seal and one commit, not a failover.
//
// The hand-off stops the owner's intake without stopping the role: new
// publishes and cursor commits are refused with sealed (retryable; clients
// retry on the new owner's notice), so the record and cursor tails the
// target caught up to stay the owner's last; publishes already written are
// still confirmed as acks come, followers are still served. Once the target has durably
// acknowledged the owner's record and cursor tails the owner answers with
// them. Intake stays stopped until the seal ends the role, or HoldMS
// passes without one (the coordinator gave up or died), or the
// coordinator resumes it (an aborted move): the role is still the owner
// at its epoch, so taking publishes again is plain serving. Each hold
// carries the move's id: a resume, or the hand-off's own timeout, ends the
// hold only while it is still that move's; a hand-off of another move
// while it lasts answers conflict.
//
// Locks and goroutines: an owner's hold and its writes (appends, cursor
// commits) in flight are in the owner's own mu (owner.mu.move), so the
// publish path of one stream takes no host-wide lock; mu is never held
// across a write or a network call. Each
// hand-off runs in a request goroutine of h.reqs; a hold's expiry is a
// time.AfterFunc.

// moveState is an owner's hand-off hold and its writes in flight, under
// the owner's mu.
type moveState struct {
	held     *moveHold
	inflight int        // writes (appendBatch, cursor commits) running
	idle     *sync.Cond // on the owner's mu: signalled when inflight drops to 0
}

// moveHold is one owner's hold.
type moveHold struct {
	target, id string
	expiry     *time.Timer
}

// handoffPoll is how often a hand-off checks the target's acknowledgement.
const handoffPoll = time.Millisecond

// appendOrHold is the appender's one entry to write a batch: while a
// hand-off holds the owner's intake the batch is refused (nothing of it is
// written), otherwise it is appended, counted in flight so that a hand-off
// starting meanwhile waits for it before it reads the tail. A batch handed
// to the completer stays in flight until it is durable (complete ends it).
func (o *owner) appendOrHold(batch []*nats.Msg) {
	if e := o.enterWrite(); e != nil {
		for _, msg := range batch {
			o.refusePublish(msg.Reply, e)
		}
		return
	}
	if !o.appendBatch(batch) {
		o.leaveWrite()
	}
}

// enter counts a write of o (a batch append, a cursor commit) in flight,
// or returns the refusal (sealed, retryable) while a hand-off holds o's
// intake. Each nil return must be followed by one leave once written.
func (o *owner) enterWrite() *wire.Error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if hd := o.mu.move.held; hd != nil {
		return wire.Errorf(wire.CodeSealed, "stream %s: ownership is moving to node %s; not written, retry", o.stream, hd.target)
	}
	o.mu.move.inflight++
	return nil
}

// leave ends a write enter counted.
func (o *owner) leaveWrite() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.mu.move.inflight--; o.mu.move.inflight <= 0 {
		o.mu.move.inflight = 0
		if o.mu.move.idle != nil {
			o.mu.move.idle.Broadcast()
		}
	}
}

// hold stops o's intake for move id to target until released or hold
// passes, and returns it once no write of o is in flight, so o's tails are
// final while the hold lasts. While another move's hold lasts it answers
// conflict and leaves that hold alone: were it replaced, the other move's
// resume (it failed, the owner said) would find the hold not its own, and
// this move's would end it; the same move asking again holds afresh.
func (o *owner) holdIntake(target, id string, hold time.Duration) (*moveHold, *wire.Error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.mu.move.idle == nil {
		o.mu.move.idle = sync.NewCond(&o.mu.Mutex)
	}
	if old := o.mu.move.held; old != nil {
		if old.id != id {
			return nil, wire.Errorf(wire.CodeConflict, "stream %s: another move (%q, to node %s) holds the owner's intake", o.stream, old.id, old.target)
		}
		old.expiry.Stop()
	}
	hd := &moveHold{target: target, id: id}
	hd.expiry = time.AfterFunc(hold, func() {
		if o.releaseHold(hd) && o.ctx.Err() == nil {
			o.log.Warn("planned move: no seal came within the hold; taking publishes again", "target", target, "hold", hold)
		}
	})
	o.mu.move.held = hd
	for o.mu.move.inflight > 0 {
		o.mu.move.idle.Wait()
	}
	return hd, nil
}

// releaseID ends o's hold if it is move id's, and reports whether it did.
func (o *owner) releaseHoldOf(id string) bool {
	o.mu.Lock()
	hd := o.mu.move.held
	o.mu.Unlock()
	return hd != nil && hd.id == id && o.releaseHold(hd)
}

// releaseIf ends o's hold if it is still hd.
func (o *owner) releaseHold(hd *moveHold) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.mu.move.held != hd {
		return false
	}
	hd.expiry.Stop()
	o.mu.move.held = nil
	return true
}

// onHandoff is the hand-off subject's callback; each hand-off runs in its
// own request goroutine (it waits for the target).
func (h *Host) onHandoff(m *nats.Msg) {
	if !h.reqs.Go(func() {
		reply, e := h.handoff(m.Data)
		if e != nil {
			h.replyErr(m.Reply, e)
			return
		}
		h.replyJSON(m.Reply, reply)
	}) {
		h.replyErr(m.Reply, h.stopping())
	}
}

// handoff serves one HandoffRequest (see the comment at the top).
func (h *Host) handoff(body []byte) (*wire.HandoffReply, *wire.Error) {
	var req wire.HandoffRequest
	if e := decodeStrict(body, &req); e != nil {
		return nil, e
	}
	began := time.Now()
	r := h.lookupReplica(req.Stream)
	var o *owner
	if r != nil {
		if st := r.status.Load(); st.own != nil && st.own.id == req.StreamID && st.own.epoch == req.Epoch {
			o = st.own
		}
	}
	if o == nil {
		return nil, wire.Errorf(wire.CodeNotOwner, "node %s is not the owner of stream %s id %d at epoch %d", h.cfg.Node, req.Stream, req.StreamID, req.Epoch)
	}
	if req.Resume {
		if o.releaseHoldOf(req.MoveID) {
			o.log.Info("planned move aborted: taking publishes again", "target", req.Target)
		}
		return &wire.HandoffReply{Node: h.cfg.Node, Stream: req.Stream, Epoch: req.Epoch}, nil
	}
	if req.Target == h.cfg.Node || !o.isFollower(req.Target) {
		return nil, wire.Errorf(wire.CodeBadRequest, "node %s is not a follower of stream %s at epoch %d", req.Target, req.Stream, req.Epoch)
	}
	if req.TimeoutMS < 0 || req.TimeoutMS > wire.MaxMoveTimeoutMS || req.HoldMS < 0 || req.HoldMS > 2*wire.MaxMoveTimeoutMS {
		return nil, wire.Errorf(wire.CodeBadRequest, "timeout_ms %d and hold_ms %d must be within 0 and %d and %d",
			req.TimeoutMS, req.HoldMS, wire.MaxMoveTimeoutMS, 2*wire.MaxMoveTimeoutMS)
	}
	timeout := time.Duration(req.TimeoutMS) * time.Millisecond
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	hold := max(time.Duration(req.HoldMS)*time.Millisecond, timeout)
	// Intake stops only once the target has once reached the tail (or
	// half the timeout passed): then only what is in flight remains for it
	// to catch up while publishes are refused, not its whole lag.
	for half := began.Add(timeout / 2); time.Now().Before(half) && o.ctx.Err() == nil; time.Sleep(handoffPoll) {
		if rec, _, ackRec, _ := o.handoffTails(req.Target); ackRec >= rec {
			break
		}
	}
	hd, e := o.holdIntake(req.Target, req.MoveID, hold)
	if e != nil {
		o.log.Warn("planned move refused: another move holds the intake", "target", req.Target, "move_id", req.MoveID, "err", e.Message)
		return nil, e
	}
	heldAt := time.Now()
	// Cursor events are synced on an interval; the tail the target must
	// reach is the durable one, final from here on.
	if err := o.c.SyncCursors(); err != nil {
		o.releaseHold(hd)
		return nil, o.appendError(err)
	}
	deadline := began.Add(timeout)
	for {
		rec, cur, ackRec, ackCur := o.handoffTails(req.Target)
		if ackRec >= rec && ackCur >= cur {
			o.log.Info("planned move: intake held, target holds the tail", "target", req.Target,
				"record_tail", rec, "cursor_tail", cur, "took", time.Since(began), "held", time.Since(heldAt))
			return &wire.HandoffReply{Node: h.cfg.Node, Stream: req.Stream, Epoch: req.Epoch, RecordTail: rec, CursorTail: cur,
				Digest: o.c.Digest(), TookMS: time.Since(heldAt).Milliseconds()}, nil
		}
		if time.Now().After(deadline) || o.ctx.Err() != nil {
			o.releaseHold(hd)
			o.log.Warn("planned move: target did not reach the tail in time; taking publishes again", "target", req.Target,
				"record_tail", rec, "target_record", ackRec, "cursor_tail", cur, "target_cursor", ackCur, "timeout", timeout)
			return nil, wire.Errorf(wire.CodeTimeout, "stream %s: follower %s acknowledged record %d cursor %d of the owner's %d and %d within %v; the owner takes publishes again",
				req.Stream, req.Target, ackRec, ackCur, rec, cur, timeout)
		}
		time.Sleep(handoffPoll)
	}
}

// handoffTails returns the owner's durable record tail, its written
// cursor tail, and what target last durably acknowledged of each. The
// cursor tail is the written one: cursor events are synced on an interval,
// and the seal syncs them, so a durable tail read here may still grow to
// the written one by the seal.
func (o *owner) handoffTails(target string) (rec, cur, ackRec, ackCur uint64) {
	t := o.c.Tails()
	o.mu.Lock()
	defer o.mu.Unlock()
	a := o.mu.conf.acks[target]
	return o.mu.conf.tail, t.CursorWritten, a.record, a.cursor
}
