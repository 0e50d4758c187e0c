package client

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/wire"
)

// natsOnPort runs an embedded nats-server on port.
func natsOnPort(t *testing.T, port int) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(s.Shutdown)
	return s
}

// natsOnFreePort runs an embedded nats-server on a free port, which a
// test can start another on once it shut this one down.
func natsOnFreePort(t *testing.T) (int, *server.Server) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	return port, natsOnPort(t, port)
}

// A publish whose request was lost with its connection (the server went
// away and the client reconnected) is retried as soon as the connection
// is back, not after the request timeout: before, it waited the whole
// timeout (here 20 s) although the owner answered the retry at once.
func TestRequestLostInAReconnectIsRetriedAtOnce(t *testing.T) {
	port, s := natsOnFreePort(t)
	url := s.ClientURL()

	var got atomic.Int32
	serve := func() {
		svc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(svc.Close)
		subscribe(t, svc, wire.PublishSubject("s"), func(m *nats.Msg) {
			if got.Add(1) == 1 {
				return // the first attempt is lost: no answer
			}
			respondJSON(t, m, wire.PublishConfirm{StreamID: 1, Offset: 0, Epoch: 1, Copies: 1, W: 1})
		})
	}
	serve()
	c := connectClient(t, url, WithRequestTimeout(20*time.Second), WithOwnerProbe(0), WithStreamPinning(false))
	done := make(chan error, 1)
	began := time.Now()
	go func() {
		_, err := c.Publish(ctxTimeout(t, 30*time.Second), "s", []byte("x"))
		done <- err
	}()
	for got.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	s.Shutdown()
	s.WaitForShutdown()
	natsOnPort(t, port)
	if err := <-done; err != nil {
		t.Fatalf("publish: %v", err)
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Fatalf("the publish lost in the reconnect took %v: it waited for the request timeout", took)
	}
	if got.Load() < 2 {
		t.Fatalf("%d attempts reached the owner, want the retry too", got.Load())
	}
}

// A batch that does not fit the connection's reconnect buffer while the
// server is away was not sent: it is retried, as one sent in the
// reconnect and lost with it, and confirms once the server is back.
// (Before, the publish returned nats.ErrReconnectBufExceeded at once.)
func TestBatchOverTheReconnectBufferIsRetried(t *testing.T) {
	port, s := natsOnFreePort(t)
	url := s.ClientURL()
	svc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	answerLater(t, svc, func(*frame.PubBatch) time.Duration { return 0 })
	c := connectClient(t, url, WithBatching(time.Millisecond, 0, 0), WithRetry(0, 20*time.Second),
		WithOwnerProbe(0), WithStreamPinning(false), WithNATSOptions(nats.ReconnectBufSize(64)))

	s.Shutdown()
	s.WaitForShutdown()
	waitFor(t, c.nc.IsReconnecting)
	// The first batch fills the buffer (a message goes in whole if the
	// buffer had room before it); the second finds it full.
	done := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := c.Publish(ctxTimeout(t, 30*time.Second), "x", make([]byte, 1024))
			done <- err
		}()
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("a publish ended while the server was away: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	// A buffered batch waits for the reconnect without a retry: a retry
	// while the server is away is the refused one's.
	if n := c.Stats().Retries; n == 0 {
		t.Fatal("no retry while the server was away: no batch was refused, the test proves nothing")
	}
	natsOnPort(t, port)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
}
