package client

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
)

// announce publishes a new owner's notice for stream "s", as a host does
// once it takes publishes.
func announce(t *testing.T, o *standInOwner, node string) {
	t.Helper()
	data, err := json.Marshal(wire.OwnerNotice{Stream: "s", StreamID: 1, Epoch: o.epoch, Node: node})
	if err != nil {
		t.Fatal(err)
	}
	if err := o.nc.Publish(wire.OwnerNoticeSubject("s", node), data); err != nil {
		t.Fatal(err)
	}
	if err := o.nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// A publish that found nobody serving waits for its backoff (here at
// least 5 s) or for a new owner's notice: with the notice it is confirmed
// at once; without one, an owner that serves but does not announce is
// not tried again within a second.
func TestRetryWakesOnOwnerNotice(t *testing.T) {
	url := startNATS(t)
	c := connectClient(t, url, WithBackoff(10*time.Second, 10*time.Second), WithRetry(0, time.Minute))

	// Without a notice: the backoff holds the retry.
	quiet := startOwner(t, url, 1)
	for _, s := range quiet.subs {
		_ = s.Unsubscribe()
	}
	_ = quiet.nc.Flush()
	go func() {
		time.Sleep(100 * time.Millisecond)
		quiet.subs = append(quiet.subs[:0], subscribe(t, quiet.nc, wire.PublishSubject("s"), quiet.onPublish))
		_ = quiet.nc.Flush()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_, err := c.Publish(ctx, "s", []byte("unheard"))
	cancel()
	if err == nil {
		t.Fatal("a publish retried without a notice was confirmed within 1s; its backoff is at least 5s")
	}
	for _, s := range quiet.subs {
		_ = s.Unsubscribe()
	}
	_ = quiet.nc.Flush()

	// With a notice: the retry goes out at once.
	got := make(chan *standInOwner, 1)
	go func() {
		time.Sleep(100 * time.Millisecond)
		o := startOwner(t, url, 2)
		announce(t, o, "h2")
		got <- o
	}()
	start := time.Now()
	pc, err := c.Publish(ctxTimeout(t, 4*time.Second), "s", []byte("announced"))
	took := time.Since(start)
	o := <-got
	if err != nil || pc.Epoch != 2 {
		t.Fatalf("publish after the notice: %+v %v (after %v)", pc, err, took)
	}
	if n := o.pubs.Load(); n != 1 {
		t.Fatalf("the new owner saw %d publishes, want 1", n)
	}
}

// A publish held by an owner that died waits for a probe to learn that
// its attempt is lost; with the probe 10 s away, only the new owner's
// notice makes the client probe at once, abandon the attempt and retry it
// at the new owner, long before the 3 s request timeout.
func TestOwnerNoticeAbandonsAHeldAttempt(t *testing.T) {
	url := startNATS(t)
	a := startOwner(t, url, 1)
	c := connectClient(t, url, WithRequestTimeout(3*time.Second), WithOwnerProbe(10*time.Second))
	if pc, err := c.Publish(ctxTimeout(t, 10*time.Second), "s", []byte("one")); err != nil || pc.Epoch != 1 {
		t.Fatalf("first publish: %+v %v", pc, err)
	}
	a.mu.Lock()
	a.hold = true
	a.mu.Unlock()
	started := make(chan *standInOwner, 1)
	go func() {
		<-a.held
		time.Sleep(150 * time.Millisecond)
		b := startOwner(t, url, 2)
		announce(t, b, "h2")
		started <- b
	}()
	start := time.Now()
	pc, err := c.Publish(ctxTimeout(t, 20*time.Second), "s", []byte("two"))
	took := time.Since(start)
	b := <-started
	if err != nil || pc.Epoch != 2 {
		t.Fatalf("publish: %+v %v", pc, err)
	}
	if took > 2*time.Second {
		t.Fatalf("publish took %v; the notice should have had the held attempt abandoned well before the 3s request timeout", took)
	}
	if b.pubs.Load() < 1 {
		t.Fatalf("the new owner saw %d publishes", b.pubs.Load())
	}
}
