// Package testutil holds helpers for the coordinator's tests that use real
// parts: free loopback ports and an embedded nats-server configured like
// production (account BROOK for the services, SYS as the system account).
package testutil

import (
	"bytes"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// FreeAddrs returns n loopback addresses whose ports were free a moment ago.
// All n listeners are held open together so the ports are distinct.
func FreeAddrs(t testing.TB, n int) []string {
	t.Helper()
	ls := make([]net.Listener, 0, n)
	addrs := make([]string, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("listen: %v", err)
		}
		ls = append(ls, l)
		addrs = append(addrs, l.Addr().String())
	}
	for _, l := range ls {
		_ = l.Close()
	}
	return addrs
}

// NATS is an embedded nats-server with the brook accounts.
type NATS struct {
	Server *server.Server
	// URL connects as user brook in account BROOK.
	URL string
	// SysURL connects as user sys in the system account.
	SysURL string
}

// StartNATS starts a nats-server on a random loopback port, stopped when the
// test ends.
func StartNATS(t testing.TB) *NATS {
	t.Helper()
	brook := server.NewAccount("BROOK")
	sys := server.NewAccount("SYS")
	opts := &server.Options{
		Host:     "127.0.0.1",
		Port:     -1,
		NoLog:    true,
		NoSigs:   true,
		Accounts: []*server.Account{brook, sys},
		Users: []*server.User{
			{Username: "brook", Password: "brook", Account: brook},
			{Username: "sys", Password: "sys", Account: sys},
		},
		SystemAccount: "SYS",
	}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("nats server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(s.Shutdown)
	port := s.Addr().(*net.TCPAddr).Port
	return &NATS{
		Server: s,
		URL:    fmt.Sprintf("nats://brook:brook@127.0.0.1:%d", port),
		SysURL: fmt.Sprintf("nats://sys:sys@127.0.0.1:%d", port),
	}
}

// Eventually polls cond every 10ms until it holds or timeout passes.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// LockedBuffer is a bytes.Buffer safe for concurrent writers (a logger
// shared by goroutines) and a reader.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
