package brookload

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/client"
	"github.com/brook-streams/brook/pkg/wire"
)

// Defaults of PublisherConfig.
const (
	DefaultAttemptTimeout = 2 * time.Second
	DefaultProbeAfter     = 100 * time.Millisecond
	DefaultProbeEvery     = 50 * time.Millisecond
)

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	Stream string
	// Producer prefixes the producer ids: records of publisher loop n are
	// published as producer "<Producer>-<n>". Make it unique per run, so
	// an owner's window never matches an earlier run's sequences.
	Producer string
	// AttemptTimeout bounds one attempt that no probe ends first (plus at
	// most cohortSpan: attempts begun close together share a timeout).
	AttemptTimeout time.Duration
	// ProbeAfter is how long an attempt may be outstanding before the
	// publisher probes the owner; ProbeEvery spaces the probes.
	ProbeAfter time.Duration
	ProbeEvery time.Duration
	Logger     *slog.Logger
}

// Confirm is a confirmed publish.
type Confirm struct {
	wire.PublishConfirm
	// Resolved is set when no attempt was answered and the record was
	// found in the new owner's log instead (see the package doc).
	Resolved bool
}

// Stats count what the publisher did beyond plain attempts.
type Stats struct {
	// Abandoned attempts were ended by a probe that found their owner gone.
	Abandoned int64
	// Unanswered attempts ended without a reply (abandoned or timed out).
	Unanswered int64
	// Resolved publishes were found in a new owner's log.
	Resolved int64
	// Retried publishes were sent again after an unanswered attempt.
	Retried int64
	// Scanned counts records read while resolving.
	Scanned int64
}

// Publisher publishes records named by an ID to one stream, exactly once
// across a failover (see the package doc). It is safe for concurrent use;
// each publisher loop (ID.Pub) must publish its sequences one at a time.
type Publisher struct {
	c   *client.Client
	cfg PublisherConfig
	log *slog.Logger

	mu    sync.Mutex
	epoch uint64 // the newest owner epoch seen
	floor uint64 // one past the highest offset confirmed so far
	// cur is the cohort new attempts join, nil when the next attempt
	// opens one; cohorts are every cohort with attempts outstanding, and
	// cur.
	cur     *cohort
	cohorts map[*cohort]struct{}

	idx index

	abandoned, unanswered, resolved, retried, scanned atomic.Int64

	stop context.CancelFunc
	done chan struct{}
}

// cohort is the attempts (outstanding calls of client.Publish) begun
// within cohortSpan of each other, at the same newest epoch known and
// under the same context: they share one context, which the probe cancels
// for all of them and which ends AttemptTimeout plus cohortSpan after the
// cohort opened. Two contexts and a timer per cohort, rather than per
// attempt, keep the publisher's own cost per record low: the bench's
// machine CPU per record counts it.
type cohort struct {
	epoch   uint64          // the newest epoch known when it opened
	opened  time.Time       // no attempt of it was sent before
	parent  context.Context // the caller's context of its attempts
	ctx     context.Context
	cancel  context.CancelCauseFunc
	release context.CancelFunc // of the timeout
	n       int                // attempts outstanding, under Publisher.mu
	stale   atomic.Bool        // abandoned by a probe
}

// cohortSpan is how long a cohort takes new attempts: an attempt's
// timeout is AttemptTimeout plus at most this.
const cohortSpan = 20 * time.Millisecond

// errOwnerLost is the cause of an attempt abandoned by a probe.
var errOwnerLost = errors.New("the owner the attempt went to is gone")

// ClientOptions are the client settings a Publisher relies on: no retry
// limit but the caller's context, a request timeout above the attempt
// timeout and no owner probe, so that the client itself never resends a
// publish that got no answer (the Publisher probes and decides that).
func ClientOptions(attemptTimeout time.Duration) []client.Option {
	if attemptTimeout <= 0 {
		attemptTimeout = DefaultAttemptTimeout
	}
	return []client.Option{
		client.WithRetry(0, 0),
		client.WithRequestTimeout(2*attemptTimeout + 5*time.Second),
		// Above stream.create's wait for its new owner (2 s).
		client.WithAdminTimeout(5 * time.Second),
		client.WithOwnerProbe(0),
	}
}

// NewPublisher returns a publisher to cfg.Stream over c, which should be
// made with ClientOptions. It asks the stream's owner for its epoch and
// confirmed watermark first (waiting, within ctx, for the stream to be
// served).
func NewPublisher(ctx context.Context, c *client.Client, cfg PublisherConfig) (*Publisher, error) {
	if err := wire.ValidName("stream", cfg.Stream); err != nil {
		return nil, fmt.Errorf("new publisher: %w", err)
	}
	if cfg.Producer == "" {
		return nil, errors.New("new publisher: a producer prefix is required")
	}
	if cfg.AttemptTimeout <= 0 {
		cfg.AttemptTimeout = DefaultAttemptTimeout
	}
	if cfg.ProbeAfter <= 0 {
		cfg.ProbeAfter = DefaultProbeAfter
	}
	if cfg.ProbeEvery <= 0 {
		cfg.ProbeEvery = DefaultProbeEvery
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b, err := c.Fetch(ctx, cfg.Stream, wire.FetchRequest{Start: "latest", MaxRecords: 1})
	if err != nil {
		return nil, fmt.Errorf("new publisher: ask the owner of %s: %w", cfg.Stream, err)
	}
	mctx, stop := context.WithCancel(context.Background())
	p := &Publisher{
		c: c, cfg: cfg, log: log,
		// Whatever this publisher writes lands at or past today's
		// confirmed watermark: not past the tail, since a failover may
		// cut the unconfirmed records between the two and ours then land
		// there. Only an unconfirmed record of an earlier run that
		// survives the failover could be taken for one of ours while
		// resolving, and it is then confirmed and byte for byte the same.
		epoch: b.Epoch, floor: b.Confirmed,
		cohorts: map[*cohort]struct{}{},
		stop:    stop, done: make(chan struct{}),
	}
	go p.watch(mctx)
	return p, nil
}

// Close stops the probe. Publishes still running keep working, without it.
func (p *Publisher) Close() {
	p.stop()
	<-p.done
	p.mu.Lock()
	p.closeCohortLocked() // an idle cohort's context ends now
	p.mu.Unlock()
}

// Stats returns the counters so far.
func (p *Publisher) Stats() Stats {
	return Stats{
		Abandoned: p.abandoned.Load(), Unanswered: p.unanswered.Load(),
		Resolved: p.resolved.Load(), Retried: p.retried.Load(), Scanned: p.scanned.Load(),
	}
}

// Epoch returns the newest owner epoch the publisher has seen.
func (p *Publisher) Epoch() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.epoch
}

// Publish writes data, which names id, and returns once it is confirmed,
// retrying across a failover until ctx ends. An error means the record is
// not confirmed (it may still be in the stream: at-least-once).
func (p *Publisher) Publish(ctx context.Context, id ID, data []byte) (Confirm, error) {
	producer := p.cfg.Producer + "-" + strconv.FormatUint(uint64(id.Pub), 10)
	p.mu.Lock()
	low := p.floor // the record can only land past everything confirmed before it was sent
	p.mu.Unlock()
	for {
		att, actx := p.begin(ctx)
		pc, err := p.c.Publish(actx, p.cfg.Stream, data, client.WithProducer(producer, id.Seq))
		p.end(att)
		if err == nil {
			p.noteConfirm(pc.Offset, pc.Epoch)
			return Confirm{PublishConfirm: pc}, nil
		}
		if ctx.Err() != nil {
			return Confirm{}, fmt.Errorf("publish %v: %w", id, err)
		}
		if !att.stale.Load() && !unanswered(err) {
			return Confirm{}, fmt.Errorf("publish %v: %w", id, err)
		}
		p.unanswered.Add(1)
		off, epoch, found, rerr := p.resolve(ctx, low, att.epoch, id)
		if rerr != nil {
			return Confirm{}, fmt.Errorf("publish %v: resolve an unanswered attempt: %w", id, rerr)
		}
		if found {
			p.resolved.Add(1)
			p.noteConfirm(off, epoch)
			return Confirm{PublishConfirm: wire.PublishConfirm{Offset: off, Epoch: epoch, Duplicate: true}, Resolved: true}, nil
		}
		p.retried.Add(1)
	}
}

// unanswered reports whether err says an attempt got no answer in time,
// so it may or may not have been written.
func unanswered(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, client.ErrTimeout) || errors.Is(err, nats.ErrTimeout)
}

// begin registers an attempt in the current cohort, opening one when
// there is none to join, and returns its cohort and the context to send
// it with, which the probe may cancel and the attempt timeout ends.
func (p *Publisher) begin(ctx context.Context) (*cohort, context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now() // under mu, for cutCohort
	c := p.cur
	if c == nil || c.epoch != p.epoch || now.Sub(c.opened) >= cohortSpan || !sameContext(c.parent, ctx) {
		p.closeCohortLocked()
		cctx, cancel := context.WithCancelCause(ctx)
		actx, release := context.WithTimeout(cctx, p.cfg.AttemptTimeout+cohortSpan)
		c = &cohort{epoch: p.epoch, opened: now, parent: ctx, ctx: actx, cancel: cancel, release: release}
		p.cur = c
		p.cohorts[c] = struct{}{}
	}
	c.n++
	return c, c.ctx
}

// sameContext reports whether a and b are the same context. It compares
// pointers only (and contexts of a size-0 type, such as
// context.Background(), by type): a value of another type may hold one
// that cannot be compared, and == would panic.
func sameContext(a, b context.Context) bool {
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	if ta != tb || ta == nil {
		return false
	}
	switch {
	case ta.Kind() == reflect.Pointer:
		return a == b
	case ta.Size() == 0:
		return true
	}
	return false
}

// closeCohortLocked stops the current cohort taking attempts, and ends it
// if none is outstanding.
func (p *Publisher) closeCohortLocked() {
	if c := p.cur; c != nil {
		p.cur = nil
		if c.n == 0 {
			p.endCohortLocked(c)
		}
	}
}

func (p *Publisher) endCohortLocked(c *cohort) {
	delete(p.cohorts, c)
	c.release()
	c.cancel(nil)
}

// end unregisters an attempt of c, and ends c once it has none left and
// takes no more.
func (p *Publisher) end(c *cohort) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c.n--
	if c.n == 0 && c != p.cur {
		p.endCohortLocked(c)
	}
}

func (p *Publisher) noteConfirm(off, epoch uint64) {
	p.mu.Lock()
	p.floor = max(p.floor, off+1)
	p.epoch = max(p.epoch, epoch)
	p.mu.Unlock()
}

func (p *Publisher) noteEpoch(epoch uint64) {
	p.mu.Lock()
	p.epoch = max(p.epoch, epoch)
	p.mu.Unlock()
}

// abandon ends the outstanding attempts of the cohorts that match.
func (p *Publisher) abandon(match func(*cohort) bool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for c := range p.cohorts {
		if c.n > 0 && match(c) && !c.stale.Swap(true) {
			if c == p.cur {
				p.cur = nil
			}
			c.cancel(errOwnerLost)
			n += c.n
		}
	}
	p.abandoned.Add(int64(n))
	return n
}

// oldest returns when the cohort of the oldest outstanding attempt opened.
func (p *Publisher) oldest() (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var t time.Time
	for c := range p.cohorts {
		if c.n > 0 && (t.IsZero() || c.opened.Before(t)) {
			t = c.opened
		}
	}
	return t, !t.IsZero()
}

// cutCohort closes the current cohort and returns a time no cohort
// opened since began before: every attempt begun after the call is in a
// cohort opened at or after it.
func (p *Publisher) cutCohort() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closeCohortLocked()
	return time.Now()
}

// watch probes the owner while attempts wait unusually long, and abandons
// the attempts whose owner is gone (nobody serves the stream) or was
// replaced (a newer epoch answers).
func (p *Publisher) watch(ctx context.Context) {
	defer close(p.done)
	t := time.NewTicker(p.cfg.ProbeEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		oldest, ok := p.oldest()
		if !ok || time.Since(oldest) < p.cfg.ProbeAfter {
			continue
		}
		// Attempts sent from here on are in cohorts opened after at, so
		// that a probe finding the owner gone abandons only attempts
		// sent before it began.
		at := p.cutCohort()
		epoch, gone, err := p.probe(ctx)
		switch {
		case err != nil:
			// Inconclusive (a slow owner): the attempt timeout decides.
		case gone:
			if n := p.abandon(func(c *cohort) bool { return c.opened.Before(at) }); n > 0 {
				p.log.Debug("owner gone: abandoned attempts", "stream", p.cfg.Stream, "attempts", n)
			}
		default:
			p.noteEpoch(epoch)
			if n := p.abandon(func(c *cohort) bool { return c.epoch < epoch }); n > 0 {
				p.log.Debug("owner replaced: abandoned attempts", "stream", p.cfg.Stream, "epoch", epoch, "attempts", n)
			}
		}
	}
}

// probe asks whoever serves the stream for its epoch: gone is true when
// nobody serves it.
func (p *Publisher) probe(ctx context.Context) (epoch uint64, gone bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	epoch, served, err := p.c.ServingEpoch(ctx, p.cfg.Stream)
	return epoch, err == nil && !served, err
}

// resolve decides about a record whose attempt, sent while sentEpoch was
// the newest epoch known, got no answer: found with its offset if the
// current owner's log holds it, otherwise not found (a retry is safe).
func (p *Publisher) resolve(ctx context.Context, low, sentEpoch uint64, id ID) (off, epoch uint64, found bool, err error) {
	for {
		// The fetch waits (retrying) until some owner serves the stream.
		b, err := p.c.Fetch(ctx, p.cfg.Stream, wire.FetchRequest{Start: "latest", MaxRecords: 1})
		if err != nil {
			return 0, 0, false, err
		}
		p.noteEpoch(b.Epoch)
		if b.Epoch <= sentEpoch {
			// The owner the attempt went to still serves: its window
			// answers a retry with the first write, if there was one.
			return 0, b.Epoch, false, nil
		}
		off, found, err := p.idx.lookup(ctx, p, b.Epoch, low, b.Tail, id)
		if errors.Is(err, errEpochMoved) {
			continue // another failover while reading: ask the newest owner
		}
		return off, b.Epoch, found, err
	}
}

// errEpochMoved means the owner changed while the index was being read.
var errEpochMoved = errors.New("the stream moved to another epoch while reading")

// index maps the ids of the records in a range of one owner's log to their
// offsets, so that the publishes left unanswered by one failover share a
// single read of the log.
type index struct {
	mu       sync.Mutex
	epoch    uint64
	from, to uint64
	at       map[ID]uint64
}

// lookup returns where id is in the log of the owner at epoch, reading
// [low, tail) of it first where not read yet.
func (x *index) lookup(ctx context.Context, p *Publisher, epoch, low, tail uint64, id ID) (uint64, bool, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.at == nil || x.epoch != epoch {
		x.epoch, x.from, x.to, x.at = epoch, low, low, map[ID]uint64{}
	}
	if low < x.from {
		if err := x.read(ctx, p, low, x.from); err != nil {
			return 0, false, err
		}
		x.from = low
	}
	if tail > x.to {
		if err := x.read(ctx, p, x.to, tail); err != nil {
			return 0, false, err
		}
		x.to = tail
	}
	off, ok := x.at[id]
	return off, ok, nil
}

// read indexes the confirmed records of [from, to), waiting for the owner's
// confirmed watermark to pass them.
func (x *index) read(ctx context.Context, p *Publisher, from, to uint64) error {
	for next := from; next < to; {
		b, err := p.c.Fetch(ctx, p.cfg.Stream, wire.FetchRequest{Start: "offset", Offset: next, MaxRecords: 10000, WaitMS: 1000})
		if err != nil {
			return fmt.Errorf("read %s from %d: %w", p.cfg.Stream, next, err)
		}
		if b.Epoch != x.epoch {
			x.at = nil
			return errEpochMoved
		}
		for _, r := range b.Records {
			if id, ok := Decode(r.Data); ok {
				if _, seen := x.at[id]; !seen {
					x.at[id] = r.Offset
				}
			}
		}
		p.scanned.Add(int64(len(b.Records)))
		next = max(next, b.Next)
	}
	return nil
}
