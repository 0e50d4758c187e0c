package client

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// Every message pushed is sent once, each pusher's in the order it pushed
// them, whoever drains; a sent callback may push and drain again (the
// nested drain returns at once and the outer one sends what it pushed).
func TestSendQueueSendsEverythingInPushOrder(t *testing.T) {
	url := startNATS(t)
	sub, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	pub, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()

	const pushers, each = 8, 500
	var mu sync.Mutex
	last := map[string]int{}
	got := 0
	var disorder []string
	if _, err := sub.Subscribe("q.>", func(m *nats.Msg) {
		var n int
		_, _ = fmt.Sscanf(string(m.Data), "%d", &n)
		mu.Lock()
		defer mu.Unlock()
		if prev, ok := last[m.Subject]; ok && n != prev+1 {
			disorder = append(disorder, fmt.Sprintf("%s: %d after %d", m.Subject, n, prev))
		}
		last[m.Subject] = n
		got++
	}); err != nil {
		t.Fatal(err)
	}
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}

	q := &sendQueue{nc: pub}
	var sent, failed atomic.Int64
	var wg sync.WaitGroup
	for p := range pushers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			subject := fmt.Sprintf("q.%d", p)
			var pmu sync.Mutex // the pusher's lock, as a batcher's: pushes under it, drains after
			for i := range each {
				pmu.Lock()
				q.push(&nats.Msg{Subject: subject, Data: fmt.Appendf(nil, "%d", i)}, nil, nil, func(err error) {
					if err != nil {
						failed.Add(1)
					}
					sent.Add(1)
				})
				pmu.Unlock()
				q.drain()
			}
		}()
	}
	// A sent callback that pushes and drains (as take does after a reply).
	wg.Add(1)
	go func() {
		defer wg.Done()
		q.push(&nats.Msg{Subject: "q.nested", Data: []byte("0")}, nil, nil, func(error) {
			sent.Add(1)
			q.push(&nats.Msg{Subject: "q.nested", Data: []byte("1")}, nil, nil, func(error) { sent.Add(1) })
			q.drain()
		})
		q.drain()
	}()
	wg.Wait()
	if err := pub.Flush(); err != nil {
		t.Fatal(err)
	}
	want := pushers*each + 2
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := got
		mu.Unlock()
		if n == want || time.Now().After(deadline) {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if got != want || sent.Load() != int64(want) || failed.Load() != 0 {
		t.Fatalf("received %d, sent callbacks %d (%d failed), want %d", got, sent.Load(), failed.Load(), want)
	}
	if len(disorder) > 0 {
		t.Fatalf("out of push order: %v", disorder[:min(5, len(disorder))])
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.sending || len(q.queue) != 0 {
		t.Fatalf("queue left sending=%v with %d queued", q.sending, len(q.queue))
	}
}
