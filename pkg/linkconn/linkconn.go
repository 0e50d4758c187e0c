// Package linkconn is what brook's direct links share: the hosts' direct
// replication link (the stream host's link_direct.go) and the clients'
// client link (pkg/client's link.go, the host's link_client.go). It holds
// the self-signed certificates both sides make, and the framing of a
// connection: each frame is a 4-byte big-endian length of what follows, a
// kind byte, an 8-byte id and the kind's body (schemas/frames.md, "The
// client link"). What the kinds mean is the links' own.
//
// # Locks and goroutines
//
// A Queue's lock guards its buffer and is held only to append or take it,
// never across a write; a Coalescer's guards its held bytes alike.
// WriteLoop runs on the connection's one writer goroutine, which its owner
// starts and stops (by closing done); ReadFrame is called by its one
// reader.
package linkconn

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"sync"
	"time"
)

// HeaderLen is a frame's length, kind and id.
const HeaderLen = 4 + 1 + 8

// Timings and limits both links keep: one definition each.
const (
	// SetupTimeout bounds a hello, a dial and its handshake.
	SetupTimeout = 5 * time.Second
	// WriteTimeout bounds one write to a connection (WriteLoop adds a
	// microsecond a byte).
	WriteTimeout = 10 * time.Second
	// ShortLived: a connection that closes sooner after its set-up
	// counts as a failed dial.
	ShortLived = 5 * time.Second
	// MaxFrame is the largest frame a link sends or takes between hosts
	// (a client's are smaller, the stream host's clientMaxFrame): an
	// owner's answer is bounded by the bus's message limit (nats-server's
	// is at most 64 MiB), and the frame's fields fit in the rest.
	MaxFrame = 64<<20 + 1024
	// MaxBuffered is the most bytes queued for a connection's writer: a
	// peer that reads slower loses its connection.
	MaxBuffered = 64 << 20
)

// Certificate makes a self-signed ed25519 certificate named commonName,
// for usages, and returns it with its Fingerprint. Nothing is stored: a
// link's certificate lives as long as its process, and the other side
// learns it from a hello over the bus.
func Certificate(commonName string, usages ...x509.ExtKeyUsage) (tls.Certificate, string, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return tls.Certificate{}, "", err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(now.UnixNano()),
		Subject:      pkix.Name{CommonName: commonName},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(10, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usages,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		return tls.Certificate{}, "", err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv}, Fingerprint(der), nil
}

// Fingerprint is the hex SHA-256 of a certificate's DER bytes.
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// Dial connects to addr with TLS 1.3 as own, accepting only the
// certificate whose Fingerprint is theirs (a hello over the bus named it;
// no authority is asked), within ctx. TLS runs over a Coalescer of the
// TCP connection, which WriteLoop uses. The connection's deadline is set
// to ctx's, which the caller clears once its own set-up is done.
func Dial(ctx context.Context, addr string, own tls.Certificate, theirs string) (raw *Coalescer, conn *tls.Conn, err error) {
	tcp, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	raw = NewCoalescer(tcp)
	if dl, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(dl)
	}
	conn = tls.Client(raw, &tls.Config{
		Certificates:       []tls.Certificate{own},
		InsecureSkipVerify: true, // checked by VerifyPeerCertificate, against theirs
		VerifyPeerCertificate: func(certs [][]byte, _ [][]*x509.Certificate) error {
			if len(certs) == 0 || Fingerprint(certs[0]) != theirs {
				return errors.New("not the certificate the hello's answer named")
			}
			return nil
		},
		MinVersion: tls.VersionTLS13,
	})
	if err := conn.HandshakeContext(ctx); err != nil {
		_ = raw.Close()
		return nil, nil, fmt.Errorf("handshake with %s: %w", addr, err)
	}
	return raw, conn, nil
}

// ErrClosed is an Append to a closed Queue.
var ErrClosed = errors.New("the connection closed")

// ErrBacklog is an Append that left more than the Queue's limit of bytes
// waiting: the other side does not read, and its owner closes the
// connection.
var ErrBacklog = errors.New("too many bytes queued: the other side does not read")

// Queue holds a connection's frames until its writer writes them, all
// that is queued in one write.
type Queue struct {
	maxFrame, maxBuffered int
	kick                  chan struct{}

	mu struct {
		sync.Mutex
		buf    []byte
		closed bool
	}
}

// NewQueue makes a Queue taking frames of at most maxFrame bytes (the
// length field included) and holding at most maxBuffered bytes.
func NewQueue(maxFrame, maxBuffered int) *Queue {
	return &Queue{maxFrame: maxFrame, maxBuffered: maxBuffered, kick: make(chan struct{}, 1)}
}

// Append queues one frame of kind and id, its body appended by body (nil:
// none). It returns ErrClosed after Close, an error naming the size for a
// frame over the limit (nothing queued), or ErrBacklog.
func (q *Queue) Append(kind byte, id uint64, body func([]byte) []byte) error {
	q.mu.Lock()
	if q.mu.closed {
		q.mu.Unlock()
		return ErrClosed
	}
	start := len(q.mu.buf)
	q.mu.buf = append(q.mu.buf, 0, 0, 0, 0, kind)
	q.mu.buf = binary.BigEndian.AppendUint64(q.mu.buf, id)
	if body != nil {
		q.mu.buf = body(q.mu.buf)
	}
	n := len(q.mu.buf) - start - 4
	if n+4 > q.maxFrame {
		q.mu.buf = q.mu.buf[:start]
		q.mu.Unlock()
		return fmt.Errorf("frame of %d bytes is over %d", n+4, q.maxFrame)
	}
	binary.BigEndian.PutUint32(q.mu.buf[start:], uint32(n))
	over := len(q.mu.buf) > q.maxBuffered
	q.mu.Unlock()
	if over {
		return ErrBacklog
	}
	select {
	case q.kick <- struct{}{}:
	default:
	}
	return nil
}

// Close makes every later Append fail with ErrClosed.
func (q *Queue) Close() {
	q.mu.Lock()
	q.mu.closed = true
	q.mu.Unlock()
}

// coalesceMax is the largest take WriteLoop has a Coalescer hold: past a
// few hundred KiB the writes saved are few, and the sealed copy held
// would be as large as the take.
const coalesceMax = 256 << 10

// WriteLoop writes what is queued to conn, everything queued at once,
// until done is closed (it returns nil) or a write fails (its error). A
// write must finish within timeout plus a microsecond a byte. With raw,
// the Coalescer conn (TLS) writes to, what conn makes of one take of up
// to coalesceMax bytes goes to the network in one write (see Coalescer).
func (q *Queue) WriteLoop(conn net.Conn, raw *Coalescer, done <-chan struct{}, timeout time.Duration) error {
	var spare []byte
	for {
		select {
		case <-q.kick:
		case <-done:
			return nil
		}
		q.mu.Lock()
		b := q.mu.buf
		q.mu.buf = spare[:0]
		q.mu.Unlock()
		if len(b) == 0 {
			spare = b
			continue
		}
		// At least 1 MB/s beyond the fixed allowance: a large write to a
		// slow but live peer is not taken for a dead one.
		_ = conn.SetWriteDeadline(time.Now().Add(timeout + time.Duration(len(b))*time.Microsecond))
		// A take above coalesceMax saves few writes for the memory its
		// sealed copy would hold: it goes as TLS writes it.
		hold := raw != nil && len(b) <= coalesceMax
		if hold {
			raw.Hold(len(b) + len(b)/32 + 1024) // TLS adds 22 bytes a record of at least about 1 KB
		}
		if _, err := conn.Write(b); err != nil {
			return err // its caller closes the connection; what was held goes with it
		}
		if hold {
			if err := raw.Flush(); err != nil {
				return err
			}
		}
		if cap(b) > 1<<20 {
			b = nil // keep no large buffer idle
		}
		spare = b
	}
}

// Coalescer is a connection whose writes can be held and then sent in one
// write. TLS seals at most 16 KiB in a record and writes each record on
// its own: an owner's answer of a hundred 256-byte records to a follower
// took three system calls, each a trip through the kernel's TCP stack
// that wakes the reader on the other side (issue 16: at window 256 an
// owner's writes to a follower averaged 12.7 KB, 34.6 KB through a
// Coalescer; docs/benchmarks.md, session 57). WriteLoop holds the writes of
// one take and flushes them as one write (which Go's poller repeats only
// if the socket's buffer fills).
//
// Only the TLS connection above writes to it, under TLS's own locks, so
// its writes come in record order. Besides WriteLoop's, TLS writes alerts
// and key updates from other goroutines; one that comes while the writes
// are held joins the held bytes in its order, and Flush writes it too, so
// nothing is sent out of order and nothing held is left behind. It keeps
// one buffer of at most about coalesceMax between takes.
type Coalescer struct {
	net.Conn

	mu struct {
		sync.Mutex
		held bool
		buf  []byte
	}
}

// NewCoalescer wraps conn; its writes go straight through until Hold.
func NewCoalescer(conn net.Conn) *Coalescer { return &Coalescer{Conn: conn} }

// Write sends p, or keeps it for Flush while the writes are held.
func (c *Coalescer) Write(p []byte) (int, error) {
	c.mu.Lock()
	if c.mu.held {
		c.mu.buf = append(c.mu.buf, p...)
		c.mu.Unlock()
		return len(p), nil
	}
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// Hold keeps the writes that follow for Flush, in a buffer made ready
// for size bytes. Hold and Flush are called by one goroutine. A holding
// Coalescer whose TLS write failed is left holding: its connection is
// done for, and its owner closes it.
func (c *Coalescer) Hold(size int) {
	c.mu.Lock()
	c.mu.held = true
	if cap(c.mu.buf) < size {
		c.mu.buf = make([]byte, 0, size)
	}
	c.mu.Unlock()
}

// Flush writes what was held, in one write (more if writes joined while
// it wrote), and lets later writes through. After a failed write the
// connection is done for: the held bytes are dropped and writes go
// through again (to fail as well).
func (c *Coalescer) Flush() error {
	for {
		c.mu.Lock()
		b := c.mu.buf
		if len(b) == 0 {
			c.mu.held = false
			c.mu.Unlock()
			return nil
		}
		c.mu.buf = nil // a write that joins meanwhile starts its own
		c.mu.Unlock()
		_, err := c.Conn.Write(b)
		c.mu.Lock()
		switch {
		case err != nil:
			c.mu.held, c.mu.buf = false, nil
		case len(c.mu.buf) == 0 && cap(b) <= coalesceMax+coalesceMax/16:
			c.mu.buf = b[:0] // no write joined: keep the buffer for the next take
		}
		c.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// ReadFrame reads one frame of at most maxFrame bytes from r (a buffered
// reader of the connection).
func ReadFrame(r io.Reader, maxFrame int) (kind byte, id uint64, body []byte, err error) {
	var hdr [HeaderLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, 0, nil, fmt.Errorf("read: %w", err)
	}
	n := int(binary.BigEndian.Uint32(hdr[:4]))
	if n < HeaderLen-4 || n+4 > maxFrame {
		return 0, 0, nil, fmt.Errorf("frame of %d bytes", n+4)
	}
	body = make([]byte, n-(HeaderLen-4))
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, 0, nil, fmt.Errorf("read: %w", err)
	}
	return hdr[4], binary.BigEndian.Uint64(hdr[5:]), body, nil
}
