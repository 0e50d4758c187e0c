package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/wire"
)

// A publish that reached an owner which then died gets no reply at all: the
// request went to the owner's subscription and was lost with the process.
// Waiting out the request timeout (seconds) would keep such a publish far
// longer than the failover takes (well under a second), so while publishes
// to a stream wait unusually long the client probes who serves the stream,
// with a fetch that reads nothing.
//
// The first probe sent after an attempt bounds the owner the attempt
// reached: both went out on one connection, in that order, so the attempt
// reached the owner that answers the probe or one before it. If the probe
// finds nobody serving, the attempt's owner is one the client knew of
// before (its newest known epoch bounds it). The attempt is abandoned only
// once an owner at an epoch above that bound answers: its own owner has
// been replaced. A replaced owner confirms nothing it wrote after its
// followers were sealed (a sealed copy acks no older epoch; a sealed owner
// fails its waiting publishes with an error), but it may still confirm,
// for a moment, a record it wrote before: a follower's ack sent before the
// seal can be delivered after the new epoch serves. Such a confirm is
// true (see "Delivery guarantees" in the package doc), and an attempt
// abandoned just before it arrives is merely retried. Nobody serving is
// not enough on its own, since an owner that shuts down gracefully
// unsubscribes first and still confirms what it holds. An attempt is also
// abandoned when the owner answering a probe began serving (took the
// role, or reconnected; its reply says for how long, wire.HeaderServingFor)
// after the attempt was sent: the attempt cannot have reached it. That
// covers a failover fast enough that the first probe already meets the
// new owner, and an owner whose connection was replaced. An abandoned
// attempt is retried at once, without a backoff (retrier.next: an owner
// that serves answered the probe). As with a timed-out attempt, its record
// may have been written before the owner died, so a retry can write it
// twice unless the publish carries a producer id (WithProducer). Probes
// name the stream id the client's confirms carried, so that an owner of
// another stream of the same name (one deleted, or created again) never
// bounds or abandons an attempt with an epoch of its own history.
//
// An attempt whose records all carry a producer id (WithProducer) is also
// abandoned once an owner at an epoch above the newest the client knew
// when it sent the attempt answers a probe, whichever owner the attempt
// reached: the owner changed since, and a retry cannot write the record
// twice (an owner drops a repeat within its duplicate window, filled from
// the copy's log before it takes publishes, and answers it with the first
// write's offset once that is confirmed). The rules above cannot settle an
// attempt sent in the moment the owner changed (a planned move's seal): a
// probe after it is answered by the new owner, which began serving too
// soon after the attempt (within sendGuard) for the attempt to be ruled out
// as its own, so the attempt stayed bounded by the new owner's epoch. Lost
// on its way (the old owner's subscription gone from one NATS server while
// another still routed to it), such an attempt waited out the request
// timeout.

// Defaults of WithOwnerProbe.
const (
	DefaultProbeAfter = 250 * time.Millisecond
	probeEvery        = 100 * time.Millisecond
	// probeEveryNoticed bounds how far the probes of attempts that keep
	// waiting back off while the stream's owner notices are heard (run).
	probeEveryNoticed = 800 * time.Millisecond
	// probeEveryQuiet bounds how far the probes back off while they find
	// nobody serving (or get no answer) for long with the notices heard
	// (run).
	probeEveryQuiet = time.Second
	probeTimeout    = 500 * time.Millisecond
	// sendGuard: only a probe started this long after an attempt's
	// registration is taken to have gone out after the attempt, and an
	// owner that began serving this long after it is taken not to have
	// received it. A batch (and an async publisher's attempt) is
	// registered once PublishMsg put it in the connection's buffer, ahead
	// of any later request, so for the first rule the guard is only a
	// margin of the clocks, and for the second it covers the batch's way
	// from that buffer to the owner. A single request (batching off,
	// WithBatching(0, ...), or a record too large for a batch or with a
	// producer id over frame.MaxPubProducer) is registered just before
	// nats.go sends it, and the guard assumes its send takes less: one
	// that waits longer for the connection's lock (thousands of requests
	// at once on one connection) may go out after such a probe and be
	// abandoned when it need not be, and is then retried as a timed-out
	// attempt is.
	sendGuard = 50 * time.Millisecond
	// watchIdleTTL: a stream's watch unused this long may be dropped, so
	// that a client publishing to ever new stream names keeps bounded
	// memory. A dropped watch forgets the newest epoch it saw, which only
	// makes a later attempt found with nobody serving wait for its
	// request timeout (the cautious direction).
	watchIdleTTL = 5 * time.Minute
	// minWatchPrune is how many watches there must be before the client
	// looks for idle ones to drop; it then looks again at twice as many
	// as it kept, so the cost per new watch stays constant.
	minWatchPrune = 1024
)

// WithOwnerProbe sets how long a publish waits for its reply before the
// client starts checking whether the owner it went to is still the
// stream's owner (default DefaultProbeAfter); 0 turns the check off, and a
// publish held by a dead owner then waits for the request timeout. It is
// the least wait: while the client's confirms take longer, a publish waits
// about as long as they take before it is checked (confirmrtt.go).
func WithOwnerProbe(after time.Duration) Option {
	return func(o *options) { o.probeAfter = after }
}

// watched is one attempt in flight.
type watched struct {
	sent time.Time // registered: once it is sent (a batch, an async attempt), or just before (a single request)
	// bound is the highest epoch the owner the attempt reached can have,
	// set by the first conclusive probe after it (bounded); 0 means
	// unknown, and such an attempt is never abandoned.
	bound   uint64
	bounded bool
	// known is the newest epoch the client knew when the attempt was
	// sent (0: none), of the stream id knownID, and idempotent whether
	// every record of the attempt carries a producer id: such an attempt
	// is abandoned once an owner of knownID above known answers (see the
	// comment at the top).
	known, knownID uint64
	idempotent     bool
	abandon        func()
	// observed is set once the attempt's confirm was taken as a round
	// trip sample (done may be called twice).
	observed bool
}

// ownerWatch watches the attempts in flight to one stream; its goroutine
// runs while there are any.
type ownerWatch struct {
	c      *Client
	stream string

	mu       sync.Mutex
	attempts map[*watched]struct{}
	epoch    uint64 // the newest epoch seen in a confirm or a probe
	// streamID is the newest stream id a confirm carried (0 until one
	// did). Probes name it, so that an owner of another stream of the
	// same name (before a delete it has not learnt of, or after a
	// recreate) refuses the probe instead of answering with an epoch of
	// another history; epoch is of this stream.
	streamID uint64
	running  bool
	// kick asks the running goroutine to probe at once (a new owner
	// announced itself); buffered, so a kick is never lost or blocking.
	kick    chan struct{}
	idle    time.Time // when the last attempt ended
	dropped bool      // removed from Client.watches: take the stream's current watch
}

// epochSeen is the newest owner epoch of a stream the client knew at one
// moment, and the stream id it is of (watched.known and knownID), with the
// stream's watch it was read from, which the registration after the send
// reuses rather than looking it up again.
type epochSeen struct {
	w               *ownerWatch
	epoch, streamID uint64
}

// seenEpoch returns what the client knows of stream's owner epoch now. A
// batch takes it before PublishMsg and registers after (batcher.sendLocked):
// the epoch an attempt is judged against (the rule for attempts with
// producer ids) is the one known when it was handed to the connection,
// not one learnt while it waited there, which could already be above the
// owner it reaches.
func (c *Client) seenEpoch(stream string) epochSeen {
	if c.opts.probeAfter <= 0 {
		return epochSeen{}
	}
	w := c.streamWatch(stream)
	w.mu.Lock()
	defer w.mu.Unlock()
	return epochSeen{w: w, epoch: w.epoch, streamID: w.streamID}
}

// watchAttempt registers an attempt to stream that abandon cancels;
// idempotent says that every record of it carries a producer id. The
// caller must call the returned done once the attempt ended, with its
// confirm (zero if none). Calling done again only records the confirm's
// stream id and epoch.
func (c *Client) watchAttempt(stream string, idempotent bool, abandon func()) (done func(wire.PublishConfirm)) {
	return c.watchAttemptSeen(stream, idempotent, nil, abandon)
}

// watchAttemptSeen is watchAttempt for an attempt sent already, which
// knew seen when it was handed to the connection (nil: what the client
// knows now).
func (c *Client) watchAttemptSeen(stream string, idempotent bool, seen *epochSeen, abandon func()) (done func(wire.PublishConfirm)) {
	if c.opts.probeAfter <= 0 {
		return func(wire.PublishConfirm) {}
	}
	var w *ownerWatch
	if seen != nil {
		w = seen.w
	}
	for {
		if w == nil {
			w = c.streamWatch(stream)
		}
		w.mu.Lock()
		if w.dropped {
			// Dropped as idle between the lookup and now.
			w.mu.Unlock()
			w = nil
			continue
		}
		a := &watched{sent: time.Now(), known: w.epoch, knownID: w.streamID, idempotent: idempotent, abandon: abandon}
		if seen != nil {
			a.known, a.knownID = seen.epoch, seen.streamID
		}
		w.attempts[a] = struct{}{}
		if !w.running {
			w.running = true
			go w.run()
		}
		w.mu.Unlock()
		return func(pc wire.PublishConfirm) {
			now := time.Now()
			w.mu.Lock()
			// A confirm is a sample of the client's round trip, taken
			// once (done may be called twice), after w.mu is released.
			sample := pc.Epoch != 0 && !a.observed
			if sample {
				a.observed = true
			}
			delete(w.attempts, a)
			switch {
			case pc.StreamID > w.streamID:
				// A newer stream of the name: epochs start again.
				w.streamID, w.epoch = pc.StreamID, pc.Epoch
			case pc.StreamID == w.streamID:
				w.epoch = max(w.epoch, pc.Epoch)
			}
			if len(w.attempts) == 0 {
				w.idle = now
			}
			w.mu.Unlock()
			if sample {
				w.c.confirmRTT.observe(now.Sub(a.sent), now)
			}
		}
	}
}

// probeDelay is how long an attempt waits before the owner watch probes
// it: WithOwnerProbe's delay, or longer while the client's confirms take
// longer (confirmrtt.go), never past the request timeout.
func (c *Client) probeDelay() time.Duration {
	return c.confirmRTT.probeDelay(c.opts.probeAfter, c.opts.requestTimeout, time.Now())
}

// streamWatch returns stream's watch, creating it if there is none; when
// it creates one and the client holds many, it first drops those idle for
// watchIdleTTL.
func (c *Client) streamWatch(stream string) *ownerWatch {
	c.watchMu.Lock()
	defer c.watchMu.Unlock()
	if w := c.watches[stream]; w != nil {
		return w
	}
	if len(c.watches) >= max(c.watchPruneAt, minWatchPrune) {
		now := time.Now()
		for name, w := range c.watches {
			w.mu.Lock()
			if !w.running && len(w.attempts) == 0 && now.Sub(w.idle) >= watchIdleTTL {
				w.dropped = true
				delete(c.watches, name)
			}
			w.mu.Unlock()
		}
		c.watchPruneAt = 2 * len(c.watches)
	}
	w := &ownerWatch{c: c, stream: stream, attempts: map[*watched]struct{}{}, kick: make(chan struct{}, 1)}
	c.watches[stream] = w
	return w
}

// run probes while attempts wait longer than the probe delay
// (Client.probeDelay), and ends when
// none is left (the watch stays registered and keeps the epoch it saw,
// until streamWatch drops it as idle).
func (w *ownerWatch) run() {
	// While attempts are in flight, a new owner's notice has the watch
	// probe at once (notices.go).
	_, release := w.c.awaitOwner(w.stream)
	defer release()
	// every is the wait before the next probe: probeEvery, doubling up to
	// probeEveryNoticed after each probe that met a serving owner and
	// abandoned nothing while the notices are heard (a slow live owner: a
	// new owner's notice kicks a probe at once), and back to probeEvery
	// after a kick, after a probe that found nobody serving or was
	// inconclusive (a failover under way, whose notice may be lost, refused
	// or never sent, as by an owner that only reconnected), and once no
	// attempt waits longer than the probe delay. Such probes double up to
	// probeEveryQuiet instead once the oldest attempt has waited quietAfter
	// past the probe delay and the notices are known to be heard (noticesHeard):
	// a failover that long is a mass one, whose thousands of held attempts
	// probed every 100 ms, and the new owner's notice kicks a probe anyway;
	// an owner that comes back without a notice is found up to
	// probeEveryQuiet later.
	every := probeEvery
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		kicked := false
		select {
		case <-t.C:
		case <-w.kick:
			kicked = true
			t.Stop()
		}
		w.mu.Lock()
		var oldest time.Time
		for a := range w.attempts {
			if oldest.IsZero() || a.sent.Before(oldest) {
				oldest = a.sent
			}
		}
		if oldest.IsZero() {
			w.running = false
			w.mu.Unlock()
			return
		}
		id := w.streamID
		w.mu.Unlock()
		delay := w.c.probeDelay()
		if waited := time.Since(oldest); !kicked && waited < delay {
			// Sleep until the oldest attempt is due, but look again
			// within probeEveryQuiet: the delay may shrink meanwhile.
			every = probeEvery
			t.Reset(min(max(delay-waited, probeEvery), probeEveryQuiet))
			continue
		}
		lost, live := w.probeOnce(id)
		switch {
		case kicked:
			// A notice: the new owner may need a probe or two more.
			every = probeEvery
		case !live && len(lost) == 0 && time.Since(oldest) >= delay+quietAfter && w.c.noticesHeard(w.stream):
			// Nobody serving or an inconclusive probe (an overloaded
			// new owner) for long, as in a mass failover, and the new
			// owner's notice would be heard and kick a probe.
			every = min(2*every, probeEveryQuiet)
		case !live:
			// Nobody serving or an inconclusive probe: the failover
			// is under way, probe at the first pace again.
			every = probeEvery
		case len(lost) == 0 && w.c.noticesHeard(w.stream):
			every = min(2*every, probeEveryNoticed)
		}
		t.Reset(every)
		for _, a := range lost {
			a.abandon()
		}
	}
}

// probeOnce probes who serves the stream with streamID (any, if 0) and
// removes and returns the attempts it proves lost; live reports that the
// probe met an owner that serves.
func (w *ownerWatch) probeOnce(id uint64) (lost []*watched, live bool) {
	at := time.Now()
	epoch, servingFor, gone, err := w.probe(id)
	if err != nil {
		return nil, false // inconclusive (a slow owner): the request timeout decides
	}
	w.mu.Lock()
	for a := range w.attempts {
		// An owner above the one the client knew when it sent an
		// attempt with producer ids answered: retried, the attempt
		// cannot be written twice, wherever it went.
		if !gone && a.idempotent && a.known != 0 && id == a.knownID && epoch > a.known {
			lost = append(lost, a)
			delete(w.attempts, a)
			continue
		}
		if !a.bounded {
			if at.Sub(a.sent) < sendGuard {
				continue
			}
			a.bounded = true
			a.bound = epoch
			if gone {
				a.bound = w.epoch
			}
		}
		if !gone && a.bound != 0 && epoch > a.bound {
			lost = append(lost, a)
			delete(w.attempts, a)
			continue
		}
		// The owner that answered began serving (took the role, or
		// reconnected) after the attempt went out: the attempt did
		// not reach it, so it went to an owner since replaced or
		// was lost with a connection. Without this, an attempt whose
		// first probe already met the new owner waited out its
		// request timeout. (servingFor is measured at the owner,
		// after the probe left: the owner began no earlier than
		// at - servingFor.)
		if !gone && servingFor >= 0 && a.sent.Add(sendGuard).Before(at.Add(-servingFor)) {
			lost = append(lost, a)
			delete(w.attempts, a)
		}
	}
	if !gone {
		w.epoch = max(w.epoch, epoch)
	}
	w.mu.Unlock()
	if len(lost) > 0 {
		w.c.log.Debug("owner lost: abandoning publishes that wait for it", "stream", w.stream, "gone", gone, "epoch", epoch, "attempts", len(lost))
	}
	return lost, !gone
}

// probeNow has the watch probe at once if attempts are in flight: a new
// owner announced itself, so the attempts it cannot have received are found
// now rather than after the probe delay.
func (w *ownerWatch) probeNow() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// probeRequest reads nothing: it starts at the tail and does not wait.
var probeRequest, _ = json.Marshal(wire.FetchRequest{Start: "latest", MaxRecords: 1})

// ServingEpoch asks whoever serves stream for the epoch it serves at, with
// one fetch that reads nothing; served is false when nobody serves it (no
// responders). An error is inconclusive: a slow owner, or a host that
// answers without serving (sealed, not the owner, or with FromStreamID
// the owner of another stream of the name).
func (c *Client) ServingEpoch(ctx context.Context, stream string, opts ...ReadOption) (epoch uint64, served bool, err error) {
	epoch, _, served, err = c.servingEpoch(ctx, stream, opts...)
	return epoch, served, err
}

// servingEpoch is ServingEpoch that also returns how long the owner that
// answered has been serving on its connection (wire.HeaderServingFor;
// negative when the owner did not say).
func (c *Client) servingEpoch(ctx context.Context, stream string, opts ...ReadOption) (epoch uint64, servingFor time.Duration, served bool, err error) {
	reply, err := c.nc.RequestMsgWithContext(ctx, c.readMsg(stream, wire.FetchSubject(stream), probeRequest, opts))
	if errors.Is(err, nats.ErrNoResponders) {
		return 0, -1, false, nil
	}
	if err != nil {
		return 0, -1, false, fmt.Errorf("serving epoch of %s: %w", stream, err)
	}
	if werr := replyError(reply, replyBinary); werr != nil {
		return 0, -1, false, fmt.Errorf("serving epoch of %s: %w", stream, werr)
	}
	b, err := frame.DecodeBatch(reply.Data)
	if err != nil {
		return 0, -1, false, fmt.Errorf("serving epoch of %s: %w", stream, err)
	}
	servingFor = -1
	if ms, perr := strconv.ParseInt(reply.Header.Get(wire.HeaderServingFor), 10, 64); perr == nil && ms >= 0 {
		servingFor = time.Duration(ms) * time.Millisecond
	}
	return b.Epoch, servingFor, true, nil
}

// probe is ServingEpoch of the stream with streamID (any, if 0) bounded by
// probeTimeout; gone is true when nobody serves the stream.
func (w *ownerWatch) probe(streamID uint64) (epoch uint64, servingFor time.Duration, gone bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	w.c.stats.probes.Add(1)
	epoch, servingFor, served, err := w.c.servingEpoch(ctx, w.stream, FromStreamID(streamID))
	return epoch, servingFor, err == nil && !served, err
}
