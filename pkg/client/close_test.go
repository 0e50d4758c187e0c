package client

import (
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
