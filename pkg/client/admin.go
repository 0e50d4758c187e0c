package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/wire"
)

// adminOnce sends one admin request and decodes the reply into resp.
func (c *Client) adminOnce(ctx context.Context, verb string, req, resp any) error {
	return c.jsonOnce(ctx, wire.AdminSubject(verb), req, resp, c.opts.adminTimeout)
}

// jsonOnce sends one JSON request to subject, waits up to wait for the
// reply and decodes it.
func (c *Client) jsonOnce(ctx context.Context, subject string, req, resp any, wait time.Duration) error {
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode %s request: %w", subject, err)
	}
	msg := nats.NewMsg(subject)
	msg.Data = body
	reply, err := c.request(ctx, msg, wait, replyJSON)
	if err != nil {
		return err
	}
	if resp == nil {
		return nil
	}
	if err := json.Unmarshal(reply.Data, resp); err != nil {
		return fmt.Errorf("decode %s reply: %w", subject, err)
	}
	return nil
}

// readRetryable is what a read may retry: a read has no effect, so a
// timeout or an unavailable coordinator is simply asked again.
func readRetryable(err error) bool {
	return writeRetryable(err) || errors.Is(err, ErrTimeout) ||
		errors.Is(err, nats.ErrDisconnected) || errors.Is(err, nats.ErrConnectionReconnecting)
}

// writeRetryable is what a write may retry: only what proves the write was
// not applied (nobody received it, or the coordinator refused it as
// unavailable or overloaded, before running it). A timed-out write may
// have been applied, so it goes back to the caller.
func writeRetryable(err error) bool {
	if errors.Is(err, nats.ErrNoResponders) {
		return true
	}
	code := wire.CodeOf(err)
	return code == wire.CodeUnavailable || code == wire.CodeOverloaded
}

// Admin sends an admin verb (see the wire.Verb* constants) and decodes the
// reply into resp (which may be nil). Reads (stream.info, stream.list,
// cluster.info) are retried on no responders, timeouts, unavailable and
// overloaded; writes only on no responders, unavailable and overloaded,
// within the retry limits.
func (c *Client) Admin(ctx context.Context, verb string, req, resp any) error {
	return c.adminWithin(ctx, verb, req, resp, c.opts.adminTimeout)
}

// adminWithin is Admin with wait as each attempt's wait for its reply.
func (c *Client) adminWithin(ctx context.Context, verb string, req, resp any, wait time.Duration) error {
	retry := writeRetryable
	switch verb {
	case wire.VerbStreamInfo, wire.VerbStreamList, wire.VerbClusterInfo:
		retry = readRetryable
	}
	return c.withSimpleRetry(ctx, "admin "+verb, retry, func(ctx context.Context) error {
		return c.jsonOnce(ctx, wire.AdminSubject(verb), req, resp, wait)
	})
}

// withSimpleRetry retries attempt while retry(err) holds, within the retry
// limits and ctx, without consulting the coordinators about a stream.
func (c *Client) withSimpleRetry(ctx context.Context, op string, retry func(error) bool, attempt func(context.Context) error) error {
	r := c.newRetrier(op, "", 0)
	for {
		err := attempt(ctx)
		if err == nil {
			return nil
		}
		if !retry(err) {
			return fmt.Errorf("%s: %w", op, err)
		}
		if err := r.next(ctx, err); err != nil {
			return err
		}
	}
}

// CreateStream creates a stream. The reply is the new stream's info as the
// coordinator returns it.
// The client is pinned to the new stream's id (see WithStreamPinning).
func (c *Client) CreateStream(ctx context.Context, req wire.StreamCreate) (wire.StreamInfo, error) {
	var info wire.StreamInfo
	err := c.Admin(ctx, wire.VerbStreamCreate, req, &info)
	if err == nil {
		c.setPin(req.Stream, info.StreamID)
	}
	return info, err
}

// DeleteStream deletes a stream and unpins it, so that this client's
// next request of the name reaches whatever stream holds it then.
func (c *Client) DeleteStream(ctx context.Context, stream string) (wire.OK, error) {
	var ok wire.OK
	err := c.Admin(ctx, wire.VerbStreamDelete, wire.StreamRef{Stream: stream}, &ok)
	if err == nil {
		c.Unpin(stream)
	}
	return ok, err
}

// UpdateStream changes an existing stream's confirm policy, retention or
// min_copies (the fields req sets; the others are kept). The reply is the
// stream's info after the change: a policy that needs more copies to
// confirm shows a pending recovery (reason "policy") until the stream
// serves under it at the next epoch.
func (c *Client) UpdateStream(ctx context.Context, req wire.StreamUpdate) (wire.StreamInfo, error) {
	var info wire.StreamInfo
	err := c.Admin(ctx, wire.VerbStreamUpdate, req, &info)
	return info, err
}

// StreamInfo returns a stream's assignment, status and copy tails. A
// missing stream is a *wire.Error with code wire.CodeNotFound, which also
// matches ErrNoSuchStream.
func (c *Client) StreamInfo(ctx context.Context, stream string) (wire.StreamInfo, error) {
	var info wire.StreamInfo
	err := c.Admin(ctx, wire.VerbStreamInfo, wire.StreamRef{Stream: stream}, &info)
	if err != nil && wire.CodeOf(err) == wire.CodeNotFound {
		err = fmt.Errorf("%w: %w", ErrNoSuchStream, err)
	}
	if err == nil {
		// First contact pins; a pinned client keeps its pin (the info
		// is returned as it is, whichever stream holds the name).
		_ = c.learn(stream, info.StreamID)
	}
	return info, err
}

// ListStreams lists every stream in one reply (see ListStreamsPage).
func (c *Client) ListStreams(ctx context.Context) (wire.StreamList, error) {
	var list wire.StreamList
	err := c.Admin(ctx, wire.VerbStreamList, wire.Empty{}, &list)
	return list, err
}

// ListStreamsPage lists up to limit streams whose names sort after cursor
// (start with ""); the reply's Next is the cursor of the next page, "" after
// the last. Unlike ListStreams, no reply grows with the cluster.
func (c *Client) ListStreamsPage(ctx context.Context, cursor string, limit int) (wire.StreamList, error) {
	var list wire.StreamList
	if limit < 1 {
		return list, wire.Errorf(wire.CodeBadRequest, "stream list page limit %d: want at least 1", limit)
	}
	err := c.Admin(ctx, wire.VerbStreamList, wire.StreamListRequest{Cursor: cursor, Limit: limit}, &list)
	return list, err
}

// ClusterInfo describes the coordinators and the stream hosts.
func (c *Client) ClusterInfo(ctx context.Context) (wire.ClusterInfo, error) {
	var info wire.ClusterInfo
	err := c.Admin(ctx, wire.VerbClusterInfo, wire.Empty{}, &info)
	return info, err
}

// DrainNode drains node. The reply comes once the drain is recorded (no
// copy and no ownership moves to the node from then on) and lists the
// replicated streams it owns, which the coordinator then moves to other
// hosts by planned moves; then the node is draining (ClusterInfo shows
// drain_requested meanwhile): it takes no copies and no ownership until
// UndrainNode or its restart, and what it still owns fails over by
// recovery.
func (c *Client) DrainNode(ctx context.Context, node string) (wire.NodeDrainReply, error) {
	var out wire.NodeDrainReply
	err := c.Admin(ctx, wire.VerbNodeDrain, wire.NodeRef{Node: node}, &out)
	return out, err
}

// UndrainNode ends node's drain: it may take copies and ownership again.
func (c *Client) UndrainNode(ctx context.Context, node string) (wire.OK, error) {
	var ok wire.OK
	err := c.Admin(ctx, wire.VerbNodeUndrain, wire.NodeRef{Node: node}, &ok)
	return ok, err
}

// MoveStream moves ownership of a live stream to req.Node, one of its
// followers (or the best live follower when empty) by a planned move: the
// owner stops taking publishes (the client retries them on the new owner),
// the target catches up, and the stream is sealed and committed at the
// next epoch. A move that did not complete is a *wire.Error: not_found,
// bad_request (not a live follower), conflict (a recovery or another move
// pending, or the recovery promoted another copy), timeout or unavailable.
// A move whose hand-off or recovery runs long is answered within
// wire.MoveReplyWithin(req.TimeoutMS) (req.TimeoutMS plus 12 s), so the
// request waits that long, or the Client's admin timeout if longer; ctx
// may end it sooner. A timeout error means the move may still complete
// (stream.info then says where the stream is).
func (c *Client) MoveStream(ctx context.Context, req wire.StreamMove) (wire.StreamMoveReply, error) {
	var out wire.StreamMoveReply
	err := c.adminWithin(ctx, wire.VerbStreamMove, req, &out, max(c.opts.adminTimeout, wire.MoveReplyWithin(req.TimeoutMS)))
	return out, err
}

// WithdrawRecovery withdraws the pending recovery of stream; the controller
// then records a new one.
func (c *Client) WithdrawRecovery(ctx context.Context, stream string) (wire.OK, error) {
	var ok wire.OK
	err := c.Admin(ctx, wire.VerbRecoveryWithdraw, wire.RecoveryWithdraw{Stream: stream}, &ok)
	return ok, err
}

// AcceptLoss moves stream to node (or, if node is empty, the live copy with
// the furthest published tail) without sealing anything. Confirmed records
// may be lost; it is an operator's decision.
func (c *Client) AcceptLoss(ctx context.Context, stream, node string) (wire.OK, error) {
	var ok wire.OK
	err := c.Admin(ctx, wire.VerbRecoveryAcceptLoss, wire.RecoveryAcceptLoss{Stream: stream, Node: node}, &ok)
	return ok, err
}

// ClearAttention clears an accepted-loss warning of stream.
func (c *Client) ClearAttention(ctx context.Context, stream string) (wire.OK, error) {
	var ok wire.OK
	err := c.Admin(ctx, wire.VerbAttentionClear, wire.AttentionClear{Stream: stream}, &ok)
	return ok, err
}

// AttentionList returns the attention service's list.
func (c *Client) AttentionList(ctx context.Context) (wire.AttentionListReply, error) {
	var list wire.AttentionListReply
	err := c.withSimpleRetry(ctx, "attention list", readRetryable, func(ctx context.Context) error {
		return c.jsonOnce(ctx, wire.AttentionList, wire.Empty{}, &list, c.opts.adminTimeout)
	})
	return list, err
}
