package client

import (
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/wire"
)

// A stream deleted and created again under the same name is another stream
// (an incarnation) with a new id, and its offsets start again at 0. A
// client that read or wrote one incarnation and went on by name alone
// would mix them up: a consumer continuing by offset would read the old
// incarnation's offsets and then the new one's, and a publish could be
// confirmed by a stale owner of the deleted one. So by default a Client
// pins each stream to the id it learns on first contact — the first
// confirm, the first fetch reply (Brook-Stream-Id header), CreateStream or
// StreamInfo — and names that id on every later publish, fetch and cursor
// commit (wire.HeaderStreamID). A pinned request that meets another
// incarnation fails with ErrStreamReplaced and never returns its records
// or its confirms; Unpin (or DeleteStream or CreateStream from this
// client) lets the client move on to the stream that holds the name now.

// WithStreamPinning turns pinning of streams to the id first met on or off
// (on by default). Without it a request without an explicit id
// (WithStreamID, FromStreamID) reaches whichever stream holds the name.
func WithStreamPinning(on bool) Option {
	return func(o *options) { o.noPinning = !on }
}

// PinnedStreamID returns the id stream is pinned to, or 0 if none.
func (c *Client) PinnedStreamID(stream string) uint64 {
	if c.opts.noPinning {
		return 0
	}
	c.pinMu.Lock()
	defer c.pinMu.Unlock()
	return c.pins[stream]
}

// Unpin forgets the id stream is pinned to, so that the next request
// reaches (and pins) whichever stream holds the name then.
func (c *Client) Unpin(stream string) {
	c.pinMu.Lock()
	delete(c.pins, stream)
	c.pinMu.Unlock()
}

// setPin pins stream to id, replacing any earlier pin (CreateStream).
func (c *Client) setPin(stream string, id uint64) {
	if c.opts.noPinning || id == 0 {
		return
	}
	c.pinMu.Lock()
	c.pins[stream] = id
	c.pinMu.Unlock()
}

// learn pins stream to id if it is not pinned yet. If it is pinned to
// another id, it returns an error wrapping ErrStreamReplaced: what was met
// is another incarnation of the name.
func (c *Client) learn(stream string, id uint64) error {
	if c.opts.noPinning || id == 0 {
		return nil
	}
	c.pinMu.Lock()
	defer c.pinMu.Unlock()
	pinned, ok := c.pins[stream]
	if !ok {
		c.pins[stream] = id
		return nil
	}
	if pinned != id {
		return replacedError(stream, pinned, id)
	}
	return nil
}

// idFor returns the stream id a request names: the explicit one, else the
// pinned one (0: any stream of the name).
func (c *Client) idFor(stream string, explicit uint64) uint64 {
	if explicit != 0 {
		return explicit
	}
	return c.PinnedStreamID(stream)
}

func replacedError(stream string, meant, met uint64) error {
	return fmt.Errorf("stream %s: this client means stream id %d, the name now holds id %d: %w", stream, meant, met, ErrStreamReplaced)
}

// replyStreamID returns the stream id a data-plane reply names in its
// wire.HeaderStreamID header, or 0.
func replyStreamID(m *nats.Msg) uint64 {
	if m == nil || m.Header == nil {
		return 0
	}
	id, err := strconv.ParseUint(m.Header.Get(wire.HeaderStreamID), 10, 64)
	if err != nil {
		return 0
	}
	return id
}

// namedError returns the error for werr, a reply to a request that named
// stream id named (0: none). A data-plane not_found answers a request
// naming an id older than the owner's: that stream was deleted and the name
// holds a newer one, so it wraps ErrStreamReplaced (and still werr).
func namedError(named uint64, werr *wire.Error) error {
	if werr.Code == wire.CodeNotFound && named != 0 {
		return fmt.Errorf("%w: %w", ErrStreamReplaced, werr)
	}
	return werr
}

// requestStreamID returns the stream id a request names, or 0.
func requestStreamID(m *nats.Msg) uint64 { return replyStreamID(m) }
