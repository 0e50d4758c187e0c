package host

import (
	"bytes"
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// goroutineID is the calling goroutine's id, from its stack header.
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	f := bytes.Fields(buf)
	if len(f) < 2 {
		return ""
	}
	return string(f[1])
}

// A request after an earlier one finished is served by the goroutine that
// served the earlier one (its stack already grown), not a new one; two at
// once get two goroutines; the role's stop ends the idle ones.
func TestRequestGoroutinesAreReused(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	o := &owner{ctx: ctx, cancel: cancel, work: make(chan func())}
	b := newBudget("requests", "in flight", 8)
	serveOn := func(release <-chan struct{}) <-chan string {
		ch := make(chan string, 1)
		o.goRequest(&nats.Msg{}, b, func() {
			if release != nil {
				<-release
			}
			ch <- goroutineID()
		})
		return ch
	}
	first := <-serveOn(nil)
	// Let the first goroutine reach its wait for more.
	var second string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if second = <-serveOn(nil); second == first || time.Now().After(deadline) {
			break
		}
	}
	if second != first {
		t.Fatalf("the next request ran on goroutine %s, not the idle %s", second, first)
	}
	release := make(chan struct{})
	busy := serveOn(release)
	other := <-serveOn(nil)
	close(release)
	if held := <-busy; held == other {
		t.Fatalf("two requests at once shared goroutine %s", held)
	}
	// A slot is given back after the request's function returns, which
	// is after it answered here.
	waitInUse(t, b, 0)
	o.stop0()
}

// stop0 cancels the role and waits for its request goroutines, as stop
// does once the rest of the role has stopped.
func (o *owner) stop0() {
	o.mu.Lock()
	o.mu.stopped = true
	o.mu.Unlock()
	o.cancel()
	o.wg.Wait()
}
