package nettest

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// BlockWrites publishes large messages on nc, whose server has stopped
// reading it (a paused StallProxy), until one publish has been blocked in
// its socket write for 200 ms, holding the connection's lock as its
// flusher does on a saturated connection; it returns then. stop ends the
// publishing and waits for it: call it after the proxy resumed (a publish
// blocked in its write returns only then), or leave it to the test's end,
// which ends the publishing without waiting.
func BlockWrites(t testing.TB, nc *nats.Conn) (stop func()) {
	t.Helper()
	var halt atomic.Bool
	var inPublish atomic.Int64 // Unix nanoseconds a publish began; 0 between
	done := make(chan struct{})
	t.Cleanup(func() { halt.Store(true) })
	go func() {
		defer close(done)
		big := make([]byte, 512<<10)
		for i := 0; i < 400 && !halt.Load(); i++ {
			inPublish.Store(time.Now().UnixNano())
			err := nc.Publish("nettest.flood", big)
			inPublish.Store(0)
			if err != nil {
				return
			}
		}
	}()
	stop = func() {
		halt.Store(true)
		<-done
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if began := inPublish.Load(); began != 0 && time.Since(time.Unix(0, began)) > 200*time.Millisecond {
			return stop
		}
		select {
		case <-done:
			t.Fatal("every publish on the paused connection went through, or one failed")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no publish on the paused connection blocked in 10 s")
		}
	}
}
