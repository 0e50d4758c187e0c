package host

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/linkconn"
	"github.com/brook-streams/brook/pkg/wire"
)

// directLink is replLink with a follower's requests and acks, and its
// owner's answers, on one TLS connection per pair of hosts instead of the
// bus: a synchronous record then crosses a nats-server twice (the client's
// publish and its reply), not four times (docs/benchmarks.md, session 42:
// about a fifth of its latency and CPU). Host waits and the hellos that
// set connections up stay on the bus (natsLink), and so does replication
// wherever no connection is up: a follower host asks over the bus, and a
// host without a direct link, or one that cannot be reached, is simply
// replicated with over the bus, as before.
//
// Who is on the other end. Each host makes a self-signed certificate of
// its own when it starts (no key is configured or stored). A follower host
// F that needs its owner host O sends O a hello over the bus, on the
// host-wait subject only F may publish (frame.HeaderLinkHello), naming its
// certificate's SHA-256; O records it as F's and answers, on F's inbox
// which only F reads, with O's address and certificate. F then dials O
// with mutual TLS and names itself in its first bytes (a length byte and
// its node). O takes the connection as F's (replCall.from) only if the
// certificate F presented, whose key TLS proved F holds, is the one F's
// last hello named; F keeps it only if O presented the certificate O's
// answer named. replCall.from is thus as authenticated as the bus makes it
// (docs/security.md); a host that names another's certificate in its own
// hello gains nothing without that host's key. What travels on the
// connection is encrypted whether or not the bus is.
//
// A dead connection. A socket error, a write that does not finish in
// linkWriteTimeout (plus a microsecond a byte), or 64 MiB queued ends a
// connection; so does a request that times out on a connection from which
// nothing at all was read since it was sent (a cut that closed no socket).
// Its requests then fail with errLinkLost and the next ones go over the
// bus while a new connection is dialed.
//
// The connection's frames are a 4-byte big-endian length (of what
// follows), a kind byte and an 8-byte request id, then the kind's body:
//
//	request, ack   stream (2-byte length, bytes), epoch (8 bytes), the
//	               encoded frame.ReplRequest
//	batch          the encoded frame.Batch answering request id
//	refused        code (2-byte length, bytes), a JSON wire.ErrorReply
//	no server      nothing: nobody serves the stream at that epoch here
//
// Locks and goroutines. directLink.mu and directLink.routes guard what is
// listed in them; they, and a linkConn's w and p locks, are each taken
// with no other lock held, and no lock
// is held across a network call. Goroutines, each counted in wg and ended
// by run's end (the host's background context): run (accepting), one per
// accepted connection until it is set up, one dial per owner host at a
// time, and each connection's reader and writer, which end when it closes.
type directLink struct {
	h    *Host
	bus  natsLink
	ln   net.Listener
	addr string // where followers dial: the advertised address
	cert tls.Certificate
	fp   string // hex SHA-256 of cert's DER
	ctx  context.Context
	wg   sync.WaitGroup

	// routes is each stream's owner at its epoch here (serve): read for
	// every frame a follower host sends, so it has a lock of its own,
	// apart from mu's set-up and bookkeeping.
	routes struct {
		sync.RWMutex
		m map[servedKey]*servedFn
	}
	// clients is the link's side for clients' connections
	// (link_client.go).
	clients clientSide
	// clientsRefused counts the connections from clients (a first frame
	// naming no node) that accept refused; each refusal is logged.
	clientsRefused atomic.Int64

	mu struct {
		sync.Mutex
		closed bool
		// known is each follower host's certificate, as its last hello
		// over the bus named it.
		known map[string]string
		// peers is the way to each owner host, by node.
		peers map[string]*linkPeer
		// conns is every connection, either way, to close at the end.
		conns map[*linkConn]struct{}
	}
}

type servedKey struct {
	stream string
	epoch  uint64
}

type servedFn struct{ fn func(replCall) }

// linkPeer is this host's way to one owner host.
type linkPeer struct {
	node string
	conn atomic.Pointer[linkConn] // nil while none is up
	// guarded by directLink.mu
	dialing bool
	fails   int
	retryAt time.Time
}

// Link timings and limits.
const (
	linkSetupTimeout = linkconn.SetupTimeout
	linkWriteTimeout = linkconn.WriteTimeout
	linkRedial       = 250 * time.Millisecond
	linkRedialMax    = 30 * time.Second
	linkMaxBuffered  = linkconn.MaxBuffered
	linkMaxFrame     = linkconn.MaxFrame
	linkHeader       = linkconn.HeaderLen
	linkShortLived   = linkconn.ShortLived
)

// Frame kinds on a connection.
const (
	linkRequest  byte = 1
	linkAck      byte = 2
	linkBatch    byte = 3
	linkRefused  byte = 4
	linkNoServer byte = 5
)

// linkReady is the owner host's first byte on a connection it accepted:
// the follower host's certificate was the one its hello named.
const linkReady byte = 'K'

var errLinkClosed = errors.New("the direct link closed")

// newDirectLink makes h's direct link on ln, dialed by followers at
// advertise (ln's address if empty); its dials and connections end with
// ctx (the host's background context), and run with it.
func newDirectLink(ctx context.Context, h *Host, ln net.Listener, advertise string) (*directLink, error) {
	cert, fp, err := linkCertificate(h.cfg.Node)
	if err != nil {
		return nil, fmt.Errorf("direct link certificate: %w", err)
	}
	if advertise == "" {
		advertise = ln.Addr().String()
	}
	l := &directLink{h: h, ln: ln, addr: advertise, cert: cert, fp: fp, ctx: ctx}
	l.bus = natsLink{h: h, hello: l.hello}
	l.routes.m = map[servedKey]*servedFn{}
	l.clients.init()
	l.mu.known = map[string]string{}
	l.mu.peers = map[string]*linkPeer{}
	l.mu.conns = map[*linkConn]struct{}{}
	return l, nil
}

// linkCertificate makes a self-signed certificate for node's link.
func linkCertificate(node string) (tls.Certificate, string, error) {
	return linkconn.Certificate("brook-streamhost "+node, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
}

// linkHello is a follower host's hello (its certificate) and an owner
// host's answer (its address and certificate).
type linkHello struct {
	Addr string `json:"addr,omitempty"`
	Cert string `json:"cert"`
}

// hello answers a follower host's hello (natsLink.answerHello): from is
// the sender as the bus authenticated it.
func (l *directLink) hello(from string, data []byte) ([]byte, *wire.Error) {
	var hi linkHello
	if err := json.Unmarshal(data, &hi); err != nil {
		return nil, wire.Errorf(wire.CodeBadRequest, "direct link hello: %v", err)
	}
	if b, err := hex.DecodeString(hi.Cert); err != nil || len(b) != sha256.Size {
		return nil, wire.Errorf(wire.CodeBadRequest, "direct link hello: certificate %q is not a SHA-256", hi.Cert)
	}
	l.mu.Lock()
	l.mu.known[from] = hi.Cert
	l.mu.Unlock()
	out, err := json.Marshal(linkHello{Addr: l.addr, Cert: l.fp})
	if err != nil {
		return nil, wire.Errorf(wire.CodeInternal, "direct link hello: %v", err)
	}
	return out, nil
}

// run accepts connections until ctx ends, then closes every connection
// and waits for the link's goroutines.
func (l *directLink) run(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() { _ = l.ln.Close() })
	defer stop()
	l.h.log.Info("direct replication link listening", "addr", l.ln.Addr().String(), "advertised", l.addr)
	for {
		conn, err := l.ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				break
			}
			l.h.log.Warn("direct link accept", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		if !l.goLink(func() { l.accept(conn) }) {
			_ = conn.Close()
			break
		}
	}
	_ = l.ln.Close()
	l.mu.Lock()
	l.mu.closed = true
	conns := make([]*linkConn, 0, len(l.mu.conns))
	for c := range l.mu.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		c.close(errLinkClosed)
	}
	l.wg.Wait()
}

// goLink runs f in a goroutine of the link's, unless the link closed.
func (l *directLink) goLink(f func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.closed {
		return false
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		f()
	}()
	return true
}

// accept sets up a connection a follower host dialed: the node its first
// frame names must be the one whose last hello named the certificate it
// presented. A client's first frame names no node (link_client.go): its
// certificate must be one a client's hello named lately.
func (l *directLink) accept(tcp net.Conn) {
	raw := linkconn.NewCoalescer(tcp)
	conn := tls.Server(raw, &tls.Config{
		Certificates: []tls.Certificate{l.cert},
		ClientAuth:   tls.RequireAnyClientCert,
		MinVersion:   tls.VersionTLS13,
	})
	client := false // the first frame named no node
	node, err := l.setUp(raw, func() (string, error) {
		if err := conn.HandshakeContext(l.ctx); err != nil {
			return "", fmt.Errorf("handshake: %w", err)
		}
		node, err := readLinkNode(conn)
		if err != nil {
			return "", err
		}
		certs := conn.ConnectionState().PeerCertificates
		if node == "" {
			client = true
			if len(certs) == 0 || !l.takeClientHello(linkconn.Fingerprint(certs[0].Raw)) {
				return "", errors.New("a client whose certificate no hello named lately")
			}
			if l.clientConnections() >= maxClientConns {
				return "", fmt.Errorf("a client: %d clients are connected already", maxClientConns)
			}
			_, err = conn.Write([]byte{frame.LinkReady})
			return "", err
		}
		l.mu.Lock()
		known := l.mu.known[node]
		l.mu.Unlock()
		if len(certs) == 0 || known == "" || linkconn.Fingerprint(certs[0].Raw) != known {
			return node, errors.New("its certificate is not the one the node's hello named")
		}
		_, err = conn.Write([]byte{linkReady})
		return node, err
	})
	if err != nil {
		if client {
			l.clientsRefused.Add(1)
		}
		l.h.log.Warn("direct link: connection refused", "remote", raw.RemoteAddr().String(), "claimed", node, "err", err)
		return
	}
	if node == "" {
		if c := l.startClient(raw, conn); c != nil {
			l.h.log.Info("client link from a client", "remote", raw.RemoteAddr().String(), "conn", c.seq)
		}
		return
	}
	if c := l.start(raw, conn, node, true); c != nil {
		l.h.log.Info("direct replication link from follower host", "peer", node, "remote", raw.RemoteAddr().String())
	}
}

// setUp runs a connection's set-up steps within linkSetupTimeout, cut
// short by the link's end; the connection is closed if they fail.
func (l *directLink) setUp(raw net.Conn, steps func() (string, error)) (string, error) {
	_ = raw.SetDeadline(time.Now().Add(linkSetupTimeout))
	stop := context.AfterFunc(l.ctx, func() { _ = raw.Close() })
	node, err := steps()
	if !stop() {
		err = errors.Join(err, errLinkClosed)
	}
	if err != nil {
		_ = raw.Close()
		return node, err
	}
	_ = raw.SetDeadline(time.Time{})
	return node, nil
}

// readLinkNode reads the node a follower host's first frame names: one
// length byte and the name; "" for a client's, which is the byte 0.
func readLinkNode(r io.Reader) (string, error) {
	var n [1]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return "", fmt.Errorf("read the node: %w", err)
	}
	if n[0] == 0 {
		return "", nil
	}
	name := make([]byte, n[0])
	if _, err := io.ReadFull(r, name); err != nil {
		return "", fmt.Errorf("read the node: %w", err)
	}
	if err := wire.ValidName("node", string(name)); err != nil {
		return "", err
	}
	return string(name), nil
}

// peer returns the way to owner host node.
func (l *directLink) peer(node string) *linkPeer {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.mu.peers[node]
	if p == nil {
		p = &linkPeer{node: node}
		l.mu.peers[node] = p
	}
	return p
}

// way returns p's connection, or nil and starts dialing one unless a dial
// runs or failed lately.
func (l *directLink) way(p *linkPeer) *linkConn {
	if c := p.conn.Load(); c != nil && !c.closed() {
		return c
	}
	l.mu.Lock()
	if p.dialing || time.Now().Before(p.retryAt) {
		l.mu.Unlock()
		return nil
	}
	p.dialing = true
	l.mu.Unlock()
	if !l.goLink(func() { l.dial(p) }) {
		l.mu.Lock()
		p.dialing = false
		l.mu.Unlock()
	}
	return nil
}

// dial sets up a connection to owner host p: a hello over the bus, then
// mutual TLS with the certificates it exchanged.
func (l *directLink) dial(p *linkPeer) {
	c, err := l.connect(p.node)
	l.mu.Lock()
	p.dialing = false
	if err != nil {
		p.fails++
		p.retryAt = time.Now().Add(linkBackoff(p.fails))
	}
	fails := p.fails
	l.mu.Unlock()
	if err != nil {
		if fails == 1 || fails%10 == 0 {
			l.h.log.Info("no direct replication link to owner host; replicating over the bus", "peer", p.node, "err", err, "fails", fails)
		}
		return
	}
	// A connection that closed already is not kept: its close found no
	// peer to leave (forget), and the next request dials again.
	l.mu.Lock()
	kept := !c.closed()
	if kept {
		p.conn.Store(c)
	}
	l.mu.Unlock()
	if kept {
		l.h.log.Info("direct replication link to owner host", "peer", p.node)
	}
}

// linkBackoff is the wait before the next dial after fails failures in a
// row: 0.5 s, doubling, up to linkRedialMax.
func linkBackoff(fails int) time.Duration {
	return min(linkRedial<<min(fails, 10), linkRedialMax)
}

func (l *directLink) connect(node string) (*linkConn, error) {
	hi, err := json.Marshal(linkHello{Cert: l.fp})
	if err != nil {
		return nil, err
	}
	data, err := l.bus.sayHello(l.ctx, node, hi, linkSetupTimeout)
	if err != nil {
		return nil, fmt.Errorf("hello: %w", err)
	}
	var their linkHello
	if err := json.Unmarshal(data, &their); err != nil || their.Addr == "" || their.Cert == "" {
		return nil, fmt.Errorf("hello answer %q: %v", data, err)
	}
	return l.dialOwner(node, their)
}

// dialOwner connects to owner host node as its hello answer their says:
// at their address, to the certificate it named.
func (l *directLink) dialOwner(node string, their linkHello) (*linkConn, error) {
	ctx, cancel := context.WithTimeout(l.ctx, linkSetupTimeout)
	defer cancel()
	raw, conn, err := linkconn.Dial(ctx, their.Addr, l.cert, their.Cert)
	if err != nil {
		return nil, err
	}
	self := l.h.cfg.Node
	_, err = l.setUp(raw, func() (string, error) {
		// This host names itself; the owner host says it took the
		// name with the certificate before anything else is sent.
		if _, err := conn.Write(append([]byte{byte(len(self))}, self...)); err != nil {
			return "", err
		}
		var ready [1]byte
		if _, err := io.ReadFull(conn, ready[:]); err != nil || ready[0] != linkReady {
			return "", fmt.Errorf("%s did not take this host's certificate: %v", their.Addr, err)
		}
		return node, nil
	})
	if err != nil {
		return nil, err
	}
	c := l.start(raw, conn, node, false)
	if c == nil {
		return nil, errLinkClosed
	}
	return c, nil
}

// start registers conn (TLS over raw) with the peer node and starts its
// reader and writer; nil if the link closed.
func (l *directLink) start(raw *linkconn.Coalescer, conn net.Conn, node string, serving bool) *linkConn {
	c := &linkConn{l: l, raw: raw, conn: conn, node: node, serving: serving, started: time.Now(),
		done: make(chan struct{}), q: linkconn.NewQueue(linkMaxFrame, linkMaxBuffered)}
	return l.launch(c)
}

// startClient is start for a client's connection, unless maxClientConns
// are up.
func (l *directLink) startClient(raw *linkconn.Coalescer, conn net.Conn) *linkConn {
	c := &linkConn{l: l, raw: raw, conn: conn, serving: true, client: true, started: time.Now(),
		done: make(chan struct{}), q: linkconn.NewQueue(linkMaxFrame, clientMaxBuffered)}
	if !l.addClient(c) {
		l.h.log.Warn("client link refused: too many clients connected", "remote", raw.RemoteAddr().String(), "max", maxClientConns)
		_ = raw.Close()
		return nil
	}
	return l.launch(c)
}

// launch registers c and starts its reader and writer; nil if the link
// closed.
func (l *directLink) launch(c *linkConn) *linkConn {
	raw := c.raw
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		if c.client {
			l.dropClient(c)
		}
		_ = raw.Close()
		return nil
	}
	l.mu.conns[c] = struct{}{}
	l.wg.Add(2)
	l.mu.Unlock()
	go func() {
		defer l.wg.Done()
		c.writeLoop()
	}()
	go func() {
		defer l.wg.Done()
		c.readLoop()
	}()
	return c
}

// connections counts the connections up: this host's to owner hosts, and
// follower hosts' to this one (metrics).
func (l *directLink) connections() (toOwners, fromFollowers int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.mu.conns {
		if c.client {
			continue
		}
		if c.serving {
			fromFollowers++
		} else {
			toOwners++
		}
	}
	return toOwners, fromFollowers
}

// forget drops c, which closed, from the link and from its peer.
func (l *directLink) forget(c *linkConn) {
	if c.client {
		l.dropClient(c)
	}
	l.mu.Lock()
	delete(l.mu.conns, c)
	p := l.mu.peers[c.node]
	if p != nil && !c.serving && p.conn.CompareAndSwap(c, nil) {
		// A connection that lasted counts as a success; one that closed
		// soon after it was set up as one more failure, so that a peer
		// that takes connections and drops them is not dialed every
		// 0.5 s.
		wait := linkRedial
		if time.Since(c.started) < linkShortLived {
			p.fails++
			wait = linkBackoff(p.fails)
		} else {
			p.fails = 0
		}
		p.retryAt = time.Now().Add(wait)
	}
	l.mu.Unlock()
}

func (l *directLink) serve(stream string, epoch uint64, fn func(replCall)) (func(), error) {
	stopBus, err := l.bus.serve(stream, epoch, fn)
	if err != nil {
		return nil, err
	}
	k, s := servedKey{stream, epoch}, &servedFn{fn}
	l.routes.Lock()
	l.routes.m[k] = s
	l.routes.Unlock()
	return func() {
		l.routes.Lock()
		if l.routes.m[k] == s {
			delete(l.routes.m, k)
		}
		l.routes.Unlock()
		stopBus()
	}, nil
}

func (l *directLink) served(stream string, epoch uint64) func(replCall) {
	l.routes.RLock()
	defer l.routes.RUnlock()
	if s := l.routes.m[servedKey{stream, epoch}]; s != nil {
		return s.fn
	}
	return nil
}

func (l *directLink) toOwner(stream string, epoch uint64, owner string) ownerLink {
	return directOwner{l: l, p: l.peer(owner), stream: stream, epoch: epoch, bus: l.bus.toOwner(stream, epoch, owner)}
}

func (l *directLink) serveHostWaits(fn func(hostWaitCall)) (func(), error) {
	return l.bus.serveHostWaits(fn)
}

func (l *directLink) toHost(node string) hostLink { return l.bus.toHost(node) }

func (l *directLink) maxMessage() int64 { return l.bus.maxMessage() }

// directOwner is a follower's way to its owner: the connection to its
// host while one is up, else the bus.
type directOwner struct {
	l      *directLink
	p      *linkPeer
	stream string
	epoch  uint64
	bus    ownerLink
}

func (o directOwner) request(ctx context.Context, req []byte, timeout time.Duration) (replAnswer, error) {
	if c := o.l.way(o.p); c != nil {
		return c.request(ctx, o.stream, o.epoch, req, timeout)
	}
	return o.bus.request(ctx, req, timeout)
}

func (o directOwner) ack(req []byte) error {
	if c := o.l.way(o.p); c != nil {
		if c.send(linkAck, 0, func(b []byte) []byte { return appendLinkCall(b, o.stream, o.epoch, req) }) == nil {
			return nil
		}
	}
	return o.bus.ack(req)
}

func appendLinkCall(b []byte, stream string, epoch uint64, req []byte) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(stream)))
	b = append(b, stream...)
	b = binary.BigEndian.AppendUint64(b, epoch)
	return append(b, req...)
}

func decodeLinkCall(body []byte) (stream string, epoch uint64, req []byte, err error) {
	if len(body) < 2 {
		return "", 0, nil, errors.New("short call")
	}
	n := int(binary.BigEndian.Uint16(body))
	if len(body) < 2+n+8 {
		return "", 0, nil, errors.New("short call")
	}
	return string(body[2 : 2+n]), binary.BigEndian.Uint64(body[2+n:]), body[2+n+8:], nil
}

// linkConn is one connection of the direct link: a follower host's to an
// owner host (it sends calls and takes answers), or the owner host's
// side of it (serving: it takes calls and sends answers).
type linkConn struct {
	l       *directLink
	conn    net.Conn
	node    string // the other host; "" for a client
	serving bool
	// client: a client's connection (link_client.go), served; seq is its
	// number in reply addresses (clientReplyTo).
	client  bool
	seq     uint64
	raw     *linkconn.Coalescer // under conn: closed without TLS's goodbye; WriteLoop flushes it
	started time.Time
	// lastRead is when the reader last took a frame (unix ns): a request
	// that times out on a connection silent since it was sent closes it.
	lastRead atomic.Int64
	done     chan struct{} // closed by close
	once     sync.Once
	q        *linkconn.Queue            // frames not yet written
	calls    linkconn.Calls[replAnswer] // requests waiting, by id
}

// close ends c (once): its writer and reader stop, its requests waiting
// fail with errLinkLost.
func (c *linkConn) close(err error) {
	c.once.Do(func() {
		c.q.Close()
		// Its peer forgets it first, so that a request that sees it
		// closed and asks again finds no connection, not this one.
		c.l.forget(c)
		close(c.done)
		// The socket, not the TLS connection: TLS's goodbye could wait
		// for a write stuck on a peer that does not read.
		_ = c.raw.Close()
		switch {
		case errors.Is(err, errLinkClosed) || c.l.ctx.Err() != nil:
		case c.client:
			c.l.h.log.Info("client link closed", "conn", c.seq, "err", err)
		default:
			c.l.h.log.Info("direct replication link closed", "peer", c.node, "serving", c.serving, "err", err)
		}
	})
}

// closed reports whether c has closed.
func (c *linkConn) closed() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// send queues one frame of kind for the writer, its body appended by body.
func (c *linkConn) send(kind byte, id uint64, body func([]byte) []byte) error {
	switch err := c.q.Append(kind, id, body); {
	case errors.Is(err, linkconn.ErrClosed):
		return errLinkLost
	case errors.Is(err, linkconn.ErrBacklog):
		c.close(fmt.Errorf("over %d bytes queued: the other host does not read", linkMaxBuffered))
		return errLinkLost
	default:
		return err
	}
}

// writeLoop writes what send queued until c closes.
func (c *linkConn) writeLoop() {
	if err := c.q.WriteLoop(c.conn, c.raw, c.done, linkWriteTimeout); err != nil {
		c.close(fmt.Errorf("write: %w", err))
	}
}

// readLoop reads frames until c closes: calls on the serving side,
// answers on the other.
func (c *linkConn) readLoop() {
	r := bufio.NewReaderSize(c.conn, 64<<10)
	maxFrame := linkMaxFrame
	if c.client {
		maxFrame = clientMaxFrame
	}
	for {
		kind, id, body, err := linkconn.ReadFrame(r, maxFrame)
		if err != nil {
			c.close(err)
			return
		}
		c.lastRead.Store(time.Now().UnixNano())
		switch {
		case c.client:
			err = c.deliverClient(kind, body)
		case c.serving:
			err = c.deliver(kind, id, body)
		default:
			err = c.answered(kind, id, body)
		}
		if err != nil {
			c.close(err)
			return
		}
	}
}

// deliver hands a follower host's call to the owner serving its stream
// at its epoch here, or answers that nobody does.
func (c *linkConn) deliver(kind byte, id uint64, body []byte) error {
	if kind != linkRequest && kind != linkAck {
		return fmt.Errorf("frame kind %d from a follower host", kind)
	}
	stream, epoch, req, err := decodeLinkCall(body)
	if err != nil {
		return err
	}
	fn := c.l.served(stream, epoch)
	if fn == nil {
		if kind == linkRequest {
			return c.sendOrClosed(c.send(linkNoServer, id, nil))
		}
		return nil
	}
	call := replCall{from: c.node, data: req}
	if kind == linkRequest {
		call.reply = &linkReply{c: c, id: id}
	}
	fn(call)
	return nil
}

// sendOrClosed is nil for a send that failed because c closed (the
// reader ends on its own).
func (c *linkConn) sendOrClosed(err error) error {
	if errors.Is(err, errLinkLost) {
		return nil
	}
	return err
}

// answered gives an answer to the request waiting for it, if it still
// waits.
func (c *linkConn) answered(kind byte, id uint64, body []byte) error {
	var a replAnswer
	switch kind {
	case linkBatch:
		a.data = body
	case linkRefused:
		if len(body) < 2 || len(body) < 2+int(binary.BigEndian.Uint16(body)) {
			return errors.New("short refusal")
		}
		n := int(binary.BigEndian.Uint16(body))
		a.code, a.data = string(body[2:2+n]), body[2+n:]
		if a.code == "" {
			return errors.New("refusal without a code")
		}
	case linkNoServer:
		a.code = linkNoServerCode
	default:
		return fmt.Errorf("frame kind %d from an owner host", kind)
	}
	c.calls.Answer(id, a)
	return nil
}

// linkNoServerCode marks a no-server answer inside linkConn.request; it
// never leaves it.
const linkNoServerCode = "\x00no_server"

// request sends a call and waits for its answer up to timeout.
func (c *linkConn) request(ctx context.Context, stream string, epoch uint64, req []byte, timeout time.Duration) (replAnswer, error) {
	sent := time.Now().UnixNano()
	id, ch, end := c.calls.Add()
	defer end()
	if err := c.send(linkRequest, id, func(b []byte) []byte { return appendLinkCall(b, stream, epoch, req) }); err != nil {
		if errors.Is(err, errLinkLost) {
			return replAnswer{}, errLinkLost
		}
		return replAnswer{}, err
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case a := <-ch:
		if a.code == linkNoServerCode {
			return replAnswer{}, errNoServer
		}
		return a, nil
	case <-timer.C:
		if c.lastRead.Load() < sent {
			// Nothing at all came back since the request went out: the
			// connection is taken for dead (a cut that closed no socket),
			// and the follower's next request goes over the bus.
			c.close(fmt.Errorf("nothing read for %v", timeout))
		}
		return replAnswer{}, context.DeadlineExceeded
	case <-ctx.Done():
		return replAnswer{}, ctx.Err()
	case <-c.done:
		return replAnswer{}, errLinkLost
	}
}

// linkReply answers one request on the connection it came on
// (replReplier); only the first answer is sent.
type linkReply struct {
	c    *linkConn
	id   uint64
	sent atomic.Bool
}

func (r *linkReply) batch(b *frame.Batch) {
	if r.sent.Swap(true) {
		return
	}
	if err := r.c.send(linkBatch, r.id, func(buf []byte) []byte { return frame.AppendBatch(buf, b) }); r.c.sendOrClosed(err) != nil {
		r.c.l.h.log.Warn("direct link answer", "peer", r.c.node, "err", err)
	}
}

func (r *linkReply) fail(e *wire.Error) {
	if r.sent.Swap(true) {
		return
	}
	data, ok := r.c.l.h.errorReplyData(e)
	if !ok {
		return
	}
	err := r.c.send(linkRefused, r.id, func(b []byte) []byte {
		b = binary.BigEndian.AppendUint16(b, uint16(len(e.Code)))
		b = append(b, e.Code...)
		return append(b, data...)
	})
	if r.c.sendOrClosed(err) != nil {
		r.c.l.h.log.Warn("direct link answer", "peer", r.c.node, "err", err)
	}
}
