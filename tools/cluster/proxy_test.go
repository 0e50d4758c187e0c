package cluster

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func dialProxy(t *testing.T, px *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", px.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

// roundTrip writes a line and reads it back within d; it reports the
// error of the read (a timeout when the bytes were dropped).
func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, line string, d time.Duration) error {
	t.Helper()
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Now().Add(d))
	got, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if got != line+"\n" {
		t.Fatalf("echo %q, want %q", got, line)
	}
	return nil
}

// A blackholed proxy keeps connections open (old and new) and drops every
// byte; Heal closes the connections that lost bytes and lets new ones
// through.
func TestProxyBlackholeAndHeal(t *testing.T) {
	px, err := NewProxy(echoServer(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })

	old, oldR := dialProxy(t, px)
	if err := roundTrip(t, old, oldR, "a", 2*time.Second); err != nil {
		t.Fatalf("echo through the proxy: %v", err)
	}

	px.Blackhole()
	if !px.IsBlackholed() {
		t.Fatal("IsBlackholed false after Blackhole")
	}
	err = roundTrip(t, old, oldR, "b", 300*time.Millisecond)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("old connection in the blackhole: %v, want a read timeout (open, nothing back)", err)
	}
	// A new connection is accepted and kept open, and its bytes dropped.
	nc, ncR := dialProxy(t, px)
	err = roundTrip(t, nc, ncR, "c", 300*time.Millisecond)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("new connection in the blackhole: %v, want a read timeout (open, nothing back)", err)
	}

	px.Heal()
	if px.IsBlackholed() {
		t.Fatal("IsBlackholed true after Heal")
	}
	// Both connections that lost bytes are closed.
	for name, r := range map[string]*bufio.Reader{"old": oldR, "new": ncR} {
		_ = old.SetReadDeadline(time.Now().Add(2 * time.Second))
		_ = nc.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := r.ReadString('\n'); !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
			if ne, ok := err.(*net.OpError); !ok || ne.Timeout() {
				t.Fatalf("%s connection after Heal: %v, want closed", name, err)
			}
		}
	}
	// A fresh connection goes through.
	fresh, freshR := dialProxy(t, px)
	if err := roundTrip(t, fresh, freshR, "d", 2*time.Second); err != nil {
		t.Fatalf("echo after Heal: %v", err)
	}
}
