// Package nettest holds network helpers for tests of brook's packages and
// services.
package nettest

import (
	"io"
	"net"
	"strings"
	"sync"
	"testing"
)

// StallProxy forwards TCP connections to a server. While paused it stops
// reading what its clients send, so a client's socket buffers fill and its
// writes block, as they do when a server stops reading its clients (a
// stalled server, or a connection saturated by other traffic). What the
// server sends still reaches the clients.
type StallProxy struct {
	ln   net.Listener
	mu   sync.Mutex
	gate chan struct{} // closed while open; a new one while paused
}

// NewStallProxy starts a proxy to target ("host:port", or a nats:// URL)
// that is closed, with every connection it made, when the test ends.
func NewStallProxy(t testing.TB, target string) *StallProxy {
	t.Helper()
	target = strings.TrimPrefix(target, "nats://")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &StallProxy{ln: ln, gate: make(chan struct{})}
	close(p.gate)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			t.Cleanup(func() { _ = c.Close(); _ = s.Close() })
			go func() { _, _ = io.Copy(c, s) }()
			go p.forward(s, c)
		}
	}()
	return p
}

// URL is the proxy's address as a NATS URL.
func (p *StallProxy) URL() string { return "nats://" + p.ln.Addr().String() }

// forward copies from the client to the server, waiting at the gate
// before each read.
func (p *StallProxy) forward(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		p.mu.Lock()
		gate := p.gate
		p.mu.Unlock()
		<-gate
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			_ = dst.Close()
			return
		}
	}
}

// Pause stops reading from the clients (after the read in progress).
func (p *StallProxy) Pause() {
	p.mu.Lock()
	p.gate = make(chan struct{})
	p.mu.Unlock()
}

// Resume reads from the clients again; call it once per Pause.
func (p *StallProxy) Resume() {
	p.mu.Lock()
	close(p.gate)
	p.mu.Unlock()
}
