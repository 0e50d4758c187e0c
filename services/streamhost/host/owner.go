package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/policy"
	"github.com/brook-streams/brook/pkg/streamlog"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/streamhost/dedupe"
	"github.com/brook-streams/brook/services/streamhost/envelope"
)

// Limits of the owner's queues and batches.
const (
	intakeQueue    = 256     // publishes queued for the appender per copy
	maxAppendBatch = 1024    // records per Append
	maxAppendBytes = 4 << 20 // bytes per Append
	// liveFollower is how recently a follower must have asked to hold
	// back retention and a graceful shutdown.
	liveFollower = 10 * time.Second
)

// maxProducerName bounds a Brook-Producer header: the record envelope
// stores producer ids of at most that many bytes.
const maxProducerName = envelope.MaxProducer

// owner is the owner role of one copy at one epoch. It takes publishes and
// confirms them by W, serves fetches, cursor commits and its followers.
type owner struct {
	h      *Host
	c      *streamlog.Copy
	stream string
	id     uint64
	epoch  uint64
	log    *slog.Logger
	// idHeader is id in decimal, for the wire.HeaderStreamID of replies.
	idHeader string
	// started is when the role began serving (wire.HeaderServingFor).
	started time.Time
	// begun is closed once the copy's begin of this epoch is durable
	// (streamlog.Copy.BeginEpochAsync). Until then the role serves its
	// followers nothing (serveRepl): a crash before it may lose the begin,
	// and the copy, back sealed at this epoch, serves it again
	// (docs/failover.md, "The new owner's epoch begins before it is
	// durable"), which is safe only if nothing it wrote at it left the host.
	begun <-chan struct{}

	ctx    context.Context // cancelled when the role stops
	cancel context.CancelFunc
	wg     sync.WaitGroup // the appender and request goroutines

	// Intake: the publish callback hands messages to the appender over
	// in. inMu guards closing in against a callback sending on it;
	// inStop is closed first, so that a callback waiting on a full in
	// (the appender waits for the disk) gives up rather than hold inMu.
	inMu     sync.RWMutex
	inClosed bool
	in       chan intakeMsg
	inStop   chan struct{}
	// written hands the appends written to the completer, in order.
	// ahead holds a slot for each append from before it is written until
	// the completer is done with it: at most maxWrittenAhead are written
	// and not yet durable.
	written chan *writtenAppend
	ahead   chan struct{}
	// closing holds the error code publishes get once intake stopped.
	closing atomic.Pointer[string]
	// drainFrom is the NATS connection's reconnect count when intake
	// stopped (stopIntake sets it before closing).
	drainFrom atomic.Uint64

	dd *dedupe.Window // the appender goroutine's only
	// ddFilled: fillDedupe gave dd the log's window (window.go); until
	// then dd describes nothing and is never left to the copy.
	ddFilled bool

	// replReqs counts the followers' replication requests this role
	// serves at once (long polls parked included); its limit follows the
	// assignment's followers (replSlots).
	replReqs *budget

	// intakeSub takes the stream's publishes, publish batches, fetches
	// and cursor commits (onStreamOp); the replication link serves its
	// followers' requests and acks apart (stopRepl; on NATS a second
	// subscription). One subscription for the four operations, not one
	// each: nats.go runs a goroutine per subscription, and each is a SUB
	// through the cluster's routes when a failover promotes thousands of
	// copies at once. Replication keeps its own: a publish that waits for
	// room in a full intake queue holds the intake's subscription, and
	// the followers' acks must still come through.
	intakeSub *nats.Subscription
	// stopClients ends the client link's requests (link_client.go; nil
	// without the direct link): they reach onStreamOp as the
	// subscription's do.
	stopClients func()
	// stopRepl ends the followers' requests and acks (replLink.serve).
	stopRepl func()

	// short mirrors mu.conf.short() for the appender, which checks it
	// before writing without taking mu.
	short atomic.Bool
	// settledFloor is the record tail of the copy's history start (at most
	// its tail when the role started): every record below it is on every
	// copy a later recovery can promote, so a reader position up to it is
	// safe even before the watermark reaches it (settledPoint). Set once
	// before the role subscribes; read without mu.
	settledFloor uint64

	// track guards stopped: once set (by stop), goTracked starts no
	// request goroutine, so stop's wait for the role's WaitGroup ends. Its
	// own mutex, not mu: every request the owner serves starts under it,
	// in the intake subscription's callback among others, which then
	// need not wait for the confirm bookkeeping.
	track struct {
		sync.Mutex
		stopped bool
	}

	// mu guards the fields in it. Replies are built under it and sent
	// after (send); nothing holds it across an fsync or a NATS request.
	mu struct {
		sync.Mutex
		// conf is the confirm bookkeeping: waiters, acks, the owner's
		// durable tail, the watermark and deadlines (confirm.go).
		conf confirmer
		// startTail is the record tail the role started at: an earlier
		// role of this copy at the same epoch (before a restart) may have
		// confirmed anything below it.
		startTail uint64
		wmCh      chan struct{} // closed and replaced when the watermark advances
		timer     *time.Timer   // fires expire at the earliest deadline
		// diverged is the record tail at which each follower last failed
		// the log matching check, so that a follower retrying is logged
		// once.
		diverged map[string]uint64
		// misnamed holds, per node a replication subject named, the other
		// node the request's body last claimed, so that a host sending
		// under another's name is logged once per claim, not on every
		// retry.
		misnamed map[string]string
		// move is the planned move's hold of intake and the writes in
		// flight (move.go).
		move moveState
	}
}

// startOwner starts the owner role of c at a's epoch, at the copy's own
// tails, under the stream's floor of copies minCopies; pre is the
// duplicate window its last seal began to build, if any (window.go); begun
// is closed once the epoch's begin is durable (owner.begun).
func startOwner(h *Host, c *streamlog.Copy, a wire.Assignment, minCopies int, floor uint64, pre *prebuilt, begun <-chan struct{}) (*owner, error) {
	ctx, cancel := context.WithCancel(h.bgCtx)
	o := &owner{
		h:        h,
		c:        c,
		stream:   a.Stream,
		id:       a.StreamID,
		idHeader: strconv.FormatUint(a.StreamID, 10),
		started:  time.Now(),
		begun:    begun,
		epoch:    a.Epoch,
		log:      h.log.With("stream", a.Stream, "epoch", a.Epoch, "role", wire.RoleOwner),
		ctx:      ctx,
		cancel:   cancel,
		in:       make(chan intakeMsg, intakeQueue),
		inStop:   make(chan struct{}),
		written:  make(chan *writtenAppend, maxWrittenAhead),
		ahead:    make(chan struct{}, maxWrittenAhead),
		replReqs: newBudget("replication requests of stream "+a.Stream, "in flight", replSlots(0)),
		dd:       dedupe.New(dedupe.DefaultPerProducer, dedupe.DefaultProducers),
	}
	tail := c.Tails().Record
	// A start above the copy's tail comes only from an operator's
	// accept-loss below the confirmed prefix: nothing past the copy's own
	// tail is settled here.
	o.settledFloor = min(floor, tail)
	o.mu.Lock()
	o.mu.conf = newConfirmer(a.Stream, a.StreamID, a.Epoch, h.cfg.ConfirmTimeout, tail)
	o.mu.startTail = tail
	o.mu.wmCh = make(chan struct{})
	o.mu.diverged = make(map[string]uint64)
	o.mu.misnamed = make(map[string]string)
	o.setAssignmentLocked(a, minCopies)
	if o.short.Load() {
		o.log.Warn("the assignment holds fewer copies than the stream's min_copies: publishes are refused until copies are added",
			"copies", o.mu.conf.copies, "min_copies", minCopies)
	}
	// With W = 1 the owner's own tail is the watermark: readers must see
	// the copy's records at once, not after the next publish or ack.
	o.releaseLocked()
	o.mu.Unlock()

	// The window is filled before any publish is taken: a retry of a
	// record the previous owner wrote (its reply lost in the failover)
	// must find it.
	o.fillDedupe(pre)

	var err error
	// Followers first, so that the first publishes meet followers that can
	// already ack.
	o.stopRepl, err = h.link.serve(a.Stream, a.Epoch, o.onRepl)
	if err != nil {
		err = fmt.Errorf("serve replication: %w", err)
	} else if o.intakeSub, err = h.nc.Subscribe(wire.StreamOpWildcard(a.Stream), o.unlessSuperseded(o.onStreamOp)); err != nil {
		err = fmt.Errorf("subscribe %s: %w", wire.StreamOpWildcard(a.Stream), err)
	} else if h.direct != nil {
		o.stopClients = h.direct.serveClients(a.Stream, o.onStreamOp)
	}
	o.wg.Add(2)
	go o.appender()
	go o.completer()
	if err != nil {
		o.stop(wire.CodeNotOwner)
		return nil, err
	}
	h.ownedIDs.put(o)
	o.announce(a)
	return o, nil
}

// announce tells clients retrying across a failover that the stream has an
// owner taking publishes (wire.OwnerNotice): they try again at once rather
// than at the end of their backoff. The publish only buffers; a notice
// lost is a hint lost, and the clients' backoff still finds the owner.
func (o *owner) announce(a wire.Assignment) {
	data, err := json.Marshal(wire.OwnerNotice{Stream: a.Stream, StreamID: a.StreamID, Epoch: a.Epoch, Node: o.h.cfg.Node})
	if err == nil {
		err = o.h.nc.Publish(wire.OwnerNoticeSubject(a.Stream, o.h.cfg.Node), data)
	}
	if err != nil {
		o.log.Debug("owner notice not sent", "err", err)
	}
}

// setAssignmentLocked takes the followers and W of a (same epoch) and the
// stream's floor minCopies.
func (o *owner) setAssignmentLocked(a wire.Assignment, minCopies int) {
	o.mu.conf.setAssignment(a.Owner, a.Followers, policy.StampW(a.Policy, len(a.Copies())), minCopies)
	o.short.Store(o.mu.conf.short())
	o.replReqs.setLimit(replSlots(len(o.mu.conf.followers)))
}

// update applies an assignment change at the same epoch (a follower added
// or removed, another policy or another floor).
func (o *owner) update(a wire.Assignment, minCopies int) {
	o.mu.Lock()
	cf := &o.mu.conf
	before, w, wasShort, floor := slices.Clone(cf.followers), cf.w, cf.short(), cf.minCopies
	o.setAssignmentLocked(a, minCopies)
	changed := w != cf.w || !slices.Equal(before, cf.followers) || floor != cf.minCopies
	after, newW, short, copies := slices.Clone(cf.followers), cf.w, cf.short(), cf.copies
	out := o.releaseLocked()
	o.mu.Unlock()
	o.send(out)
	if changed {
		o.log.Info("owner assignment updated", "followers", after, "w", newW, "min_copies", minCopies,
			"previous_followers", before, "previous_w", w, "previous_min_copies", floor)
	}
	switch {
	case short && !wasShort:
		o.log.Warn("the assignment holds fewer copies than the stream's min_copies: publishes are refused until copies are added",
			"copies", copies, "min_copies", minCopies)
	case wasShort && !short:
		o.log.Info("the assignment holds min_copies again: publishes are taken", "copies", copies, "min_copies", minCopies)
	}
}

// floorError is the refusal of a publish while the assignment is below
// the stream's floor: nothing is confirmed below it.
func (o *owner) floorError() *wire.Error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.mu.conf.floorError()
}

// releaseLocked lets the confirmer release what it can (confirmer.release),
// wakes the watermark's waiters if it advanced, and arms the timer for the
// earliest deadline left.
func (o *owner) releaseLocked() []outgoing {
	wm := o.mu.conf.watermark
	out := o.mu.conf.release()
	if o.mu.conf.watermark > wm {
		close(o.mu.wmCh)
		o.mu.wmCh = make(chan struct{})
		o.h.changed.mark(o.stream) // the heartbeat reports it
	}
	o.armLocked(time.Now())
	return out
}

// send delivers prepared replies, outside any lock, and counts them.
func (o *owner) send(out []outgoing) {
	o.h.metrics.sent(out)
	for _, r := range out {
		switch {
		case r.fail != nil:
			o.h.replyErr(r.to, r.fail)
		case r.pub != nil:
			o.sendPubReply(r.to, r.pub)
		default:
			o.h.replyJSON(r.to, r.ok)
		}
	}
}

// confirmed returns the confirmed watermark.
func (o *owner) confirmed() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.mu.conf.watermark
}

// confirmedBound is an upper bound of every offset confirmed at the role's
// epoch by this copy: the watermark (confirms are sent only below it and it
// never moves down) or the tail the role started at, whichever is higher.
// After stop it is final.
func (o *owner) confirmedBound() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return max(o.mu.conf.watermark, o.mu.startTail)
}

// settledPoint returns the point below which a reader's position is safe: the
// confirmed watermark, or the history start if that is higher (right
// after a failover, until the followers acknowledge). Records are still
// served only below the watermark.
func (o *owner) settledPoint() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.settledAt(o.mu.conf.watermark)
}

// settledAt is the settled point when the watermark is wm.
func (o *owner) settledAt(wm uint64) uint64 { return max(wm, o.settledFloor) }

// wmState returns the watermark and a channel closed when it advances.
func (o *owner) wmState() (uint64, <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.mu.conf.watermark, o.mu.wmCh
}

// closedErr is the error a publish gets after intake stopped.
func (o *owner) closedErr() *wire.Error {
	code := wire.CodeNotOwner
	if p := o.closing.Load(); p != nil {
		code = *p
	}
	return closeError(code, o.stream)
}

func closeError(code, stream string) *wire.Error {
	switch code {
	case wire.CodeSealed:
		return wire.Errorf(code, "stream %s: copy is sealed for a recovery; not confirmed", stream)
	case wire.CodeShuttingDown:
		return wire.Errorf(code, "stream %s: host is shutting down; not confirmed", stream)
	case wire.CodeStreamUnknown:
		return wire.Errorf(code, "stream %s: this host holds no copy", stream)
	default:
		return wire.Errorf(code, "stream %s: this host is no longer the owner; not confirmed", stream)
	}
}

// goTracked runs f in a goroutine the role's stop waits for, unless the
// role has stopped.
func (o *owner) goTracked(f func()) bool {
	o.track.Lock()
	if o.track.stopped {
		o.track.Unlock()
		return false
	}
	o.wg.Add(1)
	o.track.Unlock()
	o.h.pool.Go(func() {
		defer o.wg.Done()
		f()
	})
	return true
}

// onStreamOp is the callback of the owner's one subscription to the stream's
// data-plane subjects (wire.StreamOpWildcard): it hands each message to
// its operation's handler, in turn: a handler holds the operations behind
// it. A publish waits when the intake queue is full (enqueue), holding the
// stream's later messages in NATS (its fetches and cursor commits among
// them, which then share the subscription's pending limits with the
// publishes and may be dropped with them as a slow consumer's) until the
// appender has taken one; a cursor commit at or below the watermark is
// written here (onCommit, a write without an fsync); fetches and waiting
// commits go to their own goroutines at once.
func (o *owner) onStreamOp(m *nats.Msg) {
	switch v := wire.StreamOp(m.Subject); v {
	case wire.OpPublish:
		o.onPublish(m)
	case wire.OpPublishBatch:
		if m.Header.Get(frame.HeaderClientLink) != "" {
			o.onClientHello(m)
			return
		}
		o.onPublishBatch(m)
	case wire.OpFetch:
		o.onFetch(m)
	case wire.OpCommit:
		o.onCommit(m)
	default:
		o.h.replyErr(m.Reply, wire.Errorf(wire.CodeBadRequest,
			"stream %s: no operation %q (%s, %s, %s or %s)", o.stream, v,
			wire.OpPublish, wire.OpPublishBatch, wire.OpFetch, wire.OpCommit))
	}
}

// onPublish takes a publish (onStreamOp). It only checks the size and
// queues the message: the appender writes it.
func (o *owner) onPublish(m *nats.Msg) {
	if len(m.Data) > o.h.cfg.MaxPayload {
		o.refusePublish(m.Reply, wire.Errorf(wire.CodePayloadTooLarge,
			"record of %d bytes is over this host's limit of %d", len(m.Data), o.h.cfg.MaxPayload))
		return
	}
	o.enqueue(m)
}

// enqueue hands a publish or publish batch to the appender.
func (o *owner) enqueue(m *nats.Msg) {
	o.inMu.RLock()
	defer o.inMu.RUnlock()
	if o.inClosed {
		o.refusePublish(m.Reply, o.closedErr())
		return
	}
	// A full queue blocks this subscription's callback, which holds the
	// next publishes in NATS: backpressure instead of unbounded memory.
	// Until the intake stops: then the publish is refused, not written.
	select {
	case o.in <- intakeMsg{m: m, at: time.Now()}:
	case <-o.inStop:
		o.refusePublish(m.Reply, o.closedErr())
	}
}

// intakeMsg is a publish or publish batch queued for the appender, with
// when it was received (the intake stage's start).
type intakeMsg struct {
	m  *nats.Msg
	at time.Time
}

// appender writes queued publishes: whatever is queued goes into one Append
// (one synced batch, shared with other copies' appends by the store).
func (o *owner) appender() {
	defer o.wg.Done()
	defer close(o.written)
	for {
		in, ok := <-o.in
		if !ok {
			return
		}
		now := time.Now()
		o.h.metrics.stage(stageIntake, now.Sub(in.at))
		batch := []*nats.Msg{in.m}
		size := len(in.m.Data)
	drain:
		for len(batch) < maxAppendBatch && size < maxAppendBytes {
			select {
			case in, ok := <-o.in:
				if !ok {
					break drain
				}
				o.h.metrics.stage(stageIntake, now.Sub(in.at))
				batch = append(batch, in.m)
				size += len(in.m.Data)
			default:
				break drain
			}
		}
		if o.closing.Load() != nil {
			e := o.closedErr()
			for _, m := range batch {
				o.refusePublish(m.Reply, e)
			}
			continue
		}
		o.appendOrHold(batch) // move.go: held while a planned move hands off
	}
}

// staleOwnerReplyDelay is how long an owner of an older stream of a name
// holds its not_owner answer to a request naming a newer stream id.
const staleOwnerReplyDelay = 500 * time.Millisecond

// checkStreamID refuses a request whose wire.HeaderStreamID names another
// stream of this name than the one this owner writes to; stale is set when
// the request names a newer stream than this owner's.
func (o *owner) checkStreamID(m *nats.Msg) (werr *wire.Error, stale bool) {
	h := m.Header.Get(wire.HeaderStreamID)
	if h == "" {
		return nil, false
	}
	id, err := strconv.ParseUint(h, 10, 64)
	switch {
	case err != nil:
		return wire.Errorf(wire.CodeBadRequest, "%s must be a decimal stream id, not %q", wire.HeaderStreamID, h), false
	case id < o.id:
		return wire.Errorf(wire.CodeNotFound, "stream %s id %d was deleted; the stream of that name is now id %d", o.stream, id, o.id), false
	case id > o.id:
		return wire.Errorf(wire.CodeNotOwner, "this host owns stream %s id %d, not id %d", o.stream, o.id, id), true
	}
	return nil, false
}

// refuseOtherStream answers a request (publish, fetch or cursor commit)
// that names another stream of this name than this owner's, and reports
// whether it did; the caller then does nothing else with the request. A
// not_owner (the request names a newer stream) is held back by
// staleOwnerReplyDelay plus hold, the longest the newer stream's owner may
// keep the request on purpose.
func (o *owner) refuseOtherStream(m *nats.Msg, hold time.Duration) bool {
	werr, stale := o.checkStreamID(m)
	if werr == nil {
		return false
	}
	if !stale {
		o.h.replyErr(m.Reply, werr)
		return true
	}
	// This owner is of an older stream of the name and has not learnt of
	// the newer one yet: the newer one's owner, if it serves already, gets
	// the same request and must answer first, or the client would retry a
	// publish (or commit) that owner is about to confirm. Ask for the
	// assignments now.
	o.h.requestPull()
	reply := m.Reply
	time.AfterFunc(staleOwnerReplyDelay+hold, func() { o.h.replyErr(reply, werr) })
	return true
}

// produced is a publish's position in an append batch.
type produced struct {
	reply    string
	producer string
	seq      uint64
	index    int // index in the appended data, or -1 for a repeat
	repeatOf uint64
	// repeatIdx is the index of the first write of a repeat within the
	// same batch, or -1.
	repeatIdx int
	// batch is the publish batch the record is of, rec its index there
	// (pubbatch.go); reply is then "".
	batch *pubBatchReq
	rec   int
}

// appendBatch writes batch and hands it to the completer, reporting
// whether it did: the write counted in flight by enterWrite then ends in
// complete (leaveWrite), once durable; otherwise the caller ends it.
func (o *owner) appendBatch(batch []*nats.Msg) (handed bool) {
	if o.short.Load() {
		// Below the stream's floor nothing is written, so nothing can be
		// confirmed later either.
		// A publish naming another stream id still gets the answer of
		// one (refuseOtherStream's delay), not a retryable refusal.
		e := o.floorError()
		for _, m := range batch {
			if werr, _ := o.checkStreamID(m); werr != nil {
				o.h.metrics.publishRefused(werr.Code, 1)
				o.refuseOtherStream(m, 0)
				continue
			}
			o.refusePublish(m.Reply, e)
		}
		return false
	}
	now := time.Now()
	st := staging{data: make([][]byte, 0, len(batch)), items: make([]produced, 0, len(batch))}
	for _, m := range batch {
		if werr, _ := o.checkStreamID(m); werr != nil {
			o.h.metrics.publishRefused(werr.Code, 1)
			o.refuseOtherStream(m, 0)
			continue
		}
		if isPubBatch(m) {
			o.stagePubBatch(&st, m)
			continue
		}
		it := produced{reply: m.Reply, index: -1, repeatIdx: -1}
		if p := m.Header.Get(wire.HeaderProducer); p != "" {
			seq, err := strconv.ParseUint(m.Header.Get(wire.HeaderSequence), 10, 64)
			if err != nil || len(p) > maxProducerName {
				o.refusePublish(m.Reply, wire.Errorf(wire.CodeBadRequest,
					"%s needs %s as a decimal sequence and a producer of at most %d bytes", wire.HeaderProducer, wire.HeaderSequence, maxProducerName))
				continue
			}
			it.producer, it.seq = p, seq
		}
		o.stage(&st, it, m.Data)
	}
	w := &writtenAppend{items: st.items, n: len(st.data), began: now}
	// A slot before the write, so that the bound is exact: the completer
	// frees it (complete) once it is done with the append.
	select {
	case o.ahead <- struct{}{}:
	case <-o.ctx.Done():
		o.refuseAppend(w, o.ctx.Err())
		return false
	}
	if len(st.data) > 0 {
		var err error
		w.first, w.durable, err = o.c.AppendWritten(o.ctx, st.data)
		if err != nil {
			<-o.ahead
			o.refuseAppend(w, err)
			return false
		}
		o.h.metrics.appended(len(st.data), st.payload)
		// The duplicate window takes the records now, written but not yet
		// durable: a retry in the next batch, written while this one's
		// fsync runs, must find them. Should the group commit fail, the
		// store has failed (fail-stop) and nothing is confirmed here again.
		for _, it := range w.items {
			if it.index >= 0 && it.producer != "" {
				o.dd.Record(it.producer, it.seq, w.first+uint64(it.index))
			}
		}
	}
	// The completer answers it once durable; until then it stays a write
	// in flight for a planned move's hold (leaveWrite in complete).
	o.written <- w
	return true
}

// writtenAppend is an append the appender wrote (or, with no record to
// write, only repeats) and hands to the completer, in the order written.
type writtenAppend struct {
	items   []produced
	first   uint64
	n       int                         // records written from first on
	durable func(context.Context) error // nil: nothing was written
	began   time.Time
}

// maxWrittenAhead bounds the appends written and not yet durable (the
// completer included; owner.ahead): the appender writes the next batch
// while the earlier ones' group commits run (issue 16), so that the next
// fsync can start as soon as one ends and followers get the records before
// the owner's fsync ends. It was 4 queued to the completer, but one more
// at the completer and one at the appender (blocked handing it over) made
// 6 in all; the figures in docs/benchmarks.md were measured so, and 6 is
// now the exact bound.
const maxWrittenAhead = 6

// completer waits for each written append to become durable, in the order
// they were written, and then queues its publishes for their confirms.
func (o *owner) completer() {
	defer o.wg.Done()
	for w := range o.written {
		o.complete(w)
	}
}

// complete waits for w's group commit and queues its publishes for their
// confirms (the confirmer's waiters, ascending as written), or refuses them
// if it failed.
func (o *owner) complete(w *writtenAppend) {
	defer func() { <-o.ahead }()
	defer o.leaveWrite()
	if w.durable != nil {
		err := w.durable(o.ctx)
		o.h.metrics.stage(stageAppend, time.Since(w.began))
		if err != nil {
			o.refuseAppend(w, err)
			return
		}
	}
	deadline := w.began.Add(o.h.cfg.ConfirmTimeout)
	o.mu.Lock()
	if w.n > 0 {
		o.mu.conf.durable(w.first + uint64(w.n))
	}
	for _, it := range w.items {
		off, dup := it.repeatOf, true
		switch {
		case it.index >= 0:
			off, dup = w.first+uint64(it.index), false
		case it.repeatIdx >= 0:
			off = w.first + uint64(it.repeatIdx)
		}
		var wt *waiter
		if it.batch != nil {
			// One waiter for the whole batch, once its last record
			// is placed: at its highest offset, which is above every
			// earlier pending waiter's.
			if wt = it.batch.place(it.rec, off, dup, deadline); wt == nil {
				continue
			}
		} else {
			wt = &waiter{reply: it.reply, offset: off, deadline: deadline, dup: dup}
		}
		o.mu.conf.wait(wt)
	}
	out := o.releaseLocked()
	o.mu.Unlock()
	o.send(out)
}

// refuseAppend answers the publishes of an append that failed with err.
func (o *owner) refuseAppend(w *writtenAppend, err error) {
	e := o.appendError(err)
	if e.Code == wire.CodeInternal {
		o.log.Error("append", "err", err)
	}
	for _, it := range w.items {
		if it.batch != nil {
			// The batch is refused whole, once; its retry finds
			// the records this one repeats.
			if it.batch.refuse() {
				o.refusePublish(it.batch.reply, e)
			}
			continue
		}
		if it.index >= 0 || it.repeatIdx >= 0 {
			o.refusePublish(it.reply, e)
			continue
		}
		o.addRepeat(it, w.began) // a repeat of an earlier write still waits for it
	}
}

// refusePublish answers a publish with e and counts it.
func (o *owner) refusePublish(reply string, e *wire.Error) {
	o.h.metrics.publishRefused(e.Code, 1)
	o.h.replyErr(reply, e)
}

// addRepeat queues a repeat of an earlier confirmed-or-pending write.
func (o *owner) addRepeat(it produced, now time.Time) {
	o.mu.Lock()
	o.mu.conf.wait(&waiter{reply: it.reply, offset: it.repeatOf, deadline: now.Add(o.h.cfg.ConfirmTimeout), dup: true})
	out := o.releaseLocked()
	o.mu.Unlock()
	o.send(out)
}

// appendError maps a storage error of Append to a wire error.
func (o *owner) appendError(err error) *wire.Error {
	switch {
	case errors.Is(err, streamlog.ErrSealed):
		return closeError(wire.CodeSealed, o.stream)
	case o.h.store.Failure() != nil:
		// The store failed (fail-stop): nothing is confirmed here any
		// more, the host hands its streams over (storeFailed), and the
		// client retries at the new owner. This is the answer even when
		// the role's stop (storeFailed's) ended the wait first. A follower
		// may hold the record (it is replicated while the owner's fsync
		// runs): unconfirmed, it is kept or cut by the failover like any
		// other (docs/failover.md).
		return wire.Errorf(wire.CodeUnavailable, "stream %s: this host's store failed; not confirmed: %v", o.stream, err)
	case o.closing.Load() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, streamlog.ErrClosed)):
		return o.closedErr()
	case errors.Is(err, streamlog.ErrClosed):
		return closeError(wire.CodeShuttingDown, o.stream)
	case errors.Is(err, streamlog.ErrDeleted):
		return closeError(wire.CodeStreamUnknown, o.stream)
	default:
		return wire.Errorf(wire.CodeInternal, "stream %s: append: %v", o.stream, err)
	}
}

// armLocked sets the timer for the earliest confirm deadline, unless it is
// set or none waits.
func (o *owner) armLocked(now time.Time) {
	if o.mu.timer != nil {
		return
	}
	if d, ok := o.mu.conf.nextDeadline(); ok {
		o.mu.timer = time.AfterFunc(d.Sub(now), o.expire)
	}
}

// expire answers confirm_timeout to every publish past its deadline
// (confirmer.expire) and arms the timer for the next one.
func (o *owner) expire() {
	o.mu.Lock()
	o.mu.timer = nil
	now := time.Now()
	out := o.mu.conf.expire(now)
	o.armLocked(now)
	o.mu.Unlock()
	o.send(out)
}

// stopIntake stops taking publishes, fetches and cursor commits; queued
// publishes that are not written yet fail with code. Followers are still
// served and written publishes may still be confirmed.
//
// The intake subscription is drained, not unsubscribed: an Unsubscribe
// drops the messages NATS has already handed to the subscription (or sent
// before it heard of the unsubscribe) whose callback has not run yet, and
// a publish among them would get no answer at all, its client waiting out
// its request timeout (TestPublishesAcrossTheSealAnswered). Drained, each
// still reaches its callback, which now refuses it with code (closing is
// set first): a retryable refusal the client acts on at once. Drain does
// not wait; the callbacks that run after stop returns only refuse, or
// stay silent once the copy has a newer role (unlessSuperseded). A
// reconnect during the drain leaves the server subscribed for the rest of
// the connection; watchDrain ends that connection.
func (o *owner) stopIntake(code string) {
	if o.closing.Load() != nil {
		return // stopped before: the subscription drains already
	}
	reconnects := o.h.nc.Stats().Reconnects
	o.drainFrom.Store(reconnects) // before closing: unlessSuperseded reads it after
	if !o.closing.CompareAndSwap(nil, &code) {
		return
	}
	// A callback waiting to queue gives up now: closing in below waits
	// for it, and the appender it waits for may wait for the disk.
	close(o.inStop)
	if o.stopClients != nil {
		// A client's request that comes after this is answered as one
		// to a stream nobody serves here: it was not written.
		o.stopClients()
	}
	if s := o.intakeSub; s != nil {
		err := s.Drain()
		switch {
		case err == nil:
			if !o.h.reqs.Go(func() { o.h.watchDrain([]*nats.Subscription{s}, reconnects) }) {
				o.log.Debug("host stopping: drain not watched")
			}
		case !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, nats.ErrBadSubscription) &&
			!errors.Is(err, nats.ErrConnectionDraining):
			o.log.Warn("drain", "subject", s.Subject, "err", err)
		}
	}
	o.inMu.Lock()
	if !o.inClosed {
		o.inClosed = true
		close(o.in)
	}
	o.inMu.Unlock()
}

// unlessSuperseded wraps an intake callback: once the role has stopped,
// the connection has reconnected since, and the copy plays another role
// (a newer owner or follower role, on this host), the callback drops the
// message unanswered. A drained subscription that a reconnect made the
// server route to again (watchDrain) gets the publishes the new role, or
// the new owner elsewhere, gets too: a refusal from the ended role ("not
// confirmed", retried by a client) of a publish the new role writes and
// confirms would make it be written twice. With no reconnect the drain's
// UNSUB reached the server before the role's end was answered (the seal
// reply goes out after it on the same connection), so before any newer
// role subscribed: what the drained subscription still gets went to it
// alone, and is refused, never dropped.
func (o *owner) unlessSuperseded(cb nats.MsgHandler) nats.MsgHandler {
	return func(m *nats.Msg) {
		if o.closing.Load() != nil && o.h.nc.Stats().Reconnects != o.drainFrom.Load() && o.superseded() {
			return
		}
		cb(m)
	}
}

// superseded reports whether the copy has a role that is not this one.
func (o *owner) superseded() bool {
	r := o.h.lookupReplica(o.stream)
	if r == nil {
		return false
	}
	st := r.status.Load()
	return st != nil && st.role != wire.RoleNone && st.own != o
}

// failPending fails every publish still waiting for its confirm with code,
// and every later one too.
func (o *owner) failPending(code string) {
	o.mu.Lock()
	if o.mu.timer != nil {
		o.mu.timer.Stop()
		o.mu.timer = nil
	}
	out := o.mu.conf.fail(code)
	o.mu.Unlock()
	o.send(out)
}

// settled reports whether no write is in flight (an append written whose
// group commit the completer still waits for would be confirmed a moment
// later), no publish waits for a confirm and every live follower has
// acknowledged the owner's tail.
func (o *owner) settled() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.mu.move.inflight == 0 && o.mu.conf.settled(time.Now())
}

// stop ends the role: its intake subscription drains (stopIntake) and its
// replication subscription is gone, waiting publishes fail with code, and
// when it returns every goroutine the role started (appender, completer,
// request goroutines) has returned. What it does not wait for, as it is
// called under the replica's lock and the drain ends after a round trip to
// the server: the drained subscription's callbacks, which run on NATS's
// goroutines after it returns and only refuse (closing is set, the intake
// closed, goTracked refuses) or stay silent (unlessSuperseded), and
// watchDrain, which runs in the host's request tracker (reqs) that the
// host's shutdown waits for.
func (o *owner) stop(code string) {
	// Host waits naming the stream learn at once that it is not owned
	// here any more (idlewait.go).
	o.h.ownedIDs.remove(o)
	o.h.parked.changed(o.stream)
	o.stopIntake(code)
	if o.stopRepl != nil {
		o.stopRepl()
	}
	o.failPending(code)
	o.endRequests()
}

// endRequests cancels the role and waits for its goroutines: once stopped
// is set, goTracked starts no more of them.
func (o *owner) endRequests() {
	o.track.Lock()
	o.track.stopped = true
	o.track.Unlock()
	o.cancel()
	o.wg.Wait()
}

// retentionKeepFrom is the lowest offset retention must keep: nothing at or
// above the watermark, and nothing a live follower has not acknowledged.
func (o *owner) retentionKeepFrom(now time.Time) uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.mu.conf.retentionKeepFrom(now)
}

// ack records what follower node holds and releases the confirms that
// makes possible.
func (o *owner) ack(node string, record, cursor uint64) {
	o.mu.Lock()
	o.mu.conf.acked(node, record, cursor, time.Now())
	out := o.releaseLocked()
	o.mu.Unlock()
	o.send(out)
}

// isFollower reports whether node follows this copy in the assignment.
func (o *owner) isFollower(node string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.mu.conf.isFollower(node)
}

// lagTails returns the owner's durable tail and each follower with its
// acked tail, read together (metrics).
func (o *owner) lagTails() (tail uint64, followers []string, acked []uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.mu.conf.tail, slices.Clone(o.mu.conf.followers), o.mu.conf.followerTails()
}

// fillDedupe gives the owner its duplicate window: pre's, if it was built
// from the log as it stands, or else one built now (buildWindow). It runs
// before the role subscribes to publishes, so the appender (the window's
// only user) has not started.
func (o *owner) fillDedupe(pre *prebuilt) {
	t := o.c.Tails()
	if w := pre.take(o.ctx, o.c, t); w != nil {
		o.dd, o.ddFilled = w, true
		if pre.scanned > 0 {
			o.log.Info("duplicate window taken from the seal's prebuild", "records_scanned", pre.scanned, "producers", w.Producers())
		}
		return
	}
	w, st, err := buildWindow(o.ctx, o.c, t, o.h.cfg.DedupeRebuildRecords, o.h.cfg.DedupeRebuildBytes, o.log)
	if err != nil {
		return // stopped: the role is ending
	}
	o.dd, o.ddFilled = w, true
	if st.scanned > 0 {
		o.log.Info("duplicate window rebuilt from the log", "records_scanned", st.scanned, "bytes_scanned", st.bytes,
			"sequences", st.sequences, "producers", w.Producers(), "took", st.took)
	}
}
