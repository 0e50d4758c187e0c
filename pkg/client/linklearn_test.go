package client

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/wire"
)

// TestLinkLearnsAFewAtATime: a client publishing to many streams at once
// asks at most maxLearns owners for their link at a time; the streams
// past that go over the bus and ask on a later batch.
func TestLinkLearnsAFewAtATime(t *testing.T) {
	url := startNATS(t)
	// Nobody answers the hellos here: each learn fails at once.
	c := connectClient(t, url, WithDirectLink(true))
	for i := range 200 {
		if hc := c.link.route(fmt.Sprintf("s%d", i)); hc != nil {
			t.Fatalf("stream %d has a way with no owner to answer", i)
		}
		c.link.mu.Lock()
		n := c.link.mu.learning
		c.link.mu.Unlock()
		if n > maxLearns {
			t.Fatalf("%d learns at once, at most %d", n, maxLearns)
		}
	}
	c.link.mu.Lock()
	asking := 0
	for _, r := range c.link.mu.routes {
		if r.asking {
			asking++
		}
	}
	c.link.mu.Unlock()
	if asking > maxLearns {
		t.Fatalf("%d routes asking, at most %d", asking, maxLearns)
	}
}

// TestLinkLearnsShareAFailedDial: the learns of many streams of one host
// dial it once; when that dial fails, the others do not dial in turn (the
// host, having used the hello, would refuse each) but go on over the bus
// and ask again later.
func TestLinkLearnsShareAFailedDial(t *testing.T) {
	url := startNATS(t)
	// The host: it answers every hello with a listener whose connections
	// the test closes, so each dial fails in its handshake.
	const streams = 12
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var dials, hellos atomic.Int64
	accepted := make(chan net.Conn, streams)
	go func() {
		defer close(accepted)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			dials.Add(1)
			accepted <- conn
		}
	}()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	hello, err := json.Marshal(frame.ClientLinkHello{Node: "n1", Addr: ln.Addr().String(), Cert: strings.Repeat("ab", 32)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Subscribe(wire.PublishBatchSubject("*"), func(m *nats.Msg) {
		if m.Header.Get(frame.HeaderClientLink) != "" {
			hellos.Add(1)
			_ = m.Respond(hello)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	c := connectClient(t, url, WithDirectLink(true))
	for i := range streams {
		if hc := c.link.route(fmt.Sprintf("s%d", i)); hc != nil {
			t.Fatalf("stream %d has a way before any learn", i)
		}
	}
	// The first dial fails once every other learn waits for it.
	waitLink := func(what string, done func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			c.link.mu.Lock()
			ok, learning, waiting := done(), c.link.mu.learning, c.link.mu.waiting
			c.link.mu.Unlock()
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("waiting for %s: learning %d, waiting %d, dials %d", what, learning, waiting, dials.Load())
			}
		}
	}
	waitLink("the other learns to wait for the first dial", func() bool { return c.link.mu.waiting == streams-1 })
	_ = (<-accepted).Close()
	go func() {
		for conn := range accepted {
			_ = conn.Close()
		}
	}()
	waitLink("the learns to end", func() bool { return c.link.mu.learning == 0 })
	if h := hellos.Load(); h != streams {
		t.Fatalf("%d hellos for %d streams", h, streams)
	}
	if d := dials.Load(); d != 1 {
		t.Fatalf("%d dials to the host for %d streams' learns, want 1", d, streams)
	}
}
