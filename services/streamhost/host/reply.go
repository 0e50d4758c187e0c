package host

import (
	"bytes"
	"encoding/json"
	"errors"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/wire"
)

// replyData sends data to reply subject to, if the request asked for one.
// Replies are best effort: a requester that went away just times out.
func (h *Host) replyData(to string, data []byte) {
	if to == "" || h.replyToClient(to, nil, data) {
		return
	}
	if err := h.nc.Publish(to, data); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		h.log.Warn("send reply", "err", err)
	}
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
	data, ok := h.errorReplyData(e)
	if !ok {
		return
	}
	m := nats.NewMsg(to)
	m.Header.Set(frame.HeaderError, e.Code)
	m.Data = data
	h.publishReply(m)
}

// publishReply sends a reply message with headers, best effort like
// replyData.
func (h *Host) publishReply(m *nats.Msg) {
	if h.replyToClient(m.Subject, m.Header, m.Data) {
		return
	}
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

// errorReplyData encodes e as every refusal's body, a JSON wire.ErrorReply,
// whatever carries it (replyErr, the direct link's linkReply); false, and
// logged, if it cannot be encoded.
func (h *Host) errorReplyData(e *wire.Error) ([]byte, bool) {
	data, err := json.Marshal(wire.ErrorReply{Error: e})
	if err != nil {
		h.log.Error("encode error reply", "err", err)
		return nil, false
	}
	return data, true
}
