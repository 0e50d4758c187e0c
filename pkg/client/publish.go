package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/wire"
)

// publishOpts are the settings of one publish.
type publishOpts struct {
	producer string
	seq      uint64
	hasSeq   bool
	streamID uint64 // 0: any stream of the name
}

// PublishOption configures one publish.
type PublishOption func(*publishOpts)

// WithProducer tags the publish with a producer id and a sequence number
// (headers wire.HeaderProducer and wire.HeaderSequence), so that the owner
// drops a retried copy of it within its duplicate window and answers with
// the first write's offset. Sequences of one producer should increase.
func WithProducer(id string, seq uint64) PublishOption {
	return func(o *publishOpts) { o.producer, o.seq, o.hasSeq = id, seq, true }
}

// WithStreamID makes the publish land only in the stream with this id
// (header wire.HeaderStreamID; the id is in StreamInfo and in every
// confirm). Once the stream is deleted the publish fails with not_found,
// even if a stream of the same name was created since, and an owner that
// has not yet learnt of a newer stream of the name is not used.
func WithStreamID(id uint64) PublishOption {
	return func(o *publishOpts) { o.streamID = id }
}

// publishMsg builds the NATS message of a publish.
func publishMsg(stream string, data []byte, o publishOpts) *nats.Msg {
	msg := nats.NewMsg(wire.PublishSubject(stream))
	msg.Data = data
	if o.hasSeq {
		msg.Header.Set(wire.HeaderProducer, o.producer)
		msg.Header.Set(wire.HeaderSequence, strconv.FormatUint(o.seq, 10))
	}
	setStreamID(msg, o.streamID)
	return msg
}

// setStreamID names the stream id a request means (wire.HeaderStreamID);
// 0 names none.
func setStreamID(msg *nats.Msg, id uint64) {
	if id != 0 {
		msg.Header.Set(wire.HeaderStreamID, strconv.FormatUint(id, 10))
	}
}

// decodeConfirm decodes a publish reply that is not an error.
func decodeConfirm(stream string, m *nats.Msg) (wire.PublishConfirm, error) {
	var pc wire.PublishConfirm
	if err := json.Unmarshal(m.Data, &pc); err != nil {
		// An unreadable reply is not a confirm: never report it as one.
		return wire.PublishConfirm{}, fmt.Errorf("publish %s: decode confirm: %w", stream, err)
	}
	return pc, nil
}

// Publish appends data to stream and returns once the owner confirmed it
// (W copies hold it durably). Across a failover it retries the same record
// (see the package doc on duplicates); a confirm_timeout is returned as a
// *wire.Error and not retried.
func (c *Client) Publish(ctx context.Context, stream string, data []byte, opts ...PublishOption) (wire.PublishConfirm, error) {
	var o publishOpts
	for _, opt := range opts {
		opt(&o)
	}
	r := c.newRetrier("publish", stream, o.streamID)
	return c.publishRetry(ctx, r, stream, data, o)
}

// publishRetry makes publish attempts under r until one is confirmed or r
// gives up.
func (c *Client) publishRetry(ctx context.Context, r *retrier, stream string, data []byte, o publishOpts) (wire.PublishConfirm, error) {
	for {
		pc, err := c.publishOnce(ctx, stream, data, o)
		if err == nil {
			return pc, nil
		}
		if err := r.next(ctx, err); err != nil {
			return wire.PublishConfirm{}, err
		}
	}
}

// publishOnce makes one publish attempt, abandoned with ErrOwnerLost if
// the owner watch finds that its owner no longer serves the stream.
func (c *Client) publishOnce(ctx context.Context, stream string, data []byte, o publishOpts) (wire.PublishConfirm, error) {
	c.stats.publishAttempts.Add(1)
	b, err := c.batcherFor(stream, data, o)
	if err != nil {
		return wire.PublishConfirm{}, err
	}
	if b != nil {
		pc, err := b.attempt(ctx, data, o)
		if err == nil && o.streamID == 0 {
			err = c.learnFromConfirm(stream, pc)
		}
		return pc, err
	}
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := c.watchAttempt(stream, o.hasSeq, func() { cancel(ErrOwnerLost) })
	explicit := o.streamID
	o.streamID = c.idFor(stream, explicit)
	reply, err := c.request(actx, publishMsg(stream, data, o), c.opts.requestTimeout, replyJSON)
	if err != nil {
		done(wire.PublishConfirm{})
		if ctx.Err() == nil && errors.Is(context.Cause(actx), ErrOwnerLost) {
			return wire.PublishConfirm{}, fmt.Errorf("%s: %w", wire.PublishSubject(stream), ErrOwnerLost)
		}
		return wire.PublishConfirm{}, err
	}
	pc, err := decodeConfirm(stream, reply)
	done(pc)
	if err == nil && explicit == 0 {
		err = c.learnFromConfirm(stream, pc)
	}
	return pc, err
}

// learnFromConfirm pins stream to the id of a confirm of a publish that
// named no id. A confirm of another id than the pin (a publish sent before
// the client was pinned, across a delete and create of the name) is
// returned with an error wrapping ErrStreamReplaced, so that the caller
// sees where the record went.
func (c *Client) learnFromConfirm(stream string, pc wire.PublishConfirm) error {
	if err := c.learn(stream, pc.StreamID); err != nil {
		return fmt.Errorf("publish %s: confirmed at offset %d of another stream: %w", stream, pc.Offset, err)
	}
	return nil
}
