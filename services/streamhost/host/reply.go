package host

import (
	"bytes"
	"encoding/json"
	"errors"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/wire"
)

// replyData sends data to reply subject to, if the request asked for one.
// Replies are best effort: a requester that went away just times out.
func (h *Host) replyData(to string, data []byte) {
	if to == "" {
		return
	}
	h.publishReply(&nats.Msg{Subject: to, Data: data})
}

// replyJSON sends v as JSON.
func (h *Host) replyJSON(to string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		h.log.Error("encode reply", "err", err)
		return
	}
	h.replyData(to, data)
}

// replyErr sends a wire error: a JSON wire.ErrorReply body with the code
// also in the Brook-Error header, so that a data-plane client tells it from
// a binary batch without parsing.
func (h *Host) replyErr(to string, e *wire.Error) {
	if to == "" {
		return
	}
	data, err := json.Marshal(wire.ErrorReply{Error: e})
	if err != nil {
		h.log.Error("encode error reply", "err", err)
		return
	}
	m := nats.NewMsg(to)
	m.Header.Set(frame.HeaderError, e.Code)
	m.Data = data
	h.publishReply(m)
}

// publishReply sends a reply message, best effort like replyData, through
// the host's replies (replies).
func (h *Host) publishReply(m *nats.Msg) { h.replies.send(h, m) }

// replies sends the host's replies on its NATS connection, one sender at
// a time. nats.go takes the connection's one mutex for every publish, and
// its flusher holds that mutex while it writes to the socket. When a mass
// failover has hundreds of goroutines answering at once on a machine
// short of CPU, each of them queued on that mutex and it was handed from
// waiter to waiter, each hand-off waiting for the next waiter to get a
// core: a goroutine dump 5 s after a SIGKILL found 183 replies queued on
// it, and the new owners' subscriptions behind them. Now a reply that
// finds another being sent is queued and its goroutine goes on; the
// sender sends it after its own, in order, so at most one reply waits
// for the connection (and, past the queue's bounds, the replies waiting
// for room in it). With no other reply in flight a reply is sent at
// once, on the caller's goroutine, as before.
//
// A goroutine's replies keep their order: its send returns once its reply
// is published or queued, a sender publishes what it took from the queue
// before it looks again, and it stops sending only with the queue empty.
// Other publishes of the host (a follower's acks and
// requests, owner notices) do not go through here: they go out on the
// caller's goroutine and may overtake queued replies, which go to other
// subjects (reply inboxes).
type replies struct {
	mu struct {
		sync.Mutex
		sending bool        // a goroutine is sending (and drains queued)
		queued  []*nats.Msg // to send after the one being sent, in order
		bytes   int         // of queued
		room    *sync.Cond  // on mu: the sender took the queued replies
	}
}

// Bounds of the replies queued behind the one being sent; a reply past
// them waits until the sender has taken the queue, as it waited for the
// connection without it.
const (
	maxQueuedReplies    = 4096
	maxQueuedReplyBytes = 8 << 20
	queuedReplyOverhead = 64 // per reply beside its subject and data
)

// send publishes m, or queues it for the goroutine sending now.
func (r *replies) send(h *Host, m *nats.Msg) {
	size := len(m.Subject) + len(m.Data) + queuedReplyOverhead
	r.mu.Lock()
	for r.mu.sending && len(r.mu.queued) > 0 &&
		(len(r.mu.queued) >= maxQueuedReplies || r.mu.bytes+size > maxQueuedReplyBytes) {
		if r.mu.room == nil {
			r.mu.room = sync.NewCond(&r.mu.Mutex)
		}
		r.mu.room.Wait()
	}
	if r.mu.sending {
		r.mu.queued = append(r.mu.queued, m)
		r.mu.bytes += size
		r.mu.Unlock()
		return
	}
	r.mu.sending = true
	r.mu.Unlock()
	h.publishNow(m)
	for {
		r.mu.Lock()
		batch := r.mu.queued
		r.mu.queued, r.mu.bytes = nil, 0
		if r.mu.room != nil {
			r.mu.room.Broadcast()
		}
		if len(batch) == 0 {
			r.mu.sending = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		for _, q := range batch {
			h.publishNow(q)
		}
	}
}

// publishNow publishes m on the host's connection.
func (h *Host) publishNow(m *nats.Msg) {
	if err := h.nc.PublishMsg(m); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		h.log.Warn("send reply", "subject", m.Subject, "err", err)
	}
}

// decodeStrict decodes a JSON request, refusing unknown fields, as a
// bad_request error.
func decodeStrict(data []byte, v any) *wire.Error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return wire.Errorf(wire.CodeBadRequest, "decode request: %v", err)
	}
	if dec.More() {
		return wire.Errorf(wire.CodeBadRequest, "decode request: trailing data")
	}
	return nil
}
