package cluster

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
)

// Proxy is a TCP proxy on loopback in front of the NATS server. Cut drops
// every connection through it and refuses new ones (they are accepted and
// closed at once, so a client notices immediately and keeps reconnecting);
// Heal lets connections through again. It stands for a network partition
// between one process and NATS.
type Proxy struct {
	ln     net.Listener
	target string
	log    *slog.Logger

	mu     sync.Mutex
	cut    bool
	closed bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// NewProxy listens on a free loopback port and forwards to target.
func NewProxy(target string, log *slog.Logger) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy to %s: listen: %w", target, err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Proxy{ln: ln, target: target, log: log, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut drops every proxied connection and refuses new ones until Heal.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
}

// Heal lets connections through again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

// IsCut reports whether the proxy is cut.
func (p *Proxy) IsCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// Close stops the proxy and drops its connections.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("close proxy: %w", err)
	}
	return nil
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		if p.cut || p.closed {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.conns[c] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(c)
	}
}

// serve forwards one connection both ways until either side closes or
// the proxy drops it.
func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	defer p.forget(c)
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		p.log.Warn("proxy dial failed", "target", p.target, "err", err)
		_ = c.Close()
		return
	}
	p.mu.Lock()
	if p.cut || p.closed {
		p.mu.Unlock()
		_ = c.Close()
		_ = up.Close()
		return
	}
	p.conns[up] = struct{}{}
	p.mu.Unlock()
	defer p.forget(up)

	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		// Either direction ending ends the connection, as a dead link
		// would.
		_ = dst.Close()
		_ = src.Close()
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
}

func (p *Proxy) forget(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}
