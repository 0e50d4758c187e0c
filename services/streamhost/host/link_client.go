package host

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/linkconn"
	"github.com/brook-streams/brook/pkg/wire"
)

// The client link: clients' publish batches and fetches, and their
// replies, on a client's own TLS connection to the owner host, on the
// direct link's listener, instead of through a nats-server (schemas/frames.md, "The
// client link"; docs/security.md, "The client link"). A synchronous
// record then crosses no nats-server at all once replication is direct.
//
// Who may use it. A client sends a hello over the bus: a publish batch
// request on brook.s.<stream>.pubb with frame.HeaderClientLink naming the
// SHA-256 of a certificate it made. Only principals that may publish
// batches can send it (client and admin), and the owner answers on the
// requester's inbox, which only principals of its kind read. The host
// takes a connection whose first byte is 0 (a client, not a host) only if
// the certificate TLS proved the client holds is one a hello named in the
// last clientHelloTTL, once. What the connection may then do is what the
// client and admin roles may on the bus: publish batches to, and fetch
// from, any stream owned here.
//
// What it carries. Each request is a frame.LinkMsg with the subject and
// reply subject the client would have used on the bus; it is handed to
// the stream's owner as the bus would hand it (the owner's intake
// callback), with a reply address that names the connection
// (clientReplyTo), so that the owner's replies, sent through
// Host.replyData and Host.publishReply as always, go back on it. A
// request for a stream no owner here serves is answered as nats-server
// answers a request nobody subscribes to (a 503 status, no data), and
// the client goes back to the bus for that stream.
//
// Locks: clientRoutes and clientConns are each taken alone, like
// directLink.routes; the connection's own locks are linkConn's.

// Client link limits.
const (
	// clientHelloTTL is how long a hello's certificate may be used to
	// connect, once.
	clientHelloTTL = 2 * linkSetupTimeout
	// maxClientHellos bounds the hellos not yet used or expired.
	maxClientHellos = 4096
	// maxClientConns bounds the clients connected to this host at once.
	maxClientConns = 4096
	// clientMaxFrame bounds a client's frame: a publish batch is at most
	// wire.MaxPublishBatchBytes, and its subject, reply and headers fit
	// in the rest.
	clientMaxFrame = wire.MaxPublishBatchBytes + 64<<10
	// clientMaxBuffered bounds the replies queued for one client: a client
	// that reads slower loses its connection. It holds the fetch replies
	// a client has on one connection at once (linkconn.ClientFetches) at
	// their largest, and the replies of publish batches.
	clientMaxBuffered = linkconn.ClientFetches*maxFetchBytes + 8<<20
)

// clientReplyPrefix starts a reply address that names a client link
// connection: it holds a space, so it is never a NATS subject.
const clientReplyPrefix = "link "

// clientReplyTo is the reply address of a request that came on client
// connection seq with reply subject reply.
func clientReplyTo(seq uint64, reply string) string {
	if reply == "" {
		return ""
	}
	return clientReplyPrefix + strconv.FormatUint(seq, 10) + " " + reply
}

// clientSide is the direct link's part for clients.
type clientSide struct {
	// routes is each stream's owner intake here, by stream name.
	routes struct {
		sync.RWMutex
		m map[string]*clientRoute
	}
	// conns is every client connection up, by its sequence number.
	conns struct {
		sync.RWMutex
		next uint64
		m    map[uint64]*linkConn
	}
	// hellos are the certificates hellos named, with when they expire.
	hellos struct {
		sync.Mutex
		m map[string]time.Time
	}
}

func (s *clientSide) init() {
	s.routes.m = map[string]*clientRoute{}
	s.conns.m = map[uint64]*linkConn{}
	s.hellos.m = map[string]time.Time{}
}

// serveClients routes client link requests for stream to fn, the owner's
// intake callback, until the returned func is called.
func (l *directLink) serveClients(stream string, fn nats.MsgHandler) func() {
	s, r := &l.clients, &clientRoute{fn}
	s.routes.Lock()
	s.routes.m[stream] = r
	s.routes.Unlock()
	return func() {
		s.routes.Lock()
		// A newer role of the stream may have taken the route since.
		if s.routes.m[stream] == r {
			delete(s.routes.m, stream)
		}
		s.routes.Unlock()
	}
}

// clientRoute is an owner's intake callback, by pointer so that its
// removal finds its own.
type clientRoute struct{ fn nats.MsgHandler }

// clientHello answers a client link hello (owner.onStreamOp): it records
// the certificate the hello names and answers with this host's address
// and certificate.
func (l *directLink) clientHello(m *nats.Msg) {
	fp := m.Header.Get(frame.HeaderClientLink)
	if b, err := hex.DecodeString(fp); err != nil || len(b) != sha256.Size {
		l.h.replyErr(m.Reply, wire.Errorf(wire.CodeBadRequest, "client link hello: certificate %q is not a hex SHA-256", fp))
		return
	}
	now := time.Now()
	s := &l.clients
	s.hellos.Lock()
	if len(s.hellos.m) >= maxClientHellos {
		for k, exp := range s.hellos.m {
			if now.After(exp) {
				delete(s.hellos.m, k)
			}
		}
	}
	full := len(s.hellos.m) >= maxClientHellos
	if !full {
		s.hellos.m[fp] = now.Add(clientHelloTTL)
	}
	s.hellos.Unlock()
	if full {
		l.h.replyErr(m.Reply, wire.Errorf(wire.CodeOverloaded, "client link hello: %d hellos wait to be used", maxClientHellos))
		return
	}
	data, err := json.Marshal(frame.ClientLinkHello{Node: l.h.cfg.Node, Addr: l.addr, Cert: l.fp})
	if err != nil {
		l.h.replyErr(m.Reply, wire.Errorf(wire.CodeInternal, "client link hello: %v", err))
		return
	}
	l.h.replyData(m.Reply, data)
}

// takeClientHello reports whether a hello named certificate fp lately,
// and forgets it: each hello admits one connection.
func (l *directLink) takeClientHello(fp string) bool {
	s := &l.clients
	s.hellos.Lock()
	defer s.hellos.Unlock()
	exp, ok := s.hellos.m[fp]
	delete(s.hellos.m, fp)
	return ok && time.Now().Before(exp)
}

// addClient registers client connection c, unless maxClientConns are up.
func (l *directLink) addClient(c *linkConn) bool {
	s := &l.clients
	s.conns.Lock()
	defer s.conns.Unlock()
	if len(s.conns.m) >= maxClientConns {
		return false
	}
	s.conns.next++
	c.seq = s.conns.next
	s.conns.m[c.seq] = c
	return true
}

// dropClient forgets client connection c (it closed).
func (l *directLink) dropClient(c *linkConn) {
	s := &l.clients
	s.conns.Lock()
	if s.conns.m[c.seq] == c {
		delete(s.conns.m, c.seq)
	}
	s.conns.Unlock()
}

// clientConnections counts the client connections up (metrics).
func (l *directLink) clientConnections() int {
	s := &l.clients
	s.conns.RLock()
	defer s.conns.RUnlock()
	return len(s.conns.m)
}

// deliverClient hands a client's request to the owner of its stream
// here, as the bus would, or answers that nobody serves it.
func (c *linkConn) deliverClient(kind byte, body []byte) error {
	if kind != frame.LinkClientRequest {
		return fmt.Errorf("frame kind %d from a client", kind)
	}
	lm, err := frame.DecodeLinkMsg(body)
	if err != nil {
		return err
	}
	stream, ok := clientLinkStream(lm.Subject)
	s := &c.l.clients
	m := &nats.Msg{Subject: lm.Subject, Reply: clientReplyTo(c.seq, lm.Reply), Header: frame.HeaderMap(lm.Header), Data: lm.Data}
	if m.Header.Get(frame.HeaderClientLink) != "" {
		// A hello must cross the bus, whose permissions are what
		// admits a certificate.
		c.l.h.replyErr(m.Reply, wire.Errorf(wire.CodeBadRequest, "a client link hello goes over the bus, not on a client link"))
		return nil
	}
	if !ok {
		c.l.h.replyErr(m.Reply, wire.Errorf(wire.CodeBadRequest,
			"a client link carries publish batches and fetches (brook.s.<stream>.%s or .%s), not %q", wire.OpPublishBatch, wire.OpFetch, lm.Subject))
		return nil
	}
	s.routes.RLock()
	r := s.routes.m[stream]
	s.routes.RUnlock()
	if r == nil || c.l.h.bus.Err() != nil {
		// As nats-server answers a request nobody subscribes to. An
		// owner cut from the bus takes no client publishes either, as
		// none would reach it over the bus: the coordinators may be
		// failing its streams over, and the client asks the bus again.
		c.replyClient(lm.Reply, nats.Header{"Status": []string{"503"}}, nil)
		return nil
	}
	r.fn(m)
	return nil
}

// clientLinkStream is the stream a publish batch's or a fetch's subject
// names (wire.PublishBatchSubject, wire.FetchSubject), if it is one.
func clientLinkStream(subject string) (string, bool) {
	rest, ok := strings.CutPrefix(subject, "brook.s.")
	if !ok {
		return "", false
	}
	for _, op := range []string{wire.OpPublishBatch, wire.OpFetch} {
		if stream, ok := strings.CutSuffix(rest, "."+op); ok {
			return stream, wire.ValidName("stream", stream) == nil
		}
	}
	return "", false
}

// replyClient sends a reply on client connection c, best effort like
// replyData.
func (c *linkConn) replyClient(to string, h nats.Header, data []byte) {
	lm := frame.LinkMsg{Subject: to, Header: frame.LinkHeaders(h), Data: data}
	err := c.send(frame.LinkClientReply, 0, func(b []byte) []byte { return frame.AppendLinkMsg(b, &lm) })
	if c.sendOrClosed(err) != nil {
		c.l.h.log.Warn("client link reply", "err", err)
	}
}

// replyToClient sends a reply whose address names a client connection
// (clientReplyTo); false if to names none, which the caller then sends on
// the bus.
func (h *Host) replyToClient(to string, hdr nats.Header, data []byte) bool {
	rest, ok := strings.CutPrefix(to, clientReplyPrefix)
	if !ok {
		return false
	}
	seqText, reply, _ := strings.Cut(rest, " ")
	seq, err := strconv.ParseUint(seqText, 10, 64)
	if err != nil || h.direct == nil {
		h.log.Warn("reply to a client link address that names no connection", "to", to)
		return true
	}
	s := &h.direct.clients
	s.conns.RLock()
	c := s.conns.m[seq]
	s.conns.RUnlock()
	if c != nil { // else it closed: the client retries, as for a lost reply
		c.replyClient(reply, hdr, data)
	}
	return true
}

// onClientHello answers a client link hello sent to this owner: with the
// host's address and certificate if it has a direct link, else refused,
// and the client stays on the bus.
func (o *owner) onClientHello(m *nats.Msg) {
	if o.h.direct == nil {
		o.h.replyErr(m.Reply, wire.Errorf(wire.CodeUnavailable, "host %s takes no client links (no --repl-listen)", o.h.cfg.Node))
		return
	}
	if o.closing.Load() != nil {
		o.h.replyErr(m.Reply, o.closedErr())
		return
	}
	o.h.direct.clientHello(m)
}
