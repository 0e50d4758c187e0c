package client

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/wire"
)

// readOpts are the settings of one Fetch or CommitCursor.
type readOpts struct {
	streamID uint64 // 0: any stream of the name
}

// ReadOption configures one Fetch or CommitCursor.
type ReadOption func(*readOpts)

// FromStreamID makes a fetch or cursor commit reach only the stream with
// this id (header wire.HeaderStreamID; the id is in StreamInfo and in every
// confirm), as WithStreamID does for a publish: once that stream is deleted
// it fails with not_found, even if a stream of the same name was created
// since, so a reader never takes the new stream's offsets for the old's.
// An id of 0 names no stream: any stream of the name is read.
func FromStreamID(id uint64) ReadOption {
	return func(o *readOpts) { o.streamID = id }
}

// explicitID returns the stream id opts name (0: none).
func explicitID(opts []ReadOption) uint64 {
	var o readOpts
	for _, opt := range opts {
		opt(&o)
	}
	return o.streamID
}

// readMsg builds the NATS message of a fetch or cursor commit of stream,
// naming the id opts give or else the one stream is pinned to.
func (c *Client) readMsg(stream, subject string, body []byte, opts []ReadOption) *nats.Msg {
	msg := nats.NewMsg(subject)
	msg.Data = body
	setStreamID(msg, c.idFor(stream, explicitID(opts)))
	return msg
}

// checkReadReply refuses a fetch reply from another stream than the one
// the request named, and pins stream to the id the reply names when the
// request named none of its own (explicit 0).
func (c *Client) checkReadReply(stream string, explicit uint64, req, reply *nats.Msg) error {
	met := replyStreamID(reply)
	if met == 0 {
		return nil // a host that does not name it; the request's header still held
	}
	if meant := requestStreamID(req); meant != 0 && meant != met {
		return replacedError(stream, meant, met)
	}
	if explicit != 0 {
		return nil
	}
	return c.learn(stream, met)
}

// Fetch asks the stream's owner for records, at the position req names
// (see wire.FetchRequest). Only confirmed records are returned. The batch's
// Next is where the following fetch should start. A fetch has no effect, so
// it is retried across a failover like a publish.
func (c *Client) Fetch(ctx context.Context, stream string, req wire.FetchRequest, opts ...ReadOption) (*frame.Batch, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: encode request: %w", stream, err)
	}
	// A long poll holds the reply back by up to WaitMS on purpose.
	timeout := c.opts.requestTimeout + wire.WaitUpTo(req.WaitMS, wire.MaxFetchWait)
	r := c.newRetrier("fetch", stream, explicitID(opts))
	for {
		msg := c.readMsg(stream, wire.FetchSubject(stream), body, opts)
		reply, err := c.readRequest(ctx, stream, msg, timeout)
		if err == nil {
			if perr := c.checkReadReply(stream, r.explicit, msg, reply); perr != nil {
				return nil, fmt.Errorf("fetch: %w", perr)
			}
			b, derr := frame.DecodeBatch(reply.Data)
			if derr != nil {
				return nil, fmt.Errorf("fetch %s: decode batch: %w", stream, derr)
			}
			return b, nil
		}
		if err := r.next(ctx, err); err != nil {
			return nil, err
		}
	}
}

// readRequest makes one attempt of a fetch: on stream's client link
// connection when one is up (WithDirectLink), else over the bus, and over
// the bus too when the connection closes first or its host does not
// serve the stream. A fetch changes nothing, so sending it twice is safe.
func (c *Client) readRequest(ctx context.Context, stream string, msg *nats.Msg, timeout time.Duration) (*nats.Msg, error) {
	if c.link != nil {
		injectTrace(ctx, msg)
		reply, sent, err := c.link.call(ctx, stream, msg, timeout)
		if sent {
			if err != nil {
				return nil, err
			}
			if werr := replyError(reply, replyBinary); werr != nil {
				return nil, namedError(requestStreamID(msg), werr)
			}
			c.link.fetches.Add(1)
			return reply, nil
		}
	}
	return c.request(ctx, msg, timeout, replyBinary)
}

// CommitCursor records that cursor of stream has consumed everything below
// offset. Committing the same offset again is harmless, so it is retried
// across a failover.
func (c *Client) CommitCursor(ctx context.Context, stream, cursor string, offset uint64, opts ...ReadOption) (wire.CursorCommitReply, error) {
	body, err := json.Marshal(wire.CursorCommit{Cursor: cursor, Offset: offset})
	if err != nil {
		return wire.CursorCommitReply{}, fmt.Errorf("commit %s/%s: encode: %w", stream, cursor, err)
	}
	r := c.newRetrier("commit cursor", stream, explicitID(opts))
	for {
		reply, err := c.request(ctx, c.readMsg(stream, wire.CommitSubject(stream), body, opts), c.opts.requestTimeout, replyJSON)
		if err == nil {
			var cr wire.CursorCommitReply
			if err := json.Unmarshal(reply.Data, &cr); err != nil {
				return cr, fmt.Errorf("commit %s/%s: decode reply: %w", stream, cursor, err)
			}
			return cr, nil
		}
		if err := r.next(ctx, err); err != nil {
			return wire.CursorCommitReply{}, err
		}
	}
}

// ConsumerConfig configures a Consumer.
type ConsumerConfig struct {
	// Cursor is the durable cursor's name (required). A new name starts at
	// the stream's retained head.
	Cursor string
	// MaxRecords and MaxBytes bound one fetch (0: the owner's defaults).
	MaxRecords int
	MaxBytes   int
	// Wait is how long the owner may hold a fetch that finds nothing new
	// (long poll). Default 1s.
	Wait time.Duration
	// CommitInterval is how often Next commits the cursor when it moved.
	// Default 1s; negative commits only on Commit and Close.
	CommitInterval time.Duration
	// StreamID, if set, ties the consumer to the stream with this id (see
	// FromStreamID): after that stream is deleted, Next and Commit fail
	// with not_found instead of reading a new stream of the same name.
	StreamID uint64
	// Prefetch is how many fetches the consumer keeps in flight while it
	// is behind: when a reply says the owner has confirmed more than it
	// returned, the following batches are asked for by offset (without a
	// long poll) before the caller has consumed this one, so the owner
	// reads and the network carries the next batches while the caller
	// works. 0 means DefaultPrefetch; 1 fetches one batch at a time. It
	// holds up to Prefetch replies (each up to MaxBytes) in memory.
	Prefetch int
}

// DefaultPrefetch is ConsumerConfig.Prefetch when it is 0.
const DefaultPrefetch = 4

// Consumer reads a stream through a durable cursor. The first fetch starts
// at the cursor's committed position; after that the consumer tracks its
// own position and fetches by offset, with up to ConsumerConfig.Prefetch
// fetches in flight while it is behind the owner's watermark. A record counts as consumed once the
// caller asks for the next one (or closes the consumer), and consumed
// positions are committed every CommitInterval and on Close.
//
// A Consumer is meant for one goroutine at a time.
type Consumer struct {
	c      *Client
	stream string
	cfg    ConsumerConfig

	started    bool   // the first fetch (by cursor) is done
	next       uint64 // the offset the next fetch asks from
	buf        []frame.Record
	returned   bool   // a record was handed out and is not yet counted consumed
	handedOut  uint64 // offset+1 of that record
	consumed   uint64 // the caller has consumed everything below this
	committed  uint64 // the owner has recorded everything below this
	lastCommit time.Time
	empties    int // fetches in a row that returned nothing
	closed     bool

	// ahead are the fetches asked for ahead, in offset order, each from
	// where the one before it is expected to end.
	ahead []*aheadFetch
}

// aheadFetch is a fetch a Consumer asked for before it needed it.
type aheadFetch struct {
	from   uint64
	max    int // records asked for
	cancel context.CancelFunc
	done   chan struct{} // closed once b or err is set
	b      *frame.Batch
	err    error
}

// end is where the next fetch after f would start if f returned all it
// asked for.
func (f *aheadFetch) end() uint64 { return f.from + uint64(f.max) }

// NewConsumer returns a consumer of stream; it fetches nothing until Next.
func (c *Client) NewConsumer(stream string, cfg ConsumerConfig) (*Consumer, error) {
	if err := wire.ValidName("stream", stream); err != nil {
		return nil, fmt.Errorf("new consumer: %w", err)
	}
	if err := wire.ValidName("cursor", cfg.Cursor); err != nil {
		return nil, fmt.Errorf("new consumer: %w", err)
	}
	if cfg.Wait == 0 {
		cfg.Wait = time.Second
	}
	if cfg.CommitInterval == 0 {
		cfg.CommitInterval = time.Second
	}
	if cfg.Prefetch == 0 {
		cfg.Prefetch = DefaultPrefetch
	}
	return &Consumer{c: c, stream: stream, cfg: cfg, lastCommit: time.Now()}, nil
}

// Position returns the offset below which the caller has consumed every
// record (0 before the first fetch). The record Next returned last is not
// counted until the next call to Next, Commit or Close.
func (cn *Consumer) Position() uint64 { return cn.consumed }

// Committed returns the offset the consumer last committed.
func (cn *Consumer) Committed() uint64 { return cn.committed }

// settle counts the record handed out last as consumed.
func (cn *Consumer) settle() {
	if cn.returned {
		cn.returned = false
		cn.consumed = max(cn.consumed, cn.handedOut)
	}
}

// Next returns the next record, fetching (and waiting for new records) as
// needed until ctx is done. Calling Next counts the previous record as
// consumed; a commit due by CommitInterval is made first, and its failure
// is logged, not returned, since a later commit covers it.
func (cn *Consumer) Next(ctx context.Context) (frame.Record, error) {
	if cn.closed {
		return frame.Record{}, ErrClosed
	}
	cn.settle()
	if cn.cfg.CommitInterval > 0 && cn.consumed > cn.committed && time.Since(cn.lastCommit) >= cn.cfg.CommitInterval {
		if err := cn.Commit(ctx); err != nil {
			cn.c.log.Warn("periodic cursor commit failed", "stream", cn.stream, "cursor", cn.cfg.Cursor, "err", err)
		}
	}
	for len(cn.buf) == 0 {
		if err := cn.fill(ctx); err != nil {
			return frame.Record{}, err
		}
	}
	rec := cn.buf[0]
	cn.buf = cn.buf[1:]
	cn.returned, cn.handedOut = true, rec.Offset+1
	return rec, nil
}

// fill makes one fetch, or takes the first fetch asked for ahead, and
// buffers what it returned, waiting a little after an empty answer the
// owner did not hold back.
func (cn *Consumer) fill(ctx context.Context) error {
	if len(cn.ahead) > 0 {
		return cn.takeAhead(ctx)
	}
	req := wire.FetchRequest{
		MaxRecords: cn.cfg.MaxRecords,
		MaxBytes:   cn.cfg.MaxBytes,
		WaitMS:     cn.cfg.Wait.Milliseconds(),
	}
	if cn.started {
		req.Start, req.Offset = "offset", cn.next
	} else {
		req.Cursor = cn.cfg.Cursor
	}
	began := time.Now()
	b, err := cn.c.Fetch(ctx, cn.stream, req, FromStreamID(cn.cfg.StreamID))
	if err != nil {
		return fmt.Errorf("consume %s/%s: %w", cn.stream, cn.cfg.Cursor, err)
	}
	recs := b.Records
	if cn.started {
		// Never hand out an offset twice to the same consumer, whatever
		// the owner sent back.
		for len(recs) > 0 && recs[0].Offset < cn.next {
			recs = recs[1:]
		}
	}
	if !cn.started {
		// The cursor's committed position is where this consumer starts:
		// the first record returned, or where the owner says to go on.
		cn.started = true
		start := b.Next
		if len(recs) > 0 {
			start = recs[0].Offset
		}
		cn.consumed, cn.committed, cn.next = start, start, start
	}
	if len(recs) > 0 {
		cn.next = max(cn.next, recs[len(recs)-1].Offset+1, b.Next)
		cn.buf = recs
		cn.empties = 0
		cn.fetchAhead(b, len(b.Records))
		return nil
	}
	cn.next = max(cn.next, b.Next)
	cn.empties++
	if time.Since(began) >= cn.cfg.Wait/2 {
		return nil // the owner held the fetch: it is the wait
	}
	t := time.NewTimer(backoff(cn.empties, cn.c.opts.backoffMin, cn.c.opts.backoffMax))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("consume %s/%s: %w", cn.stream, cn.cfg.Cursor, ctx.Err())
	case <-t.C:
		return nil
	}
}

// takeAhead waits for the first fetch asked for ahead and buffers its
// records if they start where the consumer is. A fetch ahead that failed,
// found nothing, or would leave a gap is dropped with every one after it:
// the next fill fetches from the consumer's position as usual, so that
// errors, long polls and the position the owner names are the plain
// fetch's.
func (cn *Consumer) takeAhead(ctx context.Context) error {
	f := cn.ahead[0]
	select {
	case <-f.done:
	case <-ctx.Done():
		return fmt.Errorf("consume %s/%s: %w", cn.stream, cn.cfg.Cursor, ctx.Err())
	}
	cn.ahead = cn.ahead[1:]
	f.cancel()
	if f.err != nil || f.from > cn.next {
		cn.dropAhead()
		return nil
	}
	recs := f.b.Records
	for len(recs) > 0 && recs[0].Offset < cn.next {
		recs = recs[1:]
	}
	if len(recs) == 0 || recs[0].Offset != cn.next {
		cn.dropAhead()
		return nil
	}
	cn.next = max(cn.next, recs[len(recs)-1].Offset+1, f.b.Next)
	cn.buf = recs
	cn.empties = 0
	if len(cn.ahead) > 0 && cn.ahead[0].from > cn.next {
		// This batch came back shorter than asked (its bytes ran out
		// first): ask for the gap before the next batch, which is kept.
		cn.askAhead(0, cn.next, int(cn.ahead[0].from-cn.next))
	}
	cn.fetchAhead(f.b, len(f.b.Records))
	return nil
}

// fetchAhead asks for the batches after the one b answered while b says
// the owner confirmed more than it returned, keeping up to Prefetch
// fetches in flight (the one being consumed counts), each asking for as
// many records as b returned (n), which is what the owner's bounds let
// one reply carry.
func (cn *Consumer) fetchAhead(b *frame.Batch, n int) {
	if n == 0 {
		return
	}
	from := cn.next
	if k := len(cn.ahead); k > 0 {
		from = cn.ahead[k-1].end()
	}
	for len(cn.ahead) < cn.cfg.Prefetch-1 && from < b.Confirmed {
		ask := min(n, int(min(b.Confirmed-from, math.MaxInt32)))
		cn.askAhead(len(cn.ahead), from, ask)
		from += uint64(ask)
	}
}

// askAhead sends a fetch of up to n records from offset from, without a
// long poll, and inserts it at index i of the fetches ahead.
func (cn *Consumer) askAhead(i int, from uint64, n int) {
	ctx, cancel := context.WithCancel(context.Background())
	f := &aheadFetch{from: from, max: n, cancel: cancel, done: make(chan struct{})}
	req := wire.FetchRequest{Start: "offset", Offset: from, MaxRecords: n, MaxBytes: cn.cfg.MaxBytes}
	go func() {
		defer close(f.done)
		f.b, f.err = cn.c.Fetch(ctx, cn.stream, req, FromStreamID(cn.cfg.StreamID))
	}()
	cn.ahead = slices.Insert(cn.ahead, i, f)
}

// dropAhead cancels and forgets every fetch asked for ahead.
func (cn *Consumer) dropAhead() {
	for _, f := range cn.ahead {
		f.cancel()
	}
	cn.ahead = nil
}

// Commit records the consumed position on the owner if it moved since the
// last commit.
func (cn *Consumer) Commit(ctx context.Context) error {
	cn.settle()
	if !cn.started || cn.consumed <= cn.committed {
		return nil
	}
	pos := cn.consumed
	if _, err := cn.c.CommitCursor(ctx, cn.stream, cn.cfg.Cursor, pos, FromStreamID(cn.cfg.StreamID)); err != nil {
		return err
	}
	cn.committed = max(cn.committed, pos)
	cn.lastCommit = time.Now()
	return nil
}

// Close counts the last record handed out as consumed, commits, and makes
// further calls to Next fail with ErrClosed.
func (cn *Consumer) Close(ctx context.Context) error {
	if cn.closed {
		return nil
	}
	cn.closed = true
	cn.dropAhead()
	if err := cn.Commit(ctx); err != nil {
		return fmt.Errorf("close consumer %s/%s: %w", cn.stream, cn.cfg.Cursor, err)
	}
	return nil
}
