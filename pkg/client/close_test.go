package client

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Closing a client whose server went away (the connection reconnecting)
// closes it without an error; before, Close returned Drain's "connection
// reconnecting", which the cluster smoke test then reported as a failure.
func TestCloseWhileReconnecting(t *testing.T) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	c := connectClient(t, s.ClientURL())
	s.Shutdown()
	deadline := time.Now().Add(5 * time.Second)
	for !c.Conn().IsReconnecting() {
		if time.Now().After(deadline) {
			t.Fatal("the connection never started reconnecting")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("close while reconnecting: %v", err)
	}
	if !c.Conn().IsClosed() {
		t.Fatal("the connection is not closed")
	}
}

// TestRetryEndsAtClose: a request retrying when Client.Close runs makes
// no attempt after it and ends with ErrClosed, also where nothing else
// would stop it: an unbatched publish on a connection the caller owns
// (New), which stays open after Close. Before, it retried until its retry
// limit (here 20 s). Close comes while the retry waits out its backoff
// (250-500 ms), so the attempt after that wait is the one not made.
func TestRetryEndsAtClose(t *testing.T) {
	url := startNATS(t)
	nc := responderConn(t, url) // the caller's: Close leaves it open
	c := New(nc, WithBatching(0, 0, 0), WithBackoff(500*time.Millisecond, 500*time.Millisecond),
		WithRetry(0, 20*time.Second), WithLogger(slog.New(slog.DiscardHandler)))
	done := make(chan error, 1)
	go func() {
		// Nobody owns "s": every attempt finds no responders.
		_, err := c.Publish(ctxTimeout(t, 30*time.Second), "s", []byte("r"))
		done <- err
	}()
	waitFor(t, func() bool { return c.Stats().Retries >= 1 }) // retrying: now in its backoff
	closed := time.Now()
	attempts := c.Stats().PublishAttempts
	if err := c.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("the publish ended with %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("the publish still retries %v after Close", time.Since(closed).Round(time.Millisecond))
	}
	if n := c.Stats().PublishAttempts; n != attempts {
		t.Fatalf("%d publish attempts after Close, want none", n-attempts)
	}
}
