package client

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/wire"
)

// startNATS runs an embedded nats-server on a random loopback port.
func startNATS(t *testing.T) string {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatalf("new nats server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(s.Shutdown)
	return s.ClientURL()
}

// connectClient returns a Client with fast retries for tests.
func connectClient(t *testing.T, url string, opts ...Option) *Client {
	t.Helper()
	base := []Option{
		WithBackoff(time.Millisecond, 5*time.Millisecond),
		WithRequestTimeout(2 * time.Second),
		WithAdminTimeout(2 * time.Second),
		WithLogger(slog.New(slog.DiscardHandler)),
		// Stand-ins answer single publishes; batch tests turn it on.
		WithBatching(0, 0, 0),
	}
	c, err := Connect(context.Background(), url, append(base, opts...)...)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	c.opts.infoInterval = 0 // ask the coordinator on every retry, for determinism
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// responderConn is a second connection that plays a service.
func responderConn(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("connect responder: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// subscribe subscribes and flushes, so the subscription is known to the
// server when it returns.
func subscribe(t *testing.T, nc *nats.Conn, subject string, h nats.MsgHandler) *nats.Subscription {
	t.Helper()
	sub, err := nc.Subscribe(subject, h)
	if err != nil {
		t.Fatalf("subscribe %s: %v", subject, err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
	return sub
}

// respondJSON answers m with v as JSON.
func respondJSON(t *testing.T, m *nats.Msg, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Errorf("marshal reply: %v", err)
		return
	}
	if err := m.Respond(b); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		t.Errorf("respond: %v", err)
	}
}

// respondError answers m the way a stream host answers an error: header
// Brook-Error and a JSON wire.ErrorReply body.
func respondError(t *testing.T, m *nats.Msg, e *wire.Error) {
	t.Helper()
	b, _ := json.Marshal(wire.ErrorReply{Error: e})
	r := nats.NewMsg(m.Reply)
	r.Header.Set(frame.HeaderError, e.Code)
	r.Data = b
	if err := m.RespondMsg(r); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		t.Errorf("respond error: %v", err)
	}
}

// respondBatch answers m with a binary batch.
func respondBatch(t *testing.T, m *nats.Msg, b *frame.Batch) {
	t.Helper()
	// A stand-in still answering when the test's cleanup closed its
	// connection is not a failure of the test.
	if err := m.Respond(frame.AppendBatch(nil, b)); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		t.Errorf("respond batch: %v", err)
	}
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// refuser has a stand-in host answer every request on subject with e,
// and returns the count of requests it answered.
func refuser(t *testing.T, url, subject string, e *wire.Error) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	subscribe(t, responderConn(t, url), subject, func(m *nats.Msg) {
		n.Add(1)
		respondError(t, m, e)
	})
	return &n
}
