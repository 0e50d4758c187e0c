package host

import (
	"github.com/brook-streams/brook/pkg/nettest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestHealthAnswersWhileTheConnectionIsBlocked: the host's NATS connection
// stalls (its server stops reading, a write blocks holding the
// connection's lock for up to the flusher's timeout). /healthz's Health
// still answers at once, and then says the connection is blocked. Before,
// Ready asked nc.IsConnected and waited with the write.
func TestHealthAnswersWhileTheConnectionIsBlocked(t *testing.T) {
	c := newMiniCluster(t)
	p := nettest.NewStallProxy(t, c.url)
	nc, err := nats.Connect(p.URL(), nats.Name("brook-streamhost:n1"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	n1 := c.startOn("n1", nc, nil)
	for deadline := time.Now().Add(10 * time.Second); !n1.h.Ready(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the host never became ready: %v", n1.h.Health())
		}
	}

	p.Pause()
	t.Cleanup(p.Resume) // before the host stops
	nettest.BlockWrites(t, nc)

	health := func() (error, bool) {
		got := make(chan error, 1)
		go func() { got <- n1.h.Health() }()
		select {
		case err := <-got:
			return err, true
		case <-time.After(time.Second):
			return nil, false
		}
	}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		err, answered := health()
		if !answered {
			t.Fatal("Health waited for the blocked connection")
		}
		if err != nil && strings.Contains(err.Error(), "has not answered") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Health never reported the blocked connection (last: %v)", err)
		}
	}
}
