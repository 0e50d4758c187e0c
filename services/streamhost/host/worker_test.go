package host

import (
	"bytes"
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
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
// served the earlier one (its stack already grown), not a new one, whichever
// owner of the host it is for; two at once get two goroutines; the role's
// stop waits for its requests only, and the pool's close ends the idle
// workers.
func TestRequestGoroutinesAreReused(t *testing.T) {
	h := &Host{pool: newPool()}
	newOwner := func() *owner {
		ctx, cancel := context.WithCancel(context.Background())
		return &owner{ctx: ctx, cancel: cancel, h: h}
	}
	o, o2 := newOwner(), newOwner()
	b := newBudget("requests", "in flight", 8)
	serveOn := func(o *owner, release <-chan struct{}) <-chan string {
		ch := make(chan string, 1)
		o.goRequest(func(*wire.Error) {}, b, func() {
			if release != nil {
				<-release
			}
			ch <- goroutineID()
		})
		return ch
	}
	first := <-serveOn(o, nil)
	// Let the first goroutine reach its wait for more. The next request,
	// for another owner (a failover wakes thousands, one request each),
	// runs on it too.
	var second string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if second = <-serveOn(o2, nil); second == first || time.Now().After(deadline) {
			break
		}
	}
	if second != first {
		t.Fatalf("the next request ran on goroutine %s, not the idle %s", second, first)
	}
	release := make(chan struct{})
	busy := serveOn(o, release)
	other := <-serveOn(o, nil)
	close(release)
	if held := <-busy; held == other {
		t.Fatalf("two requests at once shared goroutine %s", held)
	}
	// A slot is given back after the request's function returns, which
	// is after it answered here.
	waitInUse(t, b, 0)
	o.endRequests()
	o2.endRequests()
	// Two at once need two; a third may start if a request came while
	// the worker that served the one before was still ending its job.
	if n := h.pool.workers(); n < 2 || n > 3 {
		t.Fatalf("%d workers started for at most two requests at once, want 2 (3 at most)", n)
	}
	done := make(chan struct{})
	go func() { h.pool.close(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second): // well before workerIdle
		t.Fatal("the pool's close did not end its idle workers")
	}
	// After close a job still runs, on a goroutine of its own.
	ran := make(chan struct{})
	h.pool.Go(func() { close(ran) })
	<-ran
}
