package client

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/nettest"
	"github.com/brook-streams/brook/pkg/wire"
)

// A batch that waits for the connection (its PublishMsg blocked behind
// writes the server does not take, as behind thousands of publishes and
// probes in a mass failover) has its request timeout counted from when it
// left the client, not from when it was built: the wait is the client's,
// not the owner's. Before, the batch timed out while it waited, was retried
// as soon as it got out, and the owner got it twice (one retry per batch
// queued so; 12,000-16,000 in a 10,000-stream failover).
func TestBatchTimeoutStartsWhenTheBatchLeaves(t *testing.T) {
	url := startNATS(t)
	o := newBatchOwner(t, url)
	release := o.holdBatch(0)
	proxy := nettest.NewStallProxy(t, url)
	// A linger far longer than the test: the second record goes out only
	// when the first record's publisher is back with a third, from that
	// publish.
	c := connectClient(t, proxy.URL(), WithBatching(time.Minute, 0, 0),
		WithRequestTimeout(time.Second), WithOwnerProbe(0))
	ctx := ctxTimeout(t, 20*time.Second)

	first := make(chan error, 1)
	go func() {
		_, err := c.Publish(ctx, "x", []byte("a"), WithProducer("p", 1))
		first <- err
	}()
	<-o.got // the first batch is held at the owner
	second := make(chan error, 1)
	go func() {
		_, err := c.Publish(ctx, "x", []byte("b"), WithProducer("p", 2))
		second <- err
	}()
	// The second record joins the open batch behind the one in flight.
	waitForBatcher(t, c, "x", func(b *batcher) bool { return len(b.open) == 1 })

	// Stop the server taking the client's bytes, and fill the connection
	// until a write blocks, holding the connection's lock.
	proxy.Pause()
	stopFiller := nettest.BlockWrites(t, c.nc)

	// The first batch's reply confirms the first record, whose publisher
	// comes back with a third: that sends the second batch (the client
	// pinned the stream id from the reply, so the third record, naming
	// it, cannot join the open batch, which goes first and alone), whose
	// PublishMsg now waits for the connection, longer than the request
	// timeout. The first record's confirm does not wait for any send (the
	// reply's callback sends nothing). The third record waits for its
	// linger, past the test's end.
	release()
	released := time.Now()
	select {
	case err := <-first:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Second):
		t.Fatal("the first record's confirm waited for the second batch's send")
	}
	go func() { _, _ = c.Publish(ctx, "x", []byte("c"), WithProducer("p", 3)) }()
	time.Sleep(time.Until(released.Add(1500 * time.Millisecond)))
	proxy.Resume()
	stopFiller()
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if r := c.Stats().Retries; r != 0 {
		t.Errorf("%d retries: the wait for the connection was counted against the request timeout", r)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.batches) != 2 {
		t.Errorf("the owner got %d batches, want 2 (one per record sent, none repeated)", len(o.batches))
	}
}

// waitFor polls cond until it holds, for up to 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A batch is judged against the owner epoch the client knew before it was
// handed to the connection, not one learnt while it waited there: an
// attempt with producer ids that knew epoch 1 is abandoned once an owner
// at epoch 2 answers a probe, even if the client learnt of epoch 2 before
// the attempt was registered (it may have reached the owner at epoch 1,
// which then died). Judged against epoch 2 it would wait for its request
// timeout instead.
func TestAttemptIsJudgedAgainstTheEpochKnownBeforeItsSend(t *testing.T) {
	url := startNATS(t)
	startOwner(t, url, 2)
	c := connectClient(t, url, WithOwnerProbe(50*time.Millisecond))
	w := c.streamWatch("s")
	w.mu.Lock()
	w.epoch, w.streamID = 2, 1 // learnt while the attempt waited
	w.mu.Unlock()

	abandoned := make(chan struct{})
	done := c.watchAttemptSeen("s", true, &epochSeen{epoch: 1, streamID: 1}, func() { close(abandoned) })
	defer done(wire.PublishConfirm{})
	select {
	case <-abandoned:
	case <-time.After(5 * time.Second):
		t.Fatal("an attempt that knew epoch 1 was not abandoned when the owner at epoch 2 answered")
	}

	kept := make(chan struct{})
	done2 := c.watchAttempt("s", true, func() { close(kept) })
	defer done2(wire.PublishConfirm{})
	select {
	case <-kept:
		t.Fatal("an attempt that knew epoch 2 was abandoned by the owner at epoch 2")
	case <-time.After(500 * time.Millisecond):
	}
}

// A batch still queued behind a blocked send when its connection is
// replaced is not sent after all: its records were retried on the new
// connection (in a later batch), and the stale batch would write them a
// second time (records without producer ids cannot be told apart).
func TestBatchEndedWhileQueuedIsNotSent(t *testing.T) {
	url := startNATS(t)
	o := newBatchOwner(t, url)
	proxy := nettest.NewStallProxy(t, url)
	c := connectClient(t, proxy.URL(), WithBatching(time.Minute, 0, 0),
		WithRequestTimeout(10*time.Second), WithOwnerProbe(0))
	ctx := ctxTimeout(t, 20*time.Second)
	// The batcher (its reply subscription) is made on an open connection.
	if _, err := c.Publish(ctx, "x", []byte("first")); err != nil {
		t.Fatal(err)
	}

	// Block the connection, and the queue's drainer with it: a message
	// pushed onto the client's queue by this test waits in PublishMsg.
	proxy.Pause()
	stopFiller := nettest.BlockWrites(t, c.nc)
	drained := make(chan struct{})
	c.sends.push(&nats.Msg{Subject: "filler", Data: make([]byte, 512<<10)}, nil, nil, func(error) {})
	go func() { c.sends.drain(); close(drained) }()
	waitFor(t, func() bool {
		c.sends.mu.Lock()
		defer c.sends.mu.Unlock()
		return c.sends.sending
	})
	time.Sleep(200 * time.Millisecond) // the drainer is in its PublishMsg

	// A record without a producer id: its batch queues behind.
	done := make(chan error, 1)
	go func() {
		_, err := c.Publish(ctx, "x", []byte("once"))
		done <- err
	}()
	waitFor(t, func() bool {
		c.sends.mu.Lock()
		defer c.sends.mu.Unlock()
		return len(c.sends.queue) == 1
	})
	// The connection is replaced (what its reconnect handler does): the
	// flight fails and its record is retried.
	c.gen.Replaced()
	waitForBatcher(t, c, "x", func(b *batcher) bool {
		_, queued := b.flights[2]
		return !queued
	})
	proxy.Resume()
	stopFiller()
	<-drained
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.batches) != 2 {
		t.Errorf("the owner got %d batches, want 2: the first record's and the retry's (a third is the stale batch, sent after all)", len(o.batches))
	}
}

// waitForBatcher waits until cond, called under the lock of c's batcher
// of stream, holds.
func waitForBatcher(t *testing.T, c *Client, stream string, cond func(*batcher) bool) {
	t.Helper()
	waitFor(t, func() bool {
		c.batchMu.Lock()
		b := c.batchers[stream]
		c.batchMu.Unlock()
		b.mu.Lock()
		defer b.mu.Unlock()
		return cond(b)
	})
}
