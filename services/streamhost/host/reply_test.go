package host

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Replies sent at once from many goroutines all arrive, each goroutine's
// in the order it sent them.
func TestRepliesKeepEachSendersOrder(t *testing.T) {
	ns := startNATS(t, server.Options{})
	sub, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const senders, each = 16, 500
	var mu sync.Mutex
	next := make([]int, senders)
	bad := ""
	done := make(chan struct{})
	got := 0
	if _, err := sub.Subscribe("r.*", func(m *nats.Msg) {
		g, _ := strconv.Atoi(strings.TrimPrefix(m.Subject, "r."))
		n, _ := strconv.Atoi(string(m.Data))
		mu.Lock()
		defer mu.Unlock()
		if n != next[g] && bad == "" {
			bad = fmt.Sprintf("sender %d: reply %d after %d", g, n, next[g]-1)
		}
		next[g] = n + 1
		if got++; got == senders*each {
			close(done)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}
	h := &Host{nc: nc, log: slog.New(slog.DiscardHandler)}
	var wg sync.WaitGroup
	for g := range senders {
		wg.Go(func() {
			for n := range each {
				h.replyData("r."+strconv.Itoa(g), []byte(strconv.Itoa(n)))
			}
		})
	}
	wg.Wait()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		mu.Lock()
		t.Fatalf("%d of %d replies arrived", got, senders*each)
	}
	mu.Lock()
	defer mu.Unlock()
	if bad != "" {
		t.Fatal(bad)
	}
}

// A reply sent while another is being sent is queued and its goroutine
// goes on; past the queue's bounds a reply waits until the sender has
// taken the queue, then it is queued too.
func TestReplyQueuedBehindTheSender(t *testing.T) {
	var r replies
	r.mu.sending = true // another goroutine is sending
	h := &Host{}
	r.send(h, &nats.Msg{Subject: "a"})
	if len(r.mu.queued) != 1 {
		t.Fatalf("%d queued, want 1", len(r.mu.queued))
	}
	for len(r.mu.queued) < maxQueuedReplies {
		r.send(h, &nats.Msg{Subject: "b"})
	}
	sent := make(chan struct{})
	go func() {
		r.send(h, &nats.Msg{Subject: "past the bound"})
		close(sent)
	}()
	select {
	case <-sent:
		t.Fatal("a reply past the queue's bound was queued without waiting")
	case <-time.After(50 * time.Millisecond):
	}
	// The sender takes the queue.
	r.mu.Lock()
	taken := len(r.mu.queued)
	r.mu.queued, r.mu.bytes = nil, 0
	r.mu.room.Broadcast()
	r.mu.Unlock()
	<-sent
	r.mu.Lock()
	defer r.mu.Unlock()
	if taken != maxQueuedReplies || len(r.mu.queued) != 1 || r.mu.queued[0].Subject != "past the bound" {
		t.Fatalf("taken %d, then queued %d", taken, len(r.mu.queued))
	}
}
