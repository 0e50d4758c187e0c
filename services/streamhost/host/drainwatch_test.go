package host

import (
	"bytes"
	"fmt"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// drainWatchers counts the goroutines running drainwatch.go's code.
func drainWatchers(t *testing.T) int {
	t.Helper()
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 2); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range strings.Split(buf.String(), "\n\n") {
		if strings.Contains(g, "drainwatch.go") {
			n++
		}
	}
	return n
}

// TestDrainsWatchedByOneGoroutine: the drains of many ended roles are
// watched by one goroutine of the host, not one each. A host expired with
// 2,500 owned streams ends 2,500 owner roles at once; a watcher per role,
// each looking every 20 ms for up to 15 s, was 125,000 wake-ups a second
// on a machine already short of CPU. Here 20 drains are held open (their
// callbacks blocked), then released: one watcher while they are open,
// none once they are done.
func TestDrainsWatchedByOneGoroutine(t *testing.T) {
	c := newMiniCluster(t)
	n1 := c.start("n1", nil)
	h := n1.h
	release := make(chan struct{})
	const drains = 20
	heldDrains(t, c, h, drains, release)
	time.Sleep(100 * time.Millisecond) // every watch has begun
	if n := drainWatchers(t); n != 1 {
		close(release)
		t.Fatalf("%d goroutines watch %d drains, want 1", n, drains)
	}
	close(release)
	deadline := time.Now().Add(10 * time.Second)
	for drainWatchers(t) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines still watch after every drain ended", drainWatchers(t))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestOneForcedReconnectServesDrainsEndedBeforeIt: drains that ended
// while the connection was down (removed on the client alone, so a
// reconnect's resend left them on the server) are all served by one forced
// reconnect: one look at them all, then one force. Each drain deciding
// alone forced one reconnect per drain (16 for 20 here), each dropping
// every request the host had in flight and sending the coordinators a
// disconnect advisory (review r5).
func TestOneForcedReconnectServesDrainsEndedBeforeIt(t *testing.T) {
	c, p, _, h := proxiedOwner(t, "r5", 7)
	release := make(chan struct{})
	const drains = 20
	subs := heldDrains(t, c, h, drains, release)
	time.Sleep(200 * time.Millisecond) // every drain's flush is done
	p.cut()
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for _, s := range subs {
		for s.IsValid() {
			if time.Now().After(deadline) {
				t.Fatal("drain not ended while down")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	p.restore()
	deadline = time.Now().Add(20 * time.Second)
	for drainWatchers(t) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines still watch", drainWatchers(t))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := h.drainForces.Load(); n != 1 {
		t.Fatalf("%d forced reconnects of the host's connection for %d drains that all ended before the first, want 1", n, drains)
	}
}

// heldDrains subscribes h to n subjects whose callbacks block until
// release is closed, gets one message into each, drains them and has h
// watch each drain as an ended role's; it returns the subscriptions.
func heldDrains(t *testing.T, c *miniCluster, h *Host, n int, release <-chan struct{}) []*nats.Subscription {
	t.Helper()
	var subs []*nats.Subscription
	for i := range n {
		subject := fmt.Sprintf("test.drain.%d", i)
		entered := make(chan struct{}, 1)
		s, err := h.nc.Subscribe(subject, func(*nats.Msg) {
			entered <- struct{}{}
			<-release
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := c.nc.Publish(subject, nil); err != nil {
			t.Fatal(err)
		}
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: callback not called", subject)
		}
		if err := s.Drain(); err != nil {
			t.Fatal(err)
		}
		subs = append(subs, s)
		reconnects := h.nc.Stats().Reconnects
		if !h.reqs.Go(func() { h.watchDrain([]*nats.Subscription{s}, reconnects) }) {
			t.Fatal("host stopping")
		}
	}
	return subs
}
