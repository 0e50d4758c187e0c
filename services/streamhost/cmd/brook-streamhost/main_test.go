package main

import (
	"testing"
	"time"
)

// The first reconnect attempt after every server was tried goes at once
// (a host kicked off its only server is back within the disconnect
// grace); later ones wait 100 ms and up to 150 ms of jitter, as nats.go's
// ReconnectWait and ReconnectJitter did.
func TestReconnectDelay(t *testing.T) {
	if d := reconnectDelay(1); d != 0 {
		t.Fatalf("first pass: %v, want none", d)
	}
	for attempts := 2; attempts < 200; attempts++ {
		if d := reconnectDelay(attempts); d < 100*time.Millisecond || d >= 250*time.Millisecond {
			t.Fatalf("pass %d: %v, want 100 ms to 250 ms", attempts, d)
		}
	}
}
