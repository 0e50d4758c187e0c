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
//
// Blackhole is the silent partition: connections stay open and new ones
// are accepted, but every byte in either direction is read and dropped, so
// neither side learns of the partition until its own pings or timers give
// up. Heal after a blackhole closes the connections that lost bytes (their
// streams have a gap, as after a TCP timeout) and lets new ones through.
type Proxy struct {
	ln     net.Listener
	target string
	log    *slog.Logger

	mu     sync.Mutex
	cut    bool
	hole   bool // blackholed: bytes are read and dropped
	closed bool
	conns  map[net.Conn]struct{}
	holed  map[net.Conn]struct{} // connections that lost bytes to a blackhole
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
	p := &Proxy{ln: ln, target: target, log: log, conns: map[net.Conn]struct{}{}, holed: map[net.Conn]struct{}{}}
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

// Blackhole keeps every proxied connection open but drops the bytes
// through it, both ways, and does the same to new connections, until Heal.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hole = true
	for c := range p.conns {
		p.holed[c] = struct{}{}
	}
}

// Heal lets connections through again. Connections that lost bytes to a
// blackhole are closed, so their clients reconnect.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	p.hole = false
	for c := range p.holed {
		_ = c.Close()
	}
	clear(p.holed)
}

// IsBlackholed reports whether the proxy drops the bytes through it.
func (p *Proxy) IsBlackholed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hole
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
		if p.hole {
			p.holed[c] = struct{}{}
			p.mu.Unlock()
			go p.drain(c)
			continue
		}
		p.mu.Unlock()
		go p.serve(c)
	}
}

// drain reads and drops a connection accepted into a blackhole until it
// closes (by the client, by Heal or by Close).
func (p *Proxy) drain(c net.Conn) {
	defer p.wg.Done()
	defer p.forget(c)
	_, _ = io.Copy(io.Discard, c)
	_ = c.Close()
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
	if p.hole {
		p.holed[c] = struct{}{}
		p.holed[up] = struct{}{}
	}
	p.mu.Unlock()
	defer p.forget(up)

	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		p.copy(dst, src)
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

// copy forwards src to dst until either fails, dropping what it reads
// while the proxy is blackholed.
func (p *Proxy) copy(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.IsBlackholed() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) forget(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.holed, c)
	p.mu.Unlock()
}
