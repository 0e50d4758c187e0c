package server

import (
	"log/slog"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/connwatch"
)

// The coordinator's connections ping their server as every service's do,
// so that a silent partition is found out in seconds.
func TestNATSOptionsPing(t *testing.T) {
	o := nats.GetDefaultOptions()
	for _, opt := range natsOptions("c", slog.New(slog.DiscardHandler), func(*nats.Conn) {}) {
		if err := opt(&o); err != nil {
			t.Fatal(err)
		}
	}
	if o.PingInterval != connwatch.PingInterval || o.MaxPingsOut != connwatch.MaxPingsOut {
		t.Fatalf("ping every %v, %d out; want %v, %d", o.PingInterval, o.MaxPingsOut, connwatch.PingInterval, connwatch.MaxPingsOut)
	}
}
