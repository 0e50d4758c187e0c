package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/streamlog"
	"github.com/brook-streams/brook/pkg/wire"
)

// Follower backoff bounds, and after how many failed requests in a row the
// follower asks for a fresh assignment snapshot (the owner may have moved).
const (
	backoffMin       = 10 * time.Millisecond
	backoffMax       = 500 * time.Millisecond
	repullAfterFails = 5
	// replSlack is the least time past its long poll a follower waits for
	// the owner's answer before it asks again (replTimeout): the owner
	// answers at the end of the wait at the latest, so only a lost request
	// (its owner's or its own NATS server went away) or a slow one runs
	// into it. A late answer after a retry is dropped; the retry asks for
	// the same records.
	replSlack = 300 * time.Millisecond
	// busyWait is the long poll after a batch that carried something:
	// the owner answers as soon as there is more, so while data flows the
	// wait only bounds how long a lost request goes unnoticed.
	busyWait  = 500 * time.Millisecond
	replBytes = 1 << 20
	// followerAhead bounds the batches a follower has written but not yet
	// made durable: it asks for the next batch as soon as one is written
	// (its store's fsync and the request's round trip overlap), and waits
	// for the oldest to be durable once this many are outstanding.
	followerAhead = 4
	// noOwnerRetry is how soon a follower asks again, its first
	// noOwnerRetries times in a row, when nobody serves its stream at its
	// epoch (errNoServer; on NATS, no responders): after a failover or a
	// planned move the followers apply the commit at about the time the
	// new owner does, and the new owner serves only once promoted (a few
	// ms later: its epoch's fsync, its window). The exponential backoff
	// from backoffMin made the first follower ack to the new owner, which
	// its first confirm needs, wait 10 to 30 ms more. The link answers
	// errNoServer at once (the NATS server does), so these retries cost
	// the owner nothing and the link one short request each, at most
	// noOwnerRetries per follower and epoch; after them the backoff goes
	// on as before. They are for a role's first answer only: an owner
	// that answered and then has nobody serving its stream is gone
	// (killed, or its role stopped), and a newer assignment, not the old
	// owner, ends its followers' wait. When a host is killed in a mass
	// failover each of its streams' followers (5,000 at 10,000 streams)
	// finds nobody serving at once, and ten quick retries each were 50,000
	// no-responders requests while the survivors recovered.
	noOwnerRetry   = 2 * time.Millisecond
	noOwnerRetries = 10
)

// replTimeout is how long a long poll of wait (a follower's request, a
// host wait) waits for its answer: the wait and a slack of half the wait,
// at least replSlack. The slack grows with the wait so that under load
// (the first seconds of a mass failover, when every message takes longer)
// a long poll answered at the end of its wait still arrives in time and
// the copy goes back to sleep; with a fixed 300 ms every idle long poll
// timed out, was asked again and kept the load up (issue 17).
func replTimeout(wait time.Duration) time.Duration {
	return wait + max(replSlack, wait/2)
}

// follower is the follower role of one copy at one epoch: a worker that
// pulls from the owner and applies what it gets.
type follower struct {
	h      *Host
	c      *streamlog.Copy
	stream string
	id     uint64
	epoch  uint64
	owner  string
	log    *slog.Logger

	cancel context.CancelFunc
	done   chan struct{}

	ownerHead atomic.Uint64 // the owner's retained head, from its last batch
	// sentAck is the highest durable record tail sent to the owner, in a
	// request or a standalone ack (ackDurable).
	sentAck atomic.Uint64
	// win is the copy's duplicate window, the worker's only while it runs:
	// it records what it applies (window.go).
	win *copyWindow
	// arrivals is when the copy last applied records, and before that
	// (the worker's only while it runs; the replica hands it from one
	// role to the next): a copy sleeps once it acked records unless the
	// stream is busy, and after an empty answer if it is quiet.
	arrivals recordArrivals
}

// recordArrivals are the times of a copy's last two applies of records.
type recordArrivals struct {
	last, prev time.Time
}

// add records an apply at now.
func (a *recordArrivals) add(now time.Time) { a.prev, a.last = a.last, now }

// quiet reports whether no records came for a whole idle wait before now.
func (a recordArrivals) quiet(now time.Time, idleWait time.Duration) bool {
	return now.Sub(a.last) >= idleWait
}

// busy reports whether records came twice within the idle wait before
// now: records arriving now are the third, and the copy keeps its own long
// poll, answered with the records at once, rather than sleep after each
// (one host wait round per record: its wake, and its host's next host
// wait naming it again).
// Once or twice in an idle wait (a failover: a retried publish, then the
// next) the copy sleeps again after each.
func (a recordArrivals) busy(now time.Time, idleWait time.Duration) bool {
	return now.Sub(a.prev) < idleWait
}

// startFollower starts the worker; it resumes at the copy's own tails.
// arrivals are when the copy applied records in earlier roles (zero for
// none): a role after a failover of a stream busy until then keeps its
// own long poll.
func startFollower(h *Host, c *streamlog.Copy, a wire.Assignment, win *copyWindow, arrivals recordArrivals) *follower {
	ctx, cancel := context.WithCancel(h.bgCtx)
	f := &follower{
		h:      h,
		c:      c,
		stream: a.Stream,
		id:     a.StreamID,
		epoch:  a.Epoch,
		owner:  a.Owner,
		log:    h.log.With("stream", a.Stream, "epoch", a.Epoch, "role", wire.RoleFollower, "owner", a.Owner),
		cancel: cancel,
		done:   make(chan struct{}),
		win:    win,

		arrivals: arrivals,
	}
	f.ownerHead.Store(c.Tails().Head)
	go f.run(ctx)
	return f
}

// stop ends the worker and waits for it: nothing is applied at this epoch
// once stop returns.
func (f *follower) stop() {
	f.cancel()
	<-f.done
}

// ended reports whether the worker has returned although nobody stopped
// it (the store closed under it): the role must then be started again.
func (f *follower) ended() bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

// retentionKeepFrom keeps what the owner keeps.
func (f *follower) retentionKeepFrom() uint64 {
	return min(f.ownerHead.Load(), f.c.Tails().Record)
}

// written is a batch the follower wrote and has not yet seen durable.
type written struct {
	durable func(context.Context) error
	got     time.Time // when its batch arrived
	// acked, if not nil, is closed once the syncer is done with the
	// batch: acked it durable, or found its write failed.
	acked chan struct{}
}

func (f *follower) run(ctx context.Context) {
	to := f.h.link.toOwner(f.stream, f.epoch, f.owner)
	// Batches written but not yet durable, in the order written (and so
	// the order they become durable); syncer waits for each and acks it.
	// The syncer holds one and the worker one more while it waits to
	// queue it: followerAhead in all.
	pending := make(chan written, followerAhead-2)
	synced := make(chan struct{})
	go f.syncer(ctx, to, pending, synced)
	defer func() {
		close(pending)
		<-synced
		close(f.done)
	}()
	backoff := backoffMin
	fails := 0
	noOwner := 0 // errNoServer in a row, from the start of the role until its first answer
	wait := f.h.cfg.ReplWait
	// idle: the last request, of the whole idle wait, came back empty (or
	// came back empty to a quiet copy), or brought records to a copy of a
	// stream not busy and it acked them (below), so the copy sleeps on its
	// host's one long poll of the owner's host (idlewait.go) before it
	// asks again.
	idle := false
	fail := func(level slog.Level, msg string, args ...any) bool {
		fails++
		wait = f.h.cfg.ReplWait
		if fails == 1 || fails%repullAfterFails == 0 {
			f.log.Log(ctx, level, msg, args...)
		}
		if fails%repullAfterFails == 0 {
			f.h.requestPull()
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, backoffMax)
		return true
	}
	for ctx.Err() == nil {
		if idle {
			b, ok := f.sleepIdle(ctx)
			if !ok {
				return
			}
			idle = false
			if b != nil {
				// Records to a copy whose stream is not busy (records came
				// at most once in the idle wait before them): the copy
				// sleeps again once it acked them, without the long polls
				// a request's records would be followed by. The third
				// arrival within an idle wait finds the stream busy: the
				// copy keeps its own long poll, answered with the records
				// at once, not one host wait per record (the idle rule
				// below then decides when it sleeps), and its request
				// goes out while their fsync runs.
				sleep := !f.arrivals.busy(time.Now(), f.h.cfg.ReplIdleWait)
				switch f.applyWoken(ctx, b, pending, sleep) {
				case wokenStop:
					return
				case wokenApplied:
					if sleep {
						idle = true
						continue
					}
					wait = min(f.h.cfg.ReplWait, busyWait)
				}
				// Not applied: ask on its own.
			}
		}
		t := f.c.Tails()
		req := f.ack(t)
		req.WaitMS, req.MaxBytes = uint32(wait/time.Millisecond), replBytes
		// Records come from the written tail, past batches whose fsync
		// still runs (syncer acks them as they land).
		req.ReadFrom, req.ReadDigest = t.RecordWritten, t.WrittenDigest
		f.raiseSent(t.Record)
		asked := time.Now()
		// The owner answers within the wait; a longer silence means it is
		// gone. A request the link lost (errLinkLost) is asked again.
		resp, err := to.request(ctx, frame.AppendReplRequest(nil, &req), replTimeout(wait))
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, errNoServer) && noOwner < noOwnerRetries && fails == 0 {
				noOwner++
				select {
				case <-ctx.Done():
					return
				case <-time.After(noOwnerRetry):
				}
				continue
			}
			asked := wait
			if !fail(slog.LevelDebug, "owner did not answer", "err", err, "fails", fails+1) {
				return
			}
			if errors.Is(err, context.DeadlineExceeded) {
				// Late, not refused: the owner (or NATS) is slow. The
				// wait grows as after an empty answer (a request with
				// something to fetch is answered at once whatever its
				// wait), so that under load the copy's slack grows and it
				// gets back to sleep (replTimeout) rather than asking
				// every second.
				wait = min(2*asked, f.h.cfg.ReplIdleWait)
			}
			continue
		}
		if code := resp.code; code != "" {
			refusal := wire.DecodeErrorReply(code, resp.data)
			if code == wire.CodeStaleEpoch || code == wire.CodeNotFound {
				f.h.requestPull()
			}
			if code == wire.CodeDiverged {
				// The copy's log differs from the owner's below its
				// tail: nothing it holds there counts, and only a newer
				// assignment (with its history cut) can bring it back.
				// It keeps asking, so attention shows it not catching up.
				if fails == 0 {
					f.h.requestPull()
				}
				if !fail(slog.LevelError, "copy diverged from the owner below its tail", "follower_tail", t.Record,
					"follower_digest", fmt.Sprintf("%016x", t.RecordDigest), "owner_reply", refusal, "fails", fails+1) {
					return
				}
				continue
			}
			if !fail(slog.LevelWarn, "owner refused", "code", code, "reply", refusal, "fails", fails+1) {
				return
			}
			continue
		}
		b, err := frame.DecodeBatch(resp.data)
		if err != nil || b.Epoch != f.epoch {
			if !fail(slog.LevelWarn, "bad batch from owner", "err", err, "fails", fails+1) {
				return
			}
			continue
		}
		fails, backoff = 0, backoffMin
		noOwner = noOwnerRetries // answered: no quick retries for this role any more
		f.ownerHead.Store(b.Head)
		if b.Head > t.RecordWritten {
			// Behind the owner's retained head: what is missing is gone,
			// so start over at the head, and ask for the records past it
			// at once (asleep, naming tails it never acked, the copy
			// would wait out the owner's ackInFlightWait).
			f.log.Warn("behind the owner's head; resetting the copy", "tail", t.RecordWritten, "owner_head", b.Head,
				"owner_head_digest", fmt.Sprintf("%016x", b.HeadDigest))
			// The chain restarts from the owner's digest at its head, so
			// that the copy's tail digest goes on matching the owner's.
			if err := f.c.ResetToDigest(b.Head, t.CursorDurable, b.HeadDigest); err != nil {
				if !f.applyFailed(ctx, "reset", err) {
					return
				}
			}
			f.win.restarted(f.c)
			continue
		}
		if len(b.Records) == 0 && len(b.CursorEvents) == 0 {
			// Idle once a request of the whole idle wait came back empty,
			// or once one came back empty to a copy that had no records
			// for a whole idle wait (quiet: a new role's first requests,
			// a copy woken only for an ack, a head or an owner to check).
			// A busy stream's copy keeps its own long poll, answered with
			// the records.
			idle = wait >= f.h.cfg.ReplIdleWait || f.arrivals.quiet(time.Now(), f.h.cfg.ReplIdleWait)
			wait = min(2*wait, f.h.cfg.ReplIdleWait)
		} else {
			wait = min(f.h.cfg.ReplWait, busyWait)
		}
		if len(b.Records) > 0 {
			got := time.Now()
			f.h.metrics.stage(stageFollowerPoll, got.Sub(asked))
			// The same rule as for a wake's records: records to a copy
			// whose stream is not busy, without cursor events, that reach
			// the owner's durable tail (b.Tail; records it wrote past that
			// are carried by the wake that follows; a new stream's first
			// record, a new follower role's first after a failover of a
			// stream not busy), and the copy sleeps once it acked them,
			// not after the long polls of a whole idle wait (7.5 s at the
			// defaults). The price: on a stream written on and on, the
			// second and third records reach the copy by host wakes (its
			// host's resend of the host wait, within hostWaitGather, and
			// the owner's answer), not by its own poll; from the third the
			// copy keeps its own long poll.
			sleep := !f.arrivals.busy(got, f.h.cfg.ReplIdleWait) && len(b.CursorEvents) == 0 &&
				b.Records[len(b.Records)-1].Offset+1 >= b.Tail
			// Written, not yet durable: the next request goes out while
			// the fsync runs, and syncer acks the batch once it lands.
			durable, err := f.applyRecords(ctx, t, b.Records)
			if err != nil {
				if !f.applyFailed(ctx, "apply records", err) {
					return
				}
				continue
			}
			if !f.queueWritten(ctx, pending, written{durable: durable, got: got}, sleep) {
				return
			}
			if sleep {
				idle = true
				continue
			}
		}
		if len(b.CursorEvents) > 0 {
			evs := make([]streamlog.CursorEvent, len(b.CursorEvents))
			for i, e := range b.CursorEvents {
				evs[i] = streamlog.CursorEvent{Offset: e.Offset, Cursor: e.Cursor, Position: e.Position}
			}
			if err := f.c.ApplyCursorEvents(ctx, evs); err != nil {
				if !f.applyFailed(ctx, "apply cursor events", err) {
					return
				}
				continue
			}
		}
	}
}

// syncer waits for each batch the worker wrote to become durable, in the
// order written, and acks it (ackDurable). It returns once pending is
// closed and drained: every durable func is called, as the store requires;
// when the worker is stopped they return at once (the writes may still
// land, unacked).
func (f *follower) syncer(ctx context.Context, to ownerLink, pending <-chan written, done chan<- struct{}) {
	defer close(done)
	for w := range pending {
		if err := w.durable(ctx); err != nil {
			// The store is fail-stop: a failed commit fails the store,
			// whose next write fails the worker's apply (applyFailed).
			// Nothing past the durable tail is ever acked.
			if ctx.Err() == nil {
				f.log.Error("follower apply did not become durable", "err", err)
			}
			if w.acked != nil {
				close(w.acked)
			}
			continue
		}
		f.h.metrics.stage(stageFollowerApply, time.Since(w.got))
		f.ackDurable(to)
		if w.acked != nil {
			close(w.acked)
		}
	}
}

// raiseSent records that a request carrying durable record tail tail is
// being sent; false when one already sent carries it or a later one.
func (f *follower) raiseSent(tail uint64) bool {
	for {
		s := f.sentAck.Load()
		if tail <= s {
			return false
		}
		if f.sentAck.CompareAndSwap(s, tail) {
			return true
		}
	}
}

// ackDurable tells the owner the copy's durable tails at once, with a
// standalone ack (a replication request sent with replLink's ack, which
// the owner counts and does not answer), unless a request already sent
// carries them. The worker's request in flight may be parked at the
// owner for its long poll: without this, a confirm would wait for the
// poll to end.
func (f *follower) ackDurable(to ownerLink) {
	t := f.c.Tails()
	if !f.raiseSent(t.Record) {
		return
	}
	req := f.ack(t)
	if err := to.ack(frame.AppendReplRequest(nil, &req)); err != nil {
		// The next request carries the tails anyway.
		f.log.Debug("standalone ack not sent", "err", err)
	}
}

// ack is a replication request carrying the copy's durable tails at t,
// which the owner counts as its ack, with the digest there that proves the
// log below them is the owner's.
func (f *follower) ack(t streamlog.Tails) frame.ReplRequest {
	return frame.ReplRequest{
		Node:       f.h.cfg.Node,
		Epoch:      f.epoch,
		StreamID:   f.id,
		RecordTail: t.Record,
		CursorTail: t.CursorDurable,
		TailDigest: t.RecordDigest,
	}
}

// sleepIdle waits, after a request of the whole idle wait that came back
// empty, until the owner's host says the copy has something to ask for or
// sends it records (returned), or the host wait fails; false when the
// worker is stopped meanwhile.
func (f *follower) sleepIdle(ctx context.Context) (*frame.Batch, bool) {
	// Its durable tails, which after a whole idle wait with nothing are
	// its written ones too unless an fsync has been stuck that long; then
	// the owner, which compares them with its own, wakes it at once.
	t := f.c.Tails()
	return f.h.sleepIdle(ctx, f.owner, frame.HostWaitCopy{StreamID: f.id, Epoch: f.epoch, RecordTail: t.Record,
		CursorTail: t.CursorDurable, KnownHead: f.ownerHead.Load()})
}

// applyRecords writes records from the owner at the copy's written tail
// (t, read before) and records them in the copy's duplicate window; they
// are not yet durable: the caller hands durable to the syncer, which acks
// them once they are.
func (f *follower) applyRecords(ctx context.Context, t streamlog.Tails, frs []frame.Record) (func(context.Context) error, error) {
	recs := make([]streamlog.Record, len(frs))
	for i, r := range frs {
		recs[i] = streamlog.Record{Offset: r.Offset, TimeNS: r.TimeNS, Data: r.Data}
	}
	durable, err := f.c.ApplyWritten(ctx, recs)
	if err != nil {
		return nil, err
	}
	f.arrivals.add(time.Now())
	f.win.applied(f.c, t, recs, f.log)
	return durable, nil
}

// What applyWoken did with a host wake's records.
const (
	wokenSkipped = iota // not applied: the copy asks on its own
	wokenApplied        // applied (and, if asked to wait, acked or its write failed)
	wokenStop           // the worker is stopped
)

// applyWoken applies the records a host wake carried for the copy (its
// owner host's answer to the host wait it slept on, hostWakeRecords) as
// it would its own request's reply. With waitAck it also waits until the
// syncer has acked them, so that the copy, going back to sleep, names the
// tails it acked: the owner then finds it quiet, and the records cost the
// copy one standalone ack instead of a request, its reply and the long
// polls after. Only records that start at the copy's written tail, at its
// epoch, are applied; anything else (its written tail moved past its
// durable one, a new head, cursor events) is skipped, and the copy asks
// on its own.
func (f *follower) applyWoken(ctx context.Context, b *frame.Batch, pending chan<- written, waitAck bool) int {
	t := f.c.Tails()
	if b.Epoch != f.epoch || len(b.Records) == 0 || len(b.CursorEvents) > 0 || b.Records[0].Offset != t.RecordWritten ||
		t.RecordWritten != t.Record || b.Head > t.RecordWritten || b.Head < f.ownerHead.Load() {
		return wokenSkipped
	}
	got := time.Now()
	durable, err := f.applyRecords(ctx, t, b.Records)
	if err != nil {
		if !f.applyFailed(ctx, "apply woken records", err) {
			return wokenStop
		}
		return wokenSkipped
	}
	f.ownerHead.Store(b.Head)
	if !f.queueWritten(ctx, pending, written{durable: durable, got: got}, waitAck) {
		return wokenStop
	}
	return wokenApplied
}

// queueWritten hands a written batch to the syncer and, with waitAck,
// waits until the syncer is done with it (acked it, or found its write
// failed), so that a copy going to sleep names the tails it acked; false
// when the worker is stopped meanwhile.
func (f *follower) queueWritten(ctx context.Context, pending chan<- written, w written, waitAck bool) bool {
	if waitAck {
		w.acked = make(chan struct{})
	}
	select {
	case pending <- w:
	case <-ctx.Done():
		_ = w.durable(ctx) // called once, as the store requires
		return false
	}
	if !waitAck {
		return true
	}
	select {
	case <-w.acked:
		return true
	case <-ctx.Done():
		return false
	}
}

// applyFailed handles a storage error of the worker; it returns false when
// the worker must end, which is only when it was stopped or the store
// closed. Any other error, a seal included, is retried with backoff after
// asking for the assignment: a worker that ended silently would leave the
// copy behind for good while the host still reports it as a follower.
func (f *follower) applyFailed(ctx context.Context, what string, err error) bool {
	switch {
	case ctx.Err() != nil, errors.Is(err, context.Canceled):
		return false
	case errors.Is(err, streamlog.ErrClosed):
		f.log.Info("store closed; follower stops", "op", what, "err", err)
		return false
	case errors.Is(err, streamlog.ErrSealed), errors.Is(err, streamlog.ErrDeleted):
		// A seal at a newer fence stops this worker through the host (and
		// a deleted copy through the apply that deleted it); until then,
		// or if the seal came another way, the assignment decides: ask for
		// it and try again.
		f.log.Warn("copy does not accept entries at this epoch; asking for the assignment", "op", what, "err", err)
		f.h.requestPull()
	case errors.Is(err, streamlog.ErrDiverged):
		// Not on the owner's history: only a newer assignment (with its
		// history cut) can bring the copy back.
		f.log.Error("copy diverged from the owner", "op", what, "err", err)
		f.h.requestPull()
	default:
		f.log.Error("follower write failed", "op", what, "err", err)
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(backoffMax):
	}
	return true
}
