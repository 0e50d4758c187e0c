package host

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/streamlog"
	"github.com/brook-streams/brook/pkg/wire"
)

// onSeal is the seal subject's callback. Seals of different streams are
// answered concurrently, each in its own goroutine, within the seals'
// budget of requests in flight (a seal refused overloaded is one the
// recovery asks again).
func (h *Host) onSeal(m *nats.Msg) {
	if !h.sealReqs.take() {
		h.metrics.sealAnswered(&wire.Error{Code: wire.CodeOverloaded})
		h.refuse(h.failer(m.Reply), h.sealReqs)
		return
	}
	started := h.reqs.Go(func() {
		defer h.sealReqs.give()
		reply, e := h.seal(m.Data)
		h.metrics.sealAnswered(e)
		if e != nil {
			h.replyErr(m.Reply, e)
			return
		}
		h.replyJSON(m.Reply, reply)
	})
	if !started {
		h.sealReqs.give()
		e := h.stopping()
		h.metrics.sealAnswered(e)
		h.replyErr(m.Reply, e)
	}
}

// sealedBound is, kept by the replica, the confirmed bound of the owner
// role a seal stopped (owner.confirmedBound), with the stream id and fence
// it was sealed at, so that every later seal at the same fence (the
// recovery's next round, a newer transition after a withdraw) reports it
// too: the role is gone by then, and the copy, fenced, confirms nothing
// more at the sealed epoch. It is lost with the process; a restarted host
// reports no bound, which recovery reads as unknown.
type sealedBound struct {
	streamID, fence, bound uint64
}

// seal fences a copy at the request's fence epoch. The fence is persisted
// before anything else, so the copy's tails cannot grow from an older owner
// once the reply is out; then whatever role the copy played at an older
// epoch stops (an owner fails its waiting publishes with sealed).
func (h *Host) seal(body []byte) (*wire.SealReply, *wire.Error) {
	var req wire.SealRequest
	if e := decodeStrict(body, &req); e != nil {
		return nil, e
	}
	reply, _, e := h.sealCopy(req, slog.LevelInfo)
	return reply, e
}

// sealCopy is seal of a decoded request: one seal alone or one of a batch
// (seals.go). It logs the seal, and the role it stopped, at level: a seal
// alone at info; a batch's seals at debug, which the batch's one line
// counts instead (thousands of copies are sealed in a mass failover, and
// each recovery round seals them again). sp says what the seal stopped
// and how long its steps took.
func (h *Host) sealCopy(req wire.SealRequest, level slog.Level) (reply *wire.SealReply, sp sealSpent, e *wire.Error) {
	c := h.store.Get(req.Stream)
	if c == nil || c.StreamID() != req.StreamID {
		return nil, sp, wire.Errorf(wire.CodeNotFound, "node %s holds no copy of stream %s with id %d", h.cfg.Node, req.Stream, req.StreamID)
	}
	r := h.replica(req.Stream)
	began := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	sp.lock = time.Since(began)
	// The copy may have been replaced while this request waited for mu.
	if c = h.store.Get(req.Stream); c == nil || c.StreamID() != req.StreamID {
		return nil, sp, wire.Errorf(wire.CodeNotFound, "node %s holds no copy of stream %s with id %d", h.cfg.Node, req.Stream, req.StreamID)
	}
	began = time.Now()
	st, err := c.Seal(req.FenceEpoch, req.Transition)
	sp.fence = time.Since(began)
	if errors.Is(err, streamlog.ErrStaleFence) {
		return nil, sp, wire.Errorf(wire.CodeStaleEpoch, "stream %s: fence %d transition %d is stale: %v", req.Stream, req.FenceEpoch, req.Transition, err)
	}
	if err != nil {
		h.log.Error("seal", "stream", req.Stream, "fence", req.FenceEpoch, "err", err)
		return nil, sp, wire.Errorf(wire.CodeInternal, "stream %s: seal: %v", req.Stream, err)
	}
	if s := r.status.Load(); s.role != wire.RoleNone && s.epoch < req.FenceEpoch {
		own := r.own
		began = time.Now()
		sp.stopped = r.stopRoleAt(wire.CodeSealed, level)
		sp.stop = time.Since(began)
		// The owner of the epoch being sealed tells what it confirmed,
		// read after its role stopped: stop fails every waiting publish
		// and waits for the role's goroutines, so no confirm is sent
		// after this and the bound is final.
		if own != nil && s.epoch+1 == req.FenceEpoch {
			r.sealed = sealedBound{streamID: req.StreamID, fence: req.FenceEpoch, bound: own.confirmedBound()}
		}
	}
	// A recovery may promote this copy: build its duplicate window now,
	// while the recovery decides and commits (window.go). A seal of the
	// same log again (the recovery's next round) keeps the build going.
	// Not while a role (at the fence or newer) still runs and owns the
	// window, nor when the copy's own window still describes its log.
	if p := r.pre; r.own == nil && r.fol == nil && !r.win.matches(c, st.Tails) &&
		(p == nil || p.c != c || p.tail != st.Tails.Record || p.digest != st.Tails.RecordDigest) {
		r.pre = h.startPrebuild(c, st.Tails, h.log.With("stream", req.Stream, "fence", req.FenceEpoch))
	}
	var confirmed uint64
	if b := r.sealed; b.streamID == req.StreamID && b.fence == req.FenceEpoch {
		confirmed = b.bound
	}
	h.log.Log(context.Background(), level, "sealed", "stream", req.Stream, "fence", req.FenceEpoch, "transition", req.Transition,
		"record_tail", st.Tails.Record, "cursor_tail", st.Tails.CursorDurable, "confirmed", confirmed)
	h.requestBeat()
	return &wire.SealReply{
		Node:       h.cfg.Node,
		Stream:     req.Stream,
		FenceEpoch: st.Seal.FenceEpoch,
		Transition: st.Seal.Transition,
		RecordHead: st.Tails.Head,
		RecordTail: st.Tails.Record,
		CursorTail: st.Tails.CursorDurable,
		LogEpochs:  st.LogEpochs,
		Digest:     st.Digest,
		Confirmed:  confirmed,
	}, sp, nil
}

// sealSpent is what one seal stopped and how long its steps took, for the
// batch's log line: waiting for the copy's lock (held by an apply or
// another seal of the copy), the fence's synced write (which waits for
// the copy's writes in flight first) and stopping the role (which waits
// for its goroutines).
type sealSpent struct {
	stopped           string // the role stopped, "" for none
	lock, fence, stop time.Duration
}
