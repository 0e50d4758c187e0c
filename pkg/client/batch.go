package client

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/wire"
)

// Defaults of publish batching (WithBatching).
const (
	// DefaultLinger is the longest a publish waits for others to share
	// its batch (WithBatching).
	DefaultLinger = time.Millisecond
	// DefaultBatchRecords and DefaultBatchBytes bound one batch.
	DefaultBatchRecords = 512
	DefaultBatchBytes   = 1 << 20
)

// batchHeadroom is what a batch leaves of the connection's payload limit
// for its headers.
const batchHeadroom = 4 << 10

// WithBatching sets how publishes to one stream are gathered into batches
// (wire.PublishBatchSubject), the way Kafka's producer batches: concurrent
// Publish calls on this Client and an AsyncPublisher's publishes alike.
// A publish joins the open batch of its stream; the batch goes out when
// it holds maxRecords records or maxBytes bytes, linger after its first
// record, or once it holds more records than are in flight and as many
// publishes came since the last batch went as the stream's replies since
// then released (closed-loop callers travel together; dueLocked),
// whichever comes first, so no record waits longer than linger; Close and
// AsyncPublisher.Flush send it at once. Each record keeps its own confirm
// and producer sequence, and is retried on its own terms (a retry joins a
// later batch). linger 0 turns batching off: every publish
// is its own request on wire.PublishSubject. maxRecords and maxBytes of 0
// keep the defaults; the batch is also kept under the connection's payload
// limit and wire.MaxPublishBatchRecords. A record too large for a batch,
// or with a producer id over frame.MaxPubProducer bytes, is published on
// its own.
func WithBatching(linger time.Duration, maxRecords, maxBytes int) Option {
	return func(o *options) {
		o.linger = max(linger, 0)
		if maxRecords > 0 {
			o.batchRecords = maxRecords
		}
		if maxBytes > 0 {
			o.batchBytes = maxBytes
		}
	}
}

// batcher gathers the publishes to one stream into batches and sends them
// over one reply subscription, in the order the publishes came. A batch
// names one stream id (wire.HeaderStreamID): a publish naming another id
// than the open batch's (the client pinned the stream meanwhile) sends the
// open batch first, so the order holds across the change.
type batcher struct {
	c          *Client
	stream     string
	subject    string
	prefix     string // reply subjects are prefix + flight id
	sub        *nats.Subscription
	maxRecords int
	maxBytes   int
	linger     *time.Timer // flushes the open batch; stopped while none
	unsubOnce  sync.Once   // removes sub once closed and no flight is left

	// mu guards the open batch and the flights, and orders the sends: a
	// batch is pushed onto the client's sendQueue under it.
	mu       sync.Mutex
	open     []*batchItem
	openSize int
	openID   uint64 // the stream id the open batch names (0: none)
	nextID   uint64
	flights  map[uint64]*flight
	closed   bool
	// inFlight is how many records the flights hold; returning is how
	// many records the flights that ended since the last batch went held,
	// less the publishes added since (any publish counts: a closed-loop
	// caller's next one is its confirmed record coming back; dueLocked).
	inFlight  int
	returning int
	// holds counts the publishes batcherFor handed the batcher to whose
	// add (or release) has not run yet: a held batcher is not dropped.
	// It goes up under Client.batchMu only (batcherFor, without waiting
	// for mu, which a batch's encoding holds) and down under mu.
	holds atomic.Int32
	// idle is when the batcher's last flight ended with no record open
	// (or its unused hold was released); zero before either. It says
	// idle only with no record open or in flight, which the drop checks.
	idle time.Time
}

// batcherIdleTTL is how long a batcher with no record open or in flight is
// kept. Past it, the next new batcher of a client that holds many
// (minBatcherPrune, then twice as many as the last look left) drops it and
// its reply subscription, whose delivery goroutine nats.go runs: a client
// that publishes to ever new streams holds batchers for the streams it
// published to lately, not for every stream it ever did.
const batcherIdleTTL = time.Minute

// minBatcherPrune is how many batchers a client holds before a new one
// looks for idle ones to drop.
const minBatcherPrune = 64

// batchItem is one record's attempt in a batch; done is called once with
// its outcome (not under the batcher's lock).
type batchItem struct {
	rec  frame.PubRecord
	done func(wire.PublishConfirm, error)
}

// flight is a batch queued to be sent (sendQueue) or sent and waiting for
// its reply. timer and watched are set once it was sent (nil before), and
// sent is when.
type flight struct {
	streamID uint64 // the stream id the batch named (0: none)
	items    []*batchItem
	timer    *time.Timer
	stopConn func() bool
	watched  func(wire.PublishConfirm)
	sent     time.Time
	// via is the client link connection it was sent on, nil for the bus;
	// slow, once sent on it, sends the stream back to the bus if no reply
	// comes in linkSlowAfter.
	via  *hostConn
	slow *time.Timer
	// ended is set when the flight is taken; a batch still queued then
	// is not sent (sendQueue), so a reconnect's retry of its records is
	// not followed by the stale batch.
	ended atomic.Bool
}

// recordCost bounds what a record adds to a batch frame.
func recordCost(data []byte, producer string) int {
	return len(data) + len(producer) + 3*binary.MaxVarintLen64
}

// batcherFor returns the batcher a publish of data with o goes through, or
// nil when it is to be published on its own (batching off, or a record
// that does not fit a batch).
func (c *Client) batcherFor(stream string, data []byte, o publishOpts) (*batcher, error) {
	if c.opts.linger <= 0 || len(o.producer) > frame.MaxPubProducer {
		return nil, nil
	}
	cost := recordCost(data, o.producer)
	var dropped []*batcher
	defer func() {
		// After batchMu is released (deferred calls run last in, first
		// out): no lock is held across an Unsubscribe.
		for _, b := range dropped {
			b.unsubscribe()
		}
	}()
	c.batchMu.Lock()
	defer c.batchMu.Unlock()
	if b := c.batchers[stream]; b != nil {
		if cost > b.maxBytes {
			return nil, nil
		}
		b.holds.Add(1)
		return b, nil
	}
	if c.closing.Load() {
		return nil, fmt.Errorf("publish %s: %w", stream, ErrClosed)
	}
	dropped = c.dropIdleBatchers(time.Now())
	// The connection's payload limit is read once per batcher, not per
	// publish: reading it takes the connection's lock, for which a
	// publish already queues once to send.
	maxBytes := min(c.opts.batchBytes, wire.MaxPublishBatchBytes, int(c.nc.MaxPayload())-batchHeadroom)
	if cost > maxBytes {
		return nil, nil
	}
	b := &batcher{
		c: c, stream: stream, subject: wire.PublishBatchSubject(stream), prefix: c.nc.NewInbox() + ".",
		maxRecords: min(c.opts.batchRecords, wire.MaxPublishBatchRecords), maxBytes: maxBytes,
		flights: map[uint64]*flight{},
	}
	b.holds.Store(1)
	b.linger = time.AfterFunc(time.Hour, b.lingered)
	b.linger.Stop()
	sub, err := c.nc.Subscribe(b.prefix+"*", b.onReply)
	if err != nil {
		return nil, fmt.Errorf("publish %s: subscribe batch replies: %w", stream, err)
	}
	// Replies must not be dropped as a slow consumer: the records
	// outstanding bound them.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("publish %s: %w", stream, err)
	}
	b.sub = sub
	if c.link != nil {
		c.link.register(b)
	}
	c.batchers[stream] = b
	return b, nil
}

// attempt makes one publish attempt of data through the batch: it returns
// the record's confirm or the attempt's error, or ctx's error if ctx ends
// first (the record may still be written then, as with a single publish).
func (b *batcher) attempt(ctx context.Context, data []byte, o publishOpts) (wire.PublishConfirm, error) {
	type result struct {
		pc  wire.PublishConfirm
		err error
	}
	ch := make(chan result, 1)
	b.add(data, o, func(pc wire.PublishConfirm, err error) { ch <- result{pc, err} })
	b.c.sends.drain()
	select {
	case r := <-ch:
		return r.pc, r.err
	case <-ctx.Done():
		return wire.PublishConfirm{}, fmt.Errorf("%s: %w", b.subject, ctx.Err())
	}
}

// dropIdleBatchers removes from c.batchers, once it holds many, those
// that no publish holds and that have had no record open or in flight for
// c.batcherIdle, marks them closed and returns them: the caller
// unsubscribes them once it released batchMu, under which it is called.
func (c *Client) dropIdleBatchers(now time.Time) []*batcher {
	if len(c.batchers) < max(c.batchPruneAt, minBatcherPrune) {
		return nil
	}
	var dropped []*batcher
	for name, b := range c.batchers {
		// A batcher whose lock is taken is busy, not idle: skip it
		// rather than wait under batchMu.
		if !b.mu.TryLock() {
			continue
		}
		if b.holds.Load() == 0 && len(b.open) == 0 && len(b.flights) == 0 && !b.idle.IsZero() && now.Sub(b.idle) >= c.batcherIdle {
			b.closed = true
			delete(c.batchers, name)
			dropped = append(dropped, b)
		}
		b.mu.Unlock()
	}
	c.batchPruneAt = 2 * len(c.batchers)
	return dropped
}

// release ends a hold whose publish does not add (its publisher closed).
// A batcher no record ever went through is idle from then.
func (b *batcher) release() {
	b.mu.Lock()
	if b.holds.Add(-1) == 0 && b.idle.IsZero() && len(b.open) == 0 && len(b.flights) == 0 {
		b.idle = time.Now()
	}
	b.mu.Unlock()
}

// add puts a record into the open batch and queues the batch if it is due;
// done gets the record's outcome. It ends the hold batcherFor took. The
// caller drains the client's sendQueue once it holds no lock.
func (b *batcher) add(data []byte, o publishOpts, done func(wire.PublishConfirm, error)) {
	it := &batchItem{rec: frame.PubRecord{Data: data}, done: done}
	if o.hasSeq {
		it.rec.Producer, it.rec.Seq = o.producer, o.seq
	}
	cost := recordCost(data, it.rec.Producer)
	b.mu.Lock()
	b.holds.Add(-1)
	if b.closed {
		b.mu.Unlock()
		done(wire.PublishConfirm{}, fmt.Errorf("%s: %w", b.subject, ErrClosed))
		return
	}
	id := b.c.idFor(b.stream, o.streamID)
	if len(b.open) > 0 && (b.openSize+cost > b.maxBytes || id != b.openID) {
		b.sendLocked()
	}
	b.openID = id
	b.open = append(b.open, it)
	b.openSize += cost
	if b.returning > 0 {
		b.returning--
	}
	switch {
	case len(b.open) >= b.maxRecords, b.openSize >= b.maxBytes, b.dueLocked():
		b.sendLocked()
	case len(b.open) == 1:
		b.linger.Reset(b.c.opts.linger)
	}
	b.mu.Unlock()
}

// dueLocked reports whether the open batch goes before it is full or its
// linger ends: once it holds more records than are in flight and as many
// publishes came since the last batch went as the replies since then
// released records (returning is 0).
//
// Why: much of a batch's cost is per batch, not per record (a request, a
// group commit and its fsync on each copy, a reply, and the wake-ups of
// each: about 1.8 ms of the bench machine's CPU a batch against 29 µs a
// record, fitted to two workloads' batch sizes, docs/benchmarks.md,
// "Session 59"), and callers are mostly closed loops, each publishing
// again once confirmed (concurrent Publish calls, an AsyncPublisher's
// window). A reply releases its batch's publishers at once; they come back
// within microseconds, and the batch that waits for all of them carries
// them together. Before, the first one back found nothing in flight and
// went alone, the rest followed as a second batch, and batches alternated
// one record and all the others. Records in flight will be released too:
// while they are at least as many as the open batch holds, waiting for
// them at least doubles it, so the open batch waits (two groups of
// publishers merge instead of taking turns with half batches); once they
// are fewer (nothing in flight, or a batch held up somewhere), it goes. A
// publisher that does not come back, or one that joins, costs at most the
// linger: an open-loop caller publishing slower than a round trip may see
// its records wait for it where they went at once before.
func (b *batcher) dueLocked() bool {
	return len(b.open) > 0 && b.returning == 0 && len(b.open) > b.inFlight
}

// lingered sends the open batch once its first record waited the linger.
func (b *batcher) lingered() {
	b.mu.Lock()
	if len(b.open) > 0 {
		b.sendLocked()
	}
	b.mu.Unlock()
	b.c.sends.drain()
}

// sendLocked queues the open batch on the client's sendQueue as a flight.
// Queueing under the lock keeps batches in the order of their records; the
// caller drains the queue once it released the lock.
//
// The flight's clocks (its request timeout, the owner watch's probe delay
// and its round trip) start once PublishMsg returned, when the batch is in
// the connection's buffer, not when it was built: PublishMsg waits for the
// connection's lock, which thousands of concurrent publishes and probes
// queue for (0.9 s at the median, 3.5 s at the p99, in a 10,000-stream
// failover on two cores). A batch that waited there has not been near an
// owner, and counting that wait timed it out and retried it, adding to
// the queue, or had it probed before it went out. Registered after the
// send, the attempt also never goes out after a probe started later
// (ownerwatch.go); it is judged against the owner epoch the client knew
// before the send (seenEpoch), not one learnt while it waited. A reply, a
// reconnect or Close may take the flight between PublishMsg and sent
// taking b.mu: sent then finds it gone and starts nothing.
func (b *batcher) sendLocked() {
	b.linger.Stop()
	items := b.open
	b.inFlight += len(items)
	b.returning = 0
	b.open, b.openSize = nil, 0
	b.nextID++
	id := b.nextID
	fl := &flight{items: items, streamID: b.openID}
	b.flights[id] = fl
	// A reconnect may lose the batch (or its reply): retry it at once. A
	// batch that went out on the new connection after all (PublishMsg
	// waited through the reconnect) is then sent twice; records with
	// producer ids are dropped as repeats.
	fl.stopConn = context.AfterFunc(b.c.gen.Current(), func() {
		b.fail(id, fmt.Errorf("%s: the connection was replaced while waiting: %w", b.subject, nats.ErrDisconnected))
	})
	// On the client link (link.go) while its connection to the owner's
	// host is up: a connection that closes loses the batch or its reply
	// alike, and it is retried at once, as after a reconnect.
	var via *hostConn
	if b.c.link != nil {
		// The way changes at once, with batches still in flight on the
		// other: the first batch on the link may overtake the last one
		// on the bus, and after trouble a batch on the bus one still on
		// the link (doc.go, "The client link"). Waiting for a moment with
		// nothing in flight would never come under steady load.
		via = b.c.link.route(b.stream)
	}
	if via != nil {
		fl.via = via
		stopGen := fl.stopConn
		stopLink := context.AfterFunc(via.ctx, func() {
			b.fail(id, fmt.Errorf("%s: the client link to %s closed while waiting: %w", b.subject, via.node, nats.ErrDisconnected))
		})
		fl.stopConn = func() bool {
			// Both, always: the one that did not run must not stay
			// registered.
			l, g := stopLink(), stopGen()
			return l && g
		}
	}
	pb := frame.PubBatch{Records: make([]frame.PubRecord, len(items))}
	for i, it := range items {
		pb.Records[i] = it.rec
	}
	msg := nats.NewMsg(b.subject)
	setStreamID(msg, fl.streamID)
	msg.Reply = b.prefix + strconv.FormatUint(id, 10)
	msg.Data = frame.AppendPubBatch(nil, &pb)
	seen := b.c.seenEpoch(b.stream)
	// Counted when queued: the reply, and the records' confirms, can come
	// before sent runs; a batch that could not be sent is taken back.
	b.c.batchStats.batches.Add(1)
	b.c.batchStats.records.Add(uint64(len(items)))
	b.c.sends.push(msg, via, &fl.ended, func(err error) {
		if err == nil && via != nil {
			b.c.batchStats.linked.Add(1)
		}
		b.sent(id, len(items), seen, err)
	})
}

// sent starts flight id's clocks once PublishMsg put it in the
// connection's buffer (sendLocked), or fails it with PublishMsg's error.
func (b *batcher) sent(id uint64, records int, seen epochSeen, err error) {
	if err != nil {
		b.c.batchStats.batches.Add(^uint64(0))
		b.c.batchStats.records.Add(^uint64(records - 1))
		b.fail(id, fmt.Errorf("%s: %w", b.subject, err))
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	fl := b.flights[id]
	if fl == nil {
		return // taken already: replied to, or failed by a reconnect or Close
	}
	fl.sent = time.Now()
	timeout := b.c.opts.requestTimeout
	fl.timer = time.AfterFunc(timeout, func() {
		b.fail(id, fmt.Errorf("%s: no reply in %v: %w", b.subject, timeout, ErrTimeout))
	})
	if via := fl.via; via != nil {
		// A batch on the link still unanswered after linkSlowAfter sends
		// the stream's next batches over the bus (it keeps waiting for
		// its own reply): an owner that the bus no longer reaches, and
		// whose followers are being sealed, may still take publishes on
		// the link but can no longer confirm them.
		sent := fl.sent
		fl.slow = time.AfterFunc(linkSlowAfter, func() {
			via.unanswered(sent)
			b.c.link.drop(b.stream, via)
		})
	}
	fl.watched = b.c.watchAttemptSeen(b.stream, !slices.ContainsFunc(fl.items, func(it *batchItem) bool { return it.rec.Producer == "" }), &seen, func() {
		b.fail(id, fmt.Errorf("%s: %w", b.subject, ErrOwnerLost))
	})
}

// BatchStats returns how many publish batches this client has sent (or
// queued to send) and how many records they carried (retries included):
// records/batches is the mean batch its workload produces.
func (c *Client) BatchStats() (batches, records uint64) {
	return c.batchStats.batches.Load(), c.batchStats.records.Load()
}

// LinkedBatches returns how many of the publish batches this client sent
// went on the client link (WithDirectLink) rather than the bus.
func (c *Client) LinkedBatches() uint64 { return c.batchStats.linked.Load() }

// LinkedFetches returns how many of this client's fetches were answered
// on the client link (WithDirectLink): a fetch goes there when its stream's
// publishes have a connection up, and over the bus otherwise.
func (c *Client) LinkedFetches() uint64 {
	if c.link == nil {
		return 0
	}
	return c.link.fetches.Load()
}

// BatchRoundTrips returns how many publish batch replies this client took
// and the sum of their round trips, from the batch sent to its reply
// received: total/replies is the mean time a batch's confirm took as the
// client saw it (benchmarks: where a confirm's time goes).
func (c *Client) BatchRoundTrips() (replies uint64, total time.Duration) {
	return c.batchStats.replies.Load(), time.Duration(c.batchStats.rttNS.Load())
}

// take removes and returns flight id, or nil if another path took it. Its
// records count as returning from then (dueLocked): the open batch waits
// for their publishers, whom the caller releases once it settles them.
func (b *batcher) take(id uint64) (fl *flight) {
	b.mu.Lock()
	fl = b.flights[id]
	if fl != nil {
		delete(b.flights, id)
		b.inFlight -= len(fl.items)
		b.returning += len(fl.items)
		fl.ended.Store(true)
		if fl.timer != nil {
			fl.timer.Stop()
		}
		if fl.slow != nil {
			fl.slow.Stop()
		}
		fl.stopConn()
		if len(b.flights) == 0 && len(b.open) == 0 {
			b.idle = time.Now()
		}
	}
	done := b.closed && len(b.flights) == 0
	b.mu.Unlock()
	if done {
		b.unsubscribe()
	}
	if fl != nil && fl.watched != nil {
		fl.watched(wire.PublishConfirm{})
	}
	return fl
}

// fail ends flight id with err for every record of it.
func (b *batcher) fail(id uint64, err error) {
	if fl := b.take(id); fl != nil {
		b.offLink(fl)
		for _, it := range fl.items {
			it.done(wire.PublishConfirm{}, err)
		}
	}
}

// onReply handles a batch's reply: one confirm (or refusal) per record, or
// one error for all.
func (b *batcher) onReply(m *nats.Msg) {
	id, err := strconv.ParseUint(strings.TrimPrefix(m.Subject, b.prefix), 10, 64)
	if err != nil {
		return
	}
	fl := b.take(id)
	if fl == nil {
		return // a reply after the flight failed; its records retry
	}
	if !fl.sent.IsZero() { // a reply can beat sent to b.mu
		b.c.batchStats.replies.Add(1)
		b.c.batchStats.rttNS.Add(int64(time.Since(fl.sent)))
	}
	failAll := func(err error) {
		b.offLink(fl)
		for _, it := range fl.items {
			it.done(wire.PublishConfirm{}, err)
		}
	}
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		failAll(fmt.Errorf("%s: %w", b.subject, nats.ErrNoResponders))
		return
	}
	if werr := replyError(m, replyBinary); werr != nil {
		failAll(namedError(fl.streamID, werr))
		return
	}
	r, err := frame.DecodePubReply(m.Data)
	if err == nil && len(r.Results) != len(fl.items) {
		err = fmt.Errorf("%d results for %d records", len(r.Results), len(fl.items))
	}
	var streamID, epoch uint64
	if err == nil {
		streamID, err = strconv.ParseUint(m.Header.Get(wire.HeaderStreamID), 10, 64)
	}
	if err == nil {
		epoch, err = strconv.ParseUint(m.Header.Get(wire.HeaderEpoch), 10, 64)
	}
	if err != nil {
		// An unreadable reply is not a confirm: never report it as one.
		failAll(fmt.Errorf("publish %s: decode batch reply: %w", b.stream, err))
		return
	}
	if fl.watched != nil {
		fl.watched(wire.PublishConfirm{StreamID: streamID, Epoch: epoch}) // records the stream id and epoch seen
	}
	if slices.ContainsFunc(r.Results, func(res frame.PubResult) bool { return res.Code != "" }) {
		b.offLink(fl)
	} else if fl.via != nil {
		b.c.link.confirmed(b.stream, fl.via)
	}
	for i, it := range fl.items {
		res := r.Results[i]
		if res.Code != "" {
			it.done(wire.PublishConfirm{}, wire.Errorf(res.Code, "%s: record %d of the batch refused", b.subject, i))
			continue
		}
		it.done(wire.PublishConfirm{StreamID: streamID, Offset: res.Offset, Epoch: epoch, Copies: r.Copies, W: r.W, Duplicate: res.Duplicate}, nil)
	}
}

// offLink sends the stream's next batches over the bus if fl went on the
// client link and did not end with every record confirmed: whatever went
// wrong (its host no longer owns the stream, or cannot confirm, or the
// connection went), the bus decides again who the owner is, and the next
// hello, over the bus, reaches that owner (link.go).
func (b *batcher) offLink(fl *flight) {
	if fl.via != nil {
		b.c.link.drop(b.stream, fl.via)
	}
}

// flushStream sends the stream's open batch at once, if it has one:
// whoever flushes waits for its records and will not publish more until
// they are confirmed, so they must not wait for the linger or for
// publishers to come back (dueLocked). Records that join after it (a
// retry) go by the usual rules, within their linger.
func (c *Client) flushStream(stream string) {
	c.batchMu.Lock()
	b := c.batchers[stream]
	c.batchMu.Unlock()
	if b == nil {
		return
	}
	b.mu.Lock()
	if len(b.open) > 0 && !b.closed {
		b.sendLocked()
	}
	b.mu.Unlock()
	c.sends.drain()
}

// close sends the open batch and takes no more records; the flights end
// with their replies or their timers, and the last one to end removes the
// reply subscription (on a connection New was given, which stays open).
func (b *batcher) close() {
	b.mu.Lock()
	if len(b.open) > 0 {
		b.sendLocked()
	}
	b.closed = true
	done := len(b.flights) == 0
	b.mu.Unlock()
	b.c.sends.drain()
	if done {
		b.unsubscribe()
	}
}

// unsubscribe removes the reply subscription of a closed batcher once no
// flight waits for a reply; once only.
func (b *batcher) unsubscribe() {
	b.unsubOnce.Do(func() {
		if b.c.link != nil {
			b.c.link.unregister(b)
		}
		if err := b.sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, nats.ErrBadSubscription) {
			b.c.log.Warn("unsubscribe batch replies", "stream", b.stream, "err", err)
		}
	})
}

// closeBatchers closes every batcher of the client (Close).
func (c *Client) closeBatchers() {
	c.batchMu.Lock()
	c.closing.Store(true)
	bs := make([]*batcher, 0, len(c.batchers))
	for _, b := range c.batchers {
		bs = append(bs, b)
	}
	c.batchMu.Unlock()
	for _, b := range bs {
		b.close()
	}
}
