package client

import (
	"context"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/linkconn"
)

// TestBatchRetriedWhenItsLinkClosesBeforeTheSend: a batch routed to a
// client link connection that closes before the batch is written (the
// owner's host was killed: the writer's broken pipe closes the queue a
// moment before the connection's context ends) was never sent, so it is
// retried over the bus like a batch whose connection closed while it
// waited, and the publish confirms. (It failed the publish with "the
// client link closed" when the send's error won the race.)
func TestBatchRetriedWhenItsLinkClosesBeforeTheSend(t *testing.T) {
	url := startNATS(t)
	o := newBatchOwner(t, url)
	c := connectClient(t, url, WithDirectLink(true), WithBatching(time.Millisecond, 0, 0))
	// The window: the queue is closed and the context not yet ended.
	hc := &hostConn{l: c.link, node: "h1", q: linkconn.NewQueue(linkMaxFrame, linkMaxBuffered), started: time.Now()}
	hc.ctx, hc.cancel = context.WithCancel(context.Background())
	t.Cleanup(hc.cancel)
	hc.q.Close()
	c.link.mu.Lock()
	c.link.mu.routes["x"] = &linkRoute{conn: hc}
	c.link.mu.Unlock()

	pc, err := c.Publish(ctxTimeout(t, 10*time.Second), "x", []byte("r"))
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	if pc.Offset != 0 {
		t.Fatalf("confirmed at offset %d, want 0", pc.Offset)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.batches) != 1 {
		t.Fatalf("the owner got %d batches over the bus, want 1", len(o.batches))
	}
}
