package client

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/wire"
)

// serveAllBatches has nc confirm every publish batch to any stream.
func serveAllBatches(t *testing.T, nc *nats.Conn) {
	t.Helper()
	next := map[string]uint64{}
	subscribe(t, nc, wire.PublishBatchSubject("*"), func(m *nats.Msg) {
		b, err := frame.DecodePubBatch(m.Data)
		if err != nil {
			respondError(t, m, wire.Errorf(wire.CodeBadRequest, "%v", err))
			return
		}
		stream := strings.Split(m.Subject, ".")[2]
		r := &frame.PubReply{Copies: 1, W: 1}
		for range b.Records {
			r.Results = append(r.Results, frame.PubResult{Offset: next[stream]})
			next[stream]++
		}
		reply := nats.NewMsg(m.Reply)
		reply.Header.Set(wire.HeaderStreamID, "1")
		reply.Header.Set(wire.HeaderEpoch, "1")
		reply.Data = frame.AppendPubReply(nil, r)
		_ = m.RespondMsg(reply)
	})
}

// A client that publishes to ever new streams does not keep a batcher,
// with its reply subscription and that subscription's goroutine, for
// every stream it ever published to: once it holds many, a new batcher
// drops those idle for batcherIdle. A stream whose batcher was dropped
// gets a new one at its next publish.
func TestIdleBatchersAreDropped(t *testing.T) {
	url := startNATS(t)
	serveAllBatches(t, responderConn(t, url))
	c := connectClient(t, url, WithRetry(1, 0), WithBatching(time.Millisecond, 0, 0))
	c.batchMu.Lock()
	c.batcherIdle = 20 * time.Millisecond
	c.batchMu.Unlock()
	publish := func(stream string) {
		t.Helper()
		if _, err := c.Publish(ctxTimeout(t, 5*time.Second), stream, []byte("r")); err != nil {
			t.Fatalf("publish to %s: %v", stream, err)
		}
	}
	for i := range 100 {
		publish(fmt.Sprintf("a%03d", i))
	}
	c.batchMu.Lock()
	var first []*batcher
	for _, b := range c.batchers {
		first = append(first, b)
	}
	c.batchMu.Unlock()
	time.Sleep(50 * time.Millisecond) // every a-stream's batcher idle past batcherIdle
	for i := range 100 {
		publish(fmt.Sprintf("b%03d", i))
	}
	c.batchMu.Lock()
	held := len(c.batchers)
	var kept []string
	for name := range c.batchers {
		if strings.HasPrefix(name, "a") {
			kept = append(kept, name)
		}
	}
	c.batchMu.Unlock()
	if len(kept) > 0 || held > 2*minBatcherPrune {
		t.Fatalf("after 200 streams, 100 of them idle: %d batchers held, %d of the idle ones (%v)", held, len(kept), kept)
	}
	for _, b := range first {
		if b.sub.IsValid() {
			t.Fatalf("the dropped batcher of %s still holds its reply subscription", b.stream)
		}
	}
	publish("a000") // its batcher was dropped: a new one serves it
	b, _ := c.batcherFor("a000", nil, publishOpts{})
	if b == nil || slices.Contains(first, b) {
		t.Fatalf("a000's batcher after its publish: %p, want a new one", b)
	}
	b.release()
}

// A batcher that batcherFor handed to a publish is not dropped before
// the publish's add, however long it was idle; once released it is.
func TestHeldBatcherIsNotDropped(t *testing.T) {
	url := startNATS(t)
	serveAllBatches(t, responderConn(t, url))
	c := connectClient(t, url, WithRetry(1, 0), WithBatching(time.Millisecond, 0, 0))
	for i := range minBatcherPrune {
		if _, err := c.Publish(ctxTimeout(t, 5*time.Second), fmt.Sprintf("f%02d", i), []byte("r")); err != nil {
			t.Fatal(err)
		}
	}
	held, err := c.batcherFor("f00", nil, publishOpts{})
	if err != nil || held == nil {
		t.Fatalf("batcherFor: %v", err)
	}
	drop := func() []*batcher {
		c.batchMu.Lock()
		defer c.batchMu.Unlock()
		c.batchPruneAt = 0
		return c.dropIdleBatchers(time.Now().Add(time.Hour))
	}
	dropped := drop()
	if slices.Contains(dropped, held) || len(dropped) != minBatcherPrune-1 {
		t.Fatalf("dropped %d batchers (the held one among them: %v), want the %d others", len(dropped), slices.Contains(dropped, held), minBatcherPrune-1)
	}
	for _, b := range dropped {
		b.unsubscribe()
	}
	held.release()
	// Stand-ins, never used so never idle, make enough batchers for a
	// look; taken out again before Close, which would close them.
	c.batchMu.Lock()
	for i := range minBatcherPrune {
		c.batchers[fmt.Sprint("stand-in-", i)] = &batcher{flights: map[uint64]*flight{}}
	}
	c.batchMu.Unlock()
	dropped = drop()
	c.batchMu.Lock()
	for i := range minBatcherPrune {
		delete(c.batchers, fmt.Sprint("stand-in-", i))
	}
	c.batchMu.Unlock()
	if !slices.Contains(dropped, held) {
		t.Fatal("the released batcher was not dropped")
	}
	for _, b := range dropped {
		b.unsubscribe()
	}
}

// A batcher no record went through is idle once its hold is released
// (a PublishAsync that found its publisher closed), so it can be dropped.
func TestReleasedUnusedBatcherIsIdle(t *testing.T) {
	b := &batcher{flights: map[uint64]*flight{}}
	b.holds.Store(1)
	b.release()
	if b.holds.Load() != 0 || b.idle.IsZero() {
		t.Fatalf("holds %d, idle %v: want 0 and idle from the release", b.holds.Load(), b.idle)
	}
}

// A batcher a publish holds (batcherFor handed it out and its add has not
// run yet) is not dropped however long it was idle, nor is one with a
// record open or in flight; an idle one is, once enough are held.
func TestDropIdleBatchersSparesHeldAndBusy(t *testing.T) {
	now := time.Now()
	long := now.Add(-time.Hour)
	c := &Client{batchers: map[string]*batcher{}, batcherIdle: time.Minute}
	for i := range minBatcherPrune - 3 {
		c.batchers["idle"+strconv.Itoa(i)] = &batcher{idle: long, flights: map[uint64]*flight{}}
	}
	c.batchers["held"] = &batcher{idle: long, flights: map[uint64]*flight{}}
	c.batchers["held"].holds.Store(1)
	c.batchers["open"] = &batcher{idle: long, open: []*batchItem{{}}, flights: map[uint64]*flight{}}
	c.batchers["flying"] = &batcher{idle: long, flights: map[uint64]*flight{1: {}}}
	c.batchers["recent"] = &batcher{idle: now.Add(-time.Second), flights: map[uint64]*flight{}}
	c.batchers["unused"] = &batcher{flights: map[uint64]*flight{}} // idle zero: never added to
	dropped := c.dropIdleBatchers(now)
	if len(dropped) != minBatcherPrune-3 {
		t.Fatalf("dropped %d, want the %d idle ones", len(dropped), minBatcherPrune-3)
	}
	for _, b := range dropped {
		if !b.closed {
			t.Fatal("a dropped batcher is not closed")
		}
	}
	for _, name := range []string{"held", "open", "flying", "recent", "unused"} {
		if c.batchers[name] == nil {
			t.Fatalf("%s was dropped", name)
		}
	}
	if len(c.batchers) != 5 || c.batchPruneAt != 10 {
		t.Fatalf("%d batchers left, next look at %d; want 5 and 10", len(c.batchers), c.batchPruneAt)
	}
	// Fewer than the next look's count: nothing is looked at.
	if d := c.dropIdleBatchers(now.Add(time.Hour)); d != nil {
		t.Fatalf("dropped %d below the look's count", len(d))
	}
}
