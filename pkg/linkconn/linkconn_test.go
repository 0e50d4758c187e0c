package linkconn

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestQueueWritesFramesInOrder: frames appended by Append come out of
// WriteLoop as ReadFrame reads them, in order, with their kinds, ids and
// bodies; an oversized frame is refused and leaves nothing behind.
func TestQueueWritesFramesInOrder(t *testing.T) {
	a, b := net.Pipe()
	defer func() { _ = a.Close(); _ = b.Close() }()
	q := NewQueue(HeaderLen+100, 1<<20)
	done := make(chan struct{})
	wrote := make(chan error, 1)
	go func() { wrote <- q.WriteLoop(a, nil, done, time.Second) }()
	if err := q.Append(9, 1, func(p []byte) []byte { return append(p, strings.Repeat("x", 200)...) }); err == nil || errors.Is(err, ErrClosed) {
		t.Fatalf("an oversized frame: %v", err)
	}
	for i := range 3 {
		if err := q.Append(byte(i), uint64(10+i), func(p []byte) []byte { return append(p, byte('a'+i)) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Append(7, 0, nil); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(b)
	for i := range 3 {
		kind, id, body, err := ReadFrame(r, 1<<10)
		if err != nil || kind != byte(i) || id != uint64(10+i) || string(body) != string(rune('a'+i)) {
			t.Fatalf("frame %d: kind %d id %d body %q err %v", i, kind, id, body, err)
		}
	}
	if kind, _, body, err := ReadFrame(r, 1<<10); err != nil || kind != 7 || len(body) != 0 {
		t.Fatalf("empty frame: kind %d body %q err %v", kind, body, err)
	}
	close(done)
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	q.Close()
	if err := q.Append(1, 1, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
}

// TestQueueBacklog: an Append that leaves more than the limit queued
// reports ErrBacklog.
func TestQueueBacklog(t *testing.T) {
	q := NewQueue(1<<20, 100)
	body := func(p []byte) []byte { return append(p, make([]byte, 60)...) }
	if err := q.Append(1, 0, body); err != nil {
		t.Fatal(err)
	}
	if err := q.Append(1, 0, body); !errors.Is(err, ErrBacklog) {
		t.Fatalf("second frame over the limit: %v", err)
	}
}

// TestReadFrameRejectsBadLengths: a length below the kind and id, or over
// the limit, is an error before anything is allocated for it.
func TestReadFrameRejectsBadLengths(t *testing.T) {
	for _, n := range []uint32{0, HeaderLen - 5, 1 << 30} {
		p := binary.BigEndian.AppendUint32(nil, n)
		p = append(p, make([]byte, HeaderLen)...)
		if _, _, _, err := ReadFrame(strings.NewReader(string(p)), 1<<20); err == nil {
			t.Errorf("length %d was read", n)
		}
	}
}

func TestCertificateFingerprint(t *testing.T) {
	c, fp, err := Certificate("x", x509.ExtKeyUsageClientAuth)
	if err != nil {
		t.Fatal(err)
	}
	if len(fp) != 64 || Fingerprint(c.Certificate[0]) != fp {
		t.Fatalf("fingerprint %q", fp)
	}
	_, fp2, _ := Certificate("x")
	if fp2 == fp {
		t.Fatal("two certificates with one fingerprint")
	}
}

// countingConn counts the writes made to it.
type countingConn struct {
	net.Conn
	writes atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestWriteLoopSendsATakeInOneWrite: frames of 100 KiB, which TLS seals in
// at least seven records (more at a connection's start, when its records
// are small), reach the network in one write through a Coalescer, and the
// other side reads them intact.
func TestWriteLoopSendsATakeInOneWrite(t *testing.T) {
	for _, coalesce := range []bool{true, false} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		cert, _, err := Certificate("server")
		if err != nil {
			t.Fatal(err)
		}
		type read struct {
			bodies [][]byte
			err    error
		}
		got := make(chan read, 1)
		go func() {
			raw, err := ln.Accept()
			if err != nil {
				got <- read{err: err}
				return
			}
			defer func() { _ = raw.Close() }()
			_ = raw.SetDeadline(time.Now().Add(10 * time.Second)) // a Coalescer that never writes fails the test
			conn := tls.Server(raw, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})
			r := bufio.NewReader(conn)
			var out read
			for range 3 {
				_, _, body, err := ReadFrame(r, 1<<20)
				if err != nil {
					out.err = err
					break
				}
				out.bodies = append(out.bodies, body)
			}
			got <- out
		}()
		tcp, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		counted := &countingConn{Conn: tcp}
		raw := NewCoalescer(counted)
		conn := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
		if err := conn.Handshake(); err != nil {
			t.Fatal(err)
		}
		counted.writes.Store(0)
		q := NewQueue(1<<20, 1<<20)
		var want [][]byte
		for i := range 3 {
			body := bytes.Repeat([]byte{byte('a' + i)}, 100<<10/3)
			want = append(want, body)
			if err := q.Append(1, uint64(i), func(p []byte) []byte { return append(p, body...) }); err != nil {
				t.Fatal(err)
			}
		}
		hold := raw
		if !coalesce {
			hold = nil
		}
		done := make(chan struct{})
		wrote := make(chan error, 1)
		go func() { wrote <- q.WriteLoop(conn, hold, done, time.Second) }()
		r := <-got
		close(done)
		if err := <-wrote; err != nil {
			t.Fatal(err)
		}
		n := counted.writes.Load() // before Close's alert
		_ = conn.Close()
		_ = ln.Close()
		if r.err != nil || len(r.bodies) != 3 {
			t.Fatalf("coalesce %v: read %d frames: %v", coalesce, len(r.bodies), r.err)
		}
		for i := range want {
			if !bytes.Equal(r.bodies[i], want[i]) {
				t.Fatalf("coalesce %v: frame %d differs", coalesce, i)
			}
		}
		switch {
		case coalesce && n != 1:
			t.Errorf("through a Coalescer: %d writes of one take, want 1", n)
		case !coalesce && n < 7:
			t.Errorf("without one: %d writes; the test no longer shows what the Coalescer saves", n)
		}
	}
}

// gatedConn blocks its first write until released, and logs each write
// as it ends.
type gatedConn struct {
	net.Conn
	release chan struct{}
	entered chan struct{}
	mu      sync.Mutex
	first   bool
	log     []string
}

func (c *gatedConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	first := !c.first
	c.first = true
	c.mu.Unlock()
	if first {
		close(c.entered)
		<-c.release
	}
	c.mu.Lock()
	c.log = append(c.log, string(p))
	c.mu.Unlock()
	return len(p), nil
}

// TestCoalescerKeepsOrderWhileFlushing: a write that comes while Flush is
// writing what was held is held too and written after it by Flush, not
// sent past it; once Flush returns, writes go straight through.
func TestCoalescerKeepsOrderWhileFlushing(t *testing.T) {
	g := &gatedConn{release: make(chan struct{}), entered: make(chan struct{})}
	defer func() {
		select {
		case <-g.release:
		default:
			close(g.release) // a failed test leaves no write blocked
		}
	}()
	c := NewCoalescer(g)
	c.Hold(0)
	wroteA := make(chan struct{})
	go func() {
		_, _ = c.Write([]byte("a"))
		close(wroteA)
	}()
	select {
	case <-wroteA:
	case <-g.entered:
		t.Fatal("a write after Hold went through")
	case <-time.After(5 * time.Second):
		t.Fatal("a write after Hold waited")
	}
	flushed := make(chan error, 1)
	go func() { flushed <- c.Flush() }()
	select {
	case <-g.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("Flush wrote nothing")
	}
	wroteB := make(chan struct{})
	go func() {
		_, _ = c.Write([]byte("b"))
		close(wroteB)
	}()
	select {
	case <-wroteB:
	case <-time.After(5 * time.Second):
		t.Fatal("a write while Flush writes waited for it")
	}
	close(g.release)
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("c")); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(g.log, ","); got != "a,b,c" {
		t.Fatalf("writes reached the connection as %q, want a,b,c", got)
	}
}
