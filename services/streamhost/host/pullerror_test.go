package host

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/wire"
)

// TestPullPageReadsTheRefusal: a coordinator's refusal of a pull carries
// its code in the Brook-Error header and its error in the body; the host
// reports the body's error, and the header's code when the body holds none
// it can read.
func TestPullPageReadsTheRefusal(t *testing.T) {
	nc := connectNATS(t)
	replies := make(chan *nats.Msg, 1)
	if _, err := nc.Subscribe(wire.AssignPull, func(m *nats.Msg) {
		r := <-replies
		r.Subject = m.Reply
		_ = m.RespondMsg(r)
	}); err != nil {
		t.Fatal(err)
	}
	h := &Host{nc: nc, cfg: Config{Node: "n1"}}
	refusal := func(code string, body []byte) *nats.Msg {
		m := nats.NewMsg("")
		m.Header.Set(frame.HeaderError, code)
		m.Data = body
		return m
	}
	body, _ := json.Marshal(wire.ErrorReply{Error: wire.Errorf(wire.CodeUnavailable, "no quorum")})
	for _, c := range []struct {
		name string
		msg  *nats.Msg
		want wire.Error
	}{
		{"header and body", refusal(wire.CodeUnavailable, body), wire.Error{Code: wire.CodeUnavailable, Message: "no quorum"}},
		{"header alone", refusal(wire.CodeOverloaded, []byte("busy")), wire.Error{Code: wire.CodeOverloaded, Message: "busy"}},
	} {
		replies <- c.msg
		_, err := h.pullPage(context.Background(), wire.AssignmentPull{Node: "n1"})
		var we *wire.Error
		if !errors.As(err, &we) || we.Code != c.want.Code || we.Message != c.want.Message {
			t.Errorf("%s: pull error %v, want %s: %s", c.name, err, c.want.Code, c.want.Message)
		}
	}
}
