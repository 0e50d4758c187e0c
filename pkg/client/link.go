package client

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/linkconn"
	"github.com/brook-streams/brook/pkg/wire"
)

// WithDirectLink has publish batches travel on a TLS connection of this
// client's own to each owner host that offers one (a stream host run
// with --repl-listen), instead of through a nats-server: a synchronous
// publish then crosses no nats-server on its way to the owner and back.
// The client asks each stream's owner for its host's address over the
// bus, with a certificate it made when it first did (the hello, which
// only a principal that may publish batches can send), and dials it;
// until a connection is up, and whenever one closes or its host no longer
// owns the stream, the stream's batches go over the bus as without the
// option. A fetch of a stream whose batches had a batch confirmed on its
// connection in the last second goes there too (at most
// linkconn.ClientFetches at once per connection). Single publishes,
// cursor commits and admin requests stay on the bus. Nothing else changes: each record's confirm, producer sequence
// and retries are the same on either way. Off by default; a later
// WithDirectLink(false) turns it off again.
func WithDirectLink(on bool) Option { return func(o *options) { o.directLink = on } }

// Client link timings and limits (the shared ones are linkconn's).
const (
	linkSetupTimeout = linkconn.SetupTimeout
	linkWriteTimeout = linkconn.WriteTimeout
	linkShortLived   = linkconn.ShortLived // route
	linkMaxFrame     = linkconn.MaxFrame
	linkMaxBuffered  = linkconn.MaxBuffered
	// linkRetryMin and linkRetryMax bound the wait before a stream asks
	// again after a failed hello or dial, a closed connection, or a batch
	// on the link that failed.
	linkRetryMin = time.Second
	linkRetryMax = 30 * time.Second
	// linkSlowAfter: a batch on the link unanswered for this long sends
	// its stream's next batches over the bus (batcher.sent): about ten
	// times a loaded machine's confirm p99 at window 256 (30-60 ms).
	linkSlowAfter = 500 * time.Millisecond
	// maxLearns bounds the hellos (and dials) a client runs at once.
	maxLearns = 16
	// linkReadFresh: a stream's fetches go on its connection only while a
	// batch was confirmed whole on it this recently. A confirm shows the
	// host still owned the stream (its followers acked at its epoch), so
	// a reader is never kept by a host that lost the stream but cannot
	// tell (one whose NATS server was cut from the others): once its
	// publishes stop being confirmed there, it reads over the bus.
	linkReadFresh = time.Second
)

// errLinkDown is a send on a client link connection that closed (or that
// send closed: over linkMaxBuffered queued). A batch that gets it is
// retried as one whose connection closed while it waited (a disconnect):
// which of the two a batch sees first depends on whether its send or the
// connection's context noticed the close first. Its message was refused
// by the closed queue, or, past the backlog, queued as the connection
// closed, where it may still be written as any batch in flight on a
// closing connection may: producer ids make those retries exact.
var errLinkDown = fmt.Errorf("the client link closed: %w", nats.ErrDisconnected)

// clientLink is the client's side of the client link: its certificate,
// each stream's way to its owner host, and the connections up.
//
// Locks and goroutines. mu guards what is listed under it; a hostConn's
// write queue (linkconn.Queue) has its own lock. mu is taken last (the
// batchers call route under their own mu, and register runs under
// Client.batchMu) and takes no other lock; none is held across a network
// call. Goroutines: per stream with no way, at most one learn, maxLearns
// in all (a hello, then a dial unless its host is connected already); per
// connection a reader and a writer. All are counted in wg and end with
// close (Client.Close), which cancels the learns and closes every
// connection.
type clientLink struct {
	c *Client
	// ctx ends with close: hellos and dials in progress stop.
	ctx    context.Context
	cancel context.CancelFunc

	certOnce sync.Once
	cert     tls.Certificate
	fp       string
	certErr  error

	// callPrefix starts the reply subjects of read requests (call).
	callPrefix string
	// fetches counts the fetches answered on a connection.
	fetches atomic.Uint64
	// calls are the read requests (call) waiting for their replies, whose
	// subjects are callPrefix and their ids.
	calls linkconn.Calls[*nats.Msg]

	wg sync.WaitGroup
	mu struct {
		sync.Mutex
		closed bool
		// routes is each stream's way to its owner host.
		routes map[string]*linkRoute
		// hosts is each owner host's connection, by node.
		hosts map[string]*hostConn
		// replies maps a batcher's reply prefix to it.
		replies map[string]*batcher
		// learning counts the learns running (route), at most
		// maxLearns: a client that publishes to thousands of streams,
		// or sees their owner fail, asks a few owners at a time over
		// the bus while its batches go there anyway.
		learning int
		// dialing is the dial to each node running now: learns of
		// other streams owned there wait for it rather than dial too.
		// A host admits one connection per hello and keeps one hello
		// per certificate, so of concurrent dials with the client's
		// one certificate all but one were refused.
		dialing map[string]*nodeDial
		// waiting counts the learns waiting for another's dial (a
		// test waits for it).
		waiting int
	}
}

// nodeDial is one learn's dial to a node, which other learns wait for.
type nodeDial struct {
	// done is closed once the dial ended and, if it connected, its
	// connection is in clientLink.mu.hosts.
	done chan struct{}
	cert string // the certificate dialed to
	err  error  // the dial's error, set before done is closed
}

// linkRoute is one stream's way: its owner host's connection, or when to
// ask again.
type linkRoute struct {
	conn *hostConn
	// confirmedAt is when a batch on conn was last confirmed whole.
	confirmedAt time.Time
	asking      bool
	gone        bool // its batcher went while it was asking: forget it then
	fails       int
	retryAt     time.Time
}

func newClientLink(c *Client) *clientLink {
	l := &clientLink{c: c}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.mu.routes = map[string]*linkRoute{}
	l.mu.hosts = map[string]*hostConn{}
	l.mu.replies = map[string]*batcher{}
	var id [8]byte
	_, _ = rand.Read(id[:])
	l.callPrefix = "_LINK." + hex.EncodeToString(id[:]) + "."
	return l
}

// route returns the connection stream's batches go on, or nil for the
// bus; with none, it starts learning one unless a recent try failed. It
// never waits: a batcher calls it under its lock.
func (l *clientLink) route(stream string) *hostConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.closed {
		return nil
	}
	r := l.mu.routes[stream]
	if r == nil {
		r = &linkRoute{}
		l.mu.routes[stream] = r
	}
	if r.conn != nil {
		if !r.conn.closed() {
			return r.conn
		}
		// Not asked again at once: its host may be gone and the stream
		// failing over, which the bus sees to meanwhile. Taken and
		// closed at once (a host at its limit of clients, say) counts
		// as a failed dial.
		wait := linkRetryMin
		if time.Since(r.conn.started) < linkShortLived {
			r.fails++
			wait = backoff(r.fails, linkRetryMin, linkRetryMax)
		}
		r.retryAt = time.Now().Add(wait)
		r.conn = nil
	}
	if r.asking || time.Now().Before(r.retryAt) || l.mu.learning >= maxLearns {
		return nil
	}
	r.asking = true
	l.mu.learning++
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		l.learn(stream, r)
	}()
	return nil
}

// drop sends stream's batches back to the bus: a batch on via did not end
// with every record confirmed (batcher.offLink), or was not answered in
// linkSlowAfter. The next batch after linkRetryMin asks the stream's owner
// again, over the bus.
func (l *clientLink) drop(stream string, via *hostConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.mu.routes[stream]; r != nil && r.conn == via {
		r.conn = nil
		r.retryAt = time.Now().Add(linkRetryMin)
	}
}

// confirmed records that a batch of stream on via was confirmed whole.
func (l *clientLink) confirmed(stream string, via *hostConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.mu.routes[stream]; r != nil && r.conn == via {
		r.confirmedAt = time.Now()
	}
}

// way returns the connection stream's fetches go on: its batches' one,
// if it is up, not suspected dead, and had a batch confirmed whole in the
// last linkReadFresh; nil for the bus. Unlike route it starts no learn: a
// stream's way is learnt by its publishes, and a client that only reads a
// stream reads it over the bus.
func (l *clientLink) way(stream string) *hostConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.mu.routes[stream]
	if l.mu.closed || r == nil || r.conn == nil || r.conn.closed() || r.conn.silent.Load() || time.Since(r.confirmedAt) >= linkReadFresh {
		return nil
	}
	return r.conn
}

// call makes one attempt of msg, a read request of stream (a fetch), on
// stream's connection: it waits at most timeout, and until ctx ends, for
// the reply. sent is false when the request did not go on the link or its
// answer will not come there: no way, the connection closed before the
// reply, or the host answered that it does not serve the stream (503,
// which also sends the stream's publishes back to the bus, as for a
// batch). The caller then sends it over the bus, which is safe for
// requests that change nothing.
func (l *clientLink) call(ctx context.Context, stream string, msg *nats.Msg, timeout time.Duration) (reply *nats.Msg, sent bool, err error) {
	hc := l.way(stream)
	if hc == nil {
		return nil, false, nil
	}
	if hc.fetching.Add(1) > linkconn.ClientFetches {
		hc.fetching.Add(-1)
		return nil, false, nil
	}
	defer hc.fetching.Add(-1)
	id, ch, end := l.calls.Add()
	defer end()
	m := &nats.Msg{Subject: msg.Subject, Reply: l.callPrefix + strconv.FormatUint(id, 10), Header: msg.Header, Data: msg.Data}
	if hc.send(m) != nil {
		return nil, false, nil
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-ch:
		if len(r.Data) == 0 && r.Header.Get("Status") == "503" {
			l.drop(stream, hc)
			return nil, false, nil
		}
		switch r.Header.Get(frame.HeaderError) {
		case wire.CodeNotOwner, wire.CodeSealed, wire.CodeShuttingDown:
			// The host no longer serves the stream: its next requests,
			// and the retry of this one, go over the bus.
			l.drop(stream, hc)
		}
		return r, true, nil
	case <-hc.ctx.Done():
		return nil, false, nil
	case <-t.C:
		// As a batch unanswered for linkSlowAfter: the stream's next
		// requests go over the bus.
		l.drop(stream, hc)
		return nil, true, fmt.Errorf("%s: no reply on the client link in %v: %w", msg.Subject, timeout, ErrTimeout)
	case <-ctx.Done():
		return nil, true, fmt.Errorf("%s: %w", msg.Subject, ctx.Err())
	}
}

// learn asks stream's owner for its host's link and connects to it.
func (l *clientLink) learn(stream string, r *linkRoute) {
	hc, err := l.connect(stream)
	l.mu.Lock()
	defer l.mu.Unlock()
	r.asking = false
	l.mu.learning--
	if r.gone && l.mu.routes[stream] == r {
		delete(l.mu.routes, stream)
	}
	if err != nil {
		r.fails++
		r.retryAt = time.Now().Add(backoff(r.fails, linkRetryMin, linkRetryMax))
		if r.fails == 1 || r.fails%10 == 0 {
			l.c.log.Info("no client link; publishing over the bus", "stream", stream, "err", err, "fails", r.fails)
		}
		return
	}
	r.fails = 0
	if !l.mu.closed {
		r.conn = hc
	}
}

// connect says hello to stream's owner over the bus and returns the
// connection to its host, dialing one unless it is up.
func (l *clientLink) connect(stream string) (*hostConn, error) {
	l.certOnce.Do(func() { l.cert, l.fp, l.certErr = linkconn.Certificate("brook-client", x509.ExtKeyUsageClientAuth) })
	if l.certErr != nil {
		return nil, fmt.Errorf("client link certificate: %w", l.certErr)
	}
	msg := nats.NewMsg(wire.PublishBatchSubject(stream))
	msg.Header.Set(frame.HeaderClientLink, l.fp)
	ctx, cancel := context.WithTimeout(l.ctx, linkSetupTimeout)
	defer cancel()
	reply, err := l.c.nc.RequestMsgWithContext(ctx, msg)
	if err != nil {
		return nil, fmt.Errorf("hello: %w", err)
	}
	if werr := replyError(reply, replyJSON); werr != nil {
		return nil, fmt.Errorf("hello: %w", werr)
	}
	var hi frame.ClientLinkHello
	if err := json.Unmarshal(reply.Data, &hi); err != nil || hi.Node == "" || hi.Addr == "" || hi.Cert == "" {
		return nil, fmt.Errorf("hello answer %q: %v", reply.Data, err)
	}
	var d *nodeDial // this learn's dial
	for {
		l.mu.Lock()
		if hc := l.mu.hosts[hi.Node]; hc.usable(hi.Cert) {
			l.mu.Unlock()
			return hc, nil
		}
		other := l.mu.dialing[hi.Node]
		if other == nil {
			d = &nodeDial{done: make(chan struct{}), cert: hi.Cert}
			if l.mu.dialing == nil {
				l.mu.dialing = map[string]*nodeDial{}
			}
			l.mu.dialing[hi.Node] = d
			l.mu.Unlock()
			break
		}
		l.mu.waiting++
		l.mu.Unlock()
		var werr error
		select {
		case <-other.done:
		case <-ctx.Done():
			werr = fmt.Errorf("wait for the link to %s: %w", hi.Node, ctx.Err())
		}
		l.mu.Lock()
		l.mu.waiting--
		l.mu.Unlock()
		if werr != nil {
			return nil, werr
		}
		if other.err != nil && other.cert == hi.Cert {
			// Dialing again to the same host would most likely be
			// refused too (its hello may be used): this stream goes
			// on over the bus and asks again later, as the dialer's.
			return nil, fmt.Errorf("another stream's link to %s: %w", hi.Node, other.err)
		}
	}
	// This learn dials; its hello (the last one the host heard from this
	// certificate, or a later one of a learn waiting here) admits it.
	hc, err := l.dial(hi)
	l.mu.Lock()
	// The learns waiting for this dial wake once its connection is in
	// hosts (or it failed): at return, after l.mu is released.
	defer close(d.done)
	delete(l.mu.dialing, hi.Node)
	if err != nil {
		d.err = err
		l.mu.Unlock()
		return nil, err
	}
	if l.mu.closed {
		l.mu.Unlock()
		hc.close(errLinkDown)
		return nil, ErrClosed
	}
	old := l.mu.hosts[hi.Node]
	if old.usable(hi.Cert) {
		// Another stream's learn connected meanwhile: keep one.
		l.mu.Unlock()
		hc.close(errLinkDown)
		return old, nil
	}
	l.mu.hosts[hi.Node] = hc
	l.mu.Unlock()
	if old != nil {
		// Replaced (closed, silent, or to an earlier process of the
		// host): its batches in flight are retried.
		old.close(errors.New("replaced by a new connection"))
	}
	l.c.log.Info("client link to owner host", "node", hi.Node, "addr", hi.Addr)
	return hc, nil
}

// dial connects to the host hi names, to the certificate it named.
func (l *clientLink) dial(hi frame.ClientLinkHello) (*hostConn, error) {
	ctx, cancel := context.WithTimeout(l.ctx, linkSetupTimeout)
	defer cancel()
	raw, conn, err := linkconn.Dial(ctx, hi.Addr, l.cert, hi.Cert)
	if err != nil {
		return nil, fmt.Errorf("client link to %s: %w", hi.Node, err)
	}
	// A client names no node; the host says it took the certificate
	// before anything else is sent.
	_, err = conn.Write([]byte{0})
	if err == nil {
		var ready [1]byte
		if _, err = io.ReadFull(conn, ready[:]); err == nil && ready[0] != frame.LinkReady {
			err = fmt.Errorf("answer byte %d", ready[0])
		}
	}
	if err != nil {
		_ = raw.Close()
		return nil, fmt.Errorf("set up the link with %s (%s): %w", hi.Node, hi.Addr, err)
	}
	_ = raw.SetDeadline(time.Time{})
	hc := &hostConn{l: l, node: hi.Node, cert: hi.Cert, raw: raw, conn: conn, q: linkconn.NewQueue(linkMaxFrame, linkMaxBuffered), started: time.Now()}
	hc.ctx, hc.cancel = context.WithCancel(context.Background())
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		_ = raw.Close()
		hc.cancel()
		return nil, ErrClosed
	}
	l.wg.Add(2)
	l.mu.Unlock()
	go func() {
		defer l.wg.Done()
		hc.writeLoop()
	}()
	go func() {
		defer l.wg.Done()
		hc.readLoop()
	}()
	return hc, nil
}

// register routes the replies to b's prefix to b.
func (l *clientLink) register(b *batcher) {
	l.mu.Lock()
	l.mu.replies[b.prefix] = b
	l.mu.Unlock()
}

// unregister stops routing replies to b, and forgets its stream's way
// unless a learn of it runs: routes are kept for the streams the client
// holds batchers for, which its pruning bounds (batcherIdleTTL).
func (l *clientLink) unregister(b *batcher) {
	l.mu.Lock()
	if l.mu.replies[b.prefix] == b {
		delete(l.mu.replies, b.prefix)
	}
	if r := l.mu.routes[b.stream]; r != nil {
		if r.asking {
			r.gone = true
		} else {
			delete(l.mu.routes, b.stream)
		}
	}
	l.mu.Unlock()
}

// replied hands a reply that came on a connection to the read request
// (call) or the batcher waiting for it.
func (l *clientLink) replied(m *nats.Msg) {
	i := strings.LastIndexByte(m.Subject, '.')
	if i < 0 {
		return
	}
	if m.Subject[:i+1] == l.callPrefix {
		if id, err := strconv.ParseUint(m.Subject[i+1:], 10, 64); err == nil {
			l.calls.Answer(id, m)
		}
		return
	}
	l.mu.Lock()
	b := l.mu.replies[m.Subject[:i+1]]
	l.mu.Unlock()
	if b == nil {
		return // its batcher is gone: nothing waits for it
	}
	b.onReply(m)
}

// close closes every connection and waits for the link's goroutines
// (Client.Close, once no batch is in flight).
func (l *clientLink) close() {
	l.cancel()
	l.mu.Lock()
	l.mu.closed = true
	hosts := make([]*hostConn, 0, len(l.mu.hosts))
	for _, hc := range l.mu.hosts {
		hosts = append(hosts, hc)
	}
	l.mu.Unlock()
	for _, hc := range hosts {
		hc.close(errLinkDown)
	}
	l.wg.Wait()
}

// hostConn is one client link connection, to one owner host.
type hostConn struct {
	l    *clientLink
	node string
	cert string              // the certificate the host presented
	raw  *linkconn.Coalescer // under conn: WriteLoop flushes it
	conn net.Conn
	// ctx ends when the connection closes: the batches in flight on it
	// fail then and are retried.
	ctx    context.Context
	cancel context.CancelFunc
	once   sync.Once
	q      *linkconn.Queue // frames not yet written
	// started is when it was set up; lastRead when its reader last took
	// a frame (unix ns); silent, that a batch went unanswered with
	// nothing read since it was sent (unanswered).
	started  time.Time
	lastRead atomic.Int64
	silent   atomic.Bool
	// fetching counts the fetches waiting on it (call).
	fetching atomic.Int32
}

func (hc *hostConn) closed() bool { return hc.ctx.Err() != nil }

// usable reports whether hc (nil: none) is up, to the host presenting
// cert, and not suspected dead (silent).
func (hc *hostConn) usable(cert string) bool {
	return hc != nil && !hc.closed() && hc.cert == cert && !hc.silent.Load()
}

// unanswered is called when a batch sent on hc at sent is still
// unanswered after linkSlowAfter: if nothing at all was read from hc
// since, hc is suspected dead (a path that drops everything closes no
// socket) and the next learn dials a new connection instead of taking it
// again; any reply read clears the suspicion.
func (hc *hostConn) unanswered(sent time.Time) {
	if hc.lastRead.Load() < sent.UnixNano() {
		hc.silent.Store(true)
	}
}

// close ends hc once: its writer and reader stop, and the batches in
// flight on it fail (their flights' AfterFunc on ctx).
func (hc *hostConn) close(err error) {
	hc.once.Do(func() {
		hc.q.Close()
		hc.cancel()
		_ = hc.raw.Close()
		if !errors.Is(err, errLinkDown) {
			hc.l.c.log.Info("client link closed; publishing over the bus until it is back", "node", hc.node, "err", err)
		}
	})
}

// send queues msg for the writer.
func (hc *hostConn) send(msg *nats.Msg) error {
	lm := frame.LinkMsg{Subject: msg.Subject, Reply: msg.Reply, Header: frame.LinkHeaders(msg.Header), Data: msg.Data}
	switch err := hc.q.Append(frame.LinkClientRequest, 0, func(b []byte) []byte { return frame.AppendLinkMsg(b, &lm) }); {
	case errors.Is(err, linkconn.ErrClosed):
		return errLinkDown
	case errors.Is(err, linkconn.ErrBacklog):
		hc.close(fmt.Errorf("over %d bytes queued: the host does not read", linkMaxBuffered))
		return errLinkDown
	default:
		return err
	}
}

// writeLoop writes what send queued until hc closes.
func (hc *hostConn) writeLoop() {
	if err := hc.q.WriteLoop(hc.conn, hc.raw, hc.ctx.Done(), linkWriteTimeout); err != nil {
		hc.close(fmt.Errorf("write: %w", err))
	}
}

// readLoop reads the host's replies until hc closes.
func (hc *hostConn) readLoop() {
	r := bufio.NewReaderSize(hc.conn, 64<<10)
	for {
		kind, _, body, err := linkconn.ReadFrame(r, linkMaxFrame)
		if err != nil {
			hc.close(err)
			return
		}
		hc.lastRead.Store(time.Now().UnixNano())
		hc.silent.Store(false)
		if kind != frame.LinkClientReply {
			hc.close(fmt.Errorf("frame kind %d from a host", kind))
			return
		}
		lm, err := frame.DecodeLinkMsg(body)
		if err != nil {
			hc.close(err)
			return
		}
		hc.l.replied(&nats.Msg{Subject: lm.Subject, Header: frame.HeaderMap(lm.Header), Data: lm.Data})
	}
}
