package client

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

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

// A publish whose request was lost with its connection (the server went
// away and the client reconnected) is retried as soon as the connection
// is back, not after the request timeout: before, it waited the whole
// timeout (here 20 s) although the owner answered the retry at once.
func TestRequestLostInAReconnectIsRetriedAtOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	s := natsOnPort(t, port)
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
