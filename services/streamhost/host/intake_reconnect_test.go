package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/wire"
)

// These tests end an owner role around a reconnect of the host's NATS
// connection (found in review: a drained subscription that a reconnect
// resends is removed by the client alone, and the server routes to it for
// the rest of the connection). They run the host on a connection through
// cutProxy, which can drop it.

// cutProxy forwards TCP connections to target; cut closes every
// connection and refuses new ones until restore.
type cutProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	down  bool
	conns []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln}
	t.Cleanup(func() { _ = ln.Close(); p.cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			down := p.down
			p.mu.Unlock()
			if down {
				_ = c.Close()
				continue
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(c, s); _ = c.Close() }()
			go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
		}
	}()
	return p
}

func (p *cutProxy) url() string { return "nats://" + p.ln.Addr().String() }

func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

func (p *cutProxy) restore() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// proxiedOwner starts a mini cluster whose host n1 reaches NATS through a
// cutProxy and owns stream at epoch 1 with one record.
func proxiedOwner(t *testing.T, stream string, id uint64) (*miniCluster, *cutProxy, *nats.Conn, *Host) {
	t.Helper()
	c := newMiniCluster(t)
	p := newCutProxy(t, strings.TrimPrefix(c.url, "nats://"))
	c.assign(assignment(stream, id, 1, "n1", nil))
	nc, err := nats.Connect(p.url(), nats.Name("brook-streamhost:n1"), nats.MaxReconnects(-1),
		nats.ReconnectWait(20*time.Millisecond), nats.ReconnectJitter(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	h, err := New(Config{
		Node: "n1", DataDir: c.dataDir("n1"), HeartbeatInterval: 50 * time.Millisecond,
		PullInterval: time.Hour, AckWait: 50 * time.Millisecond, SealLinger: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("host run: %v", err)
		}
	})
	c.mu.Lock()
	c.hosts["n1"] = &testHost{node: "n1", h: h}
	c.mu.Unlock()
	c.waitCopy("n1", stream, "owner at epoch 1", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner && cs.Epoch == 1 })
	c.mustPublish(stream, payload(0))
	return c, p, nc, h
}

// endRole ends the stream's role on h with code.
func endRole(h *Host, stream, code string) {
	r := h.lookupReplica(stream)
	r.mu.Lock()
	r.stopRole(code)
	r.mu.Unlock()
}

// mustHaveNoResponders fails unless a publish to stream fails at once with
// no responders: nobody, the ended role included, subscribes to it.
func mustHaveNoResponders(t *testing.T, c *miniCluster, stream string) {
	t.Helper()
	began := time.Now()
	_, err := c.nc.Request(wire.PublishSubject(stream), payload(1), 2*time.Second)
	if !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("publish to a stream nobody owns: err %v after %v; want no responders at once (the ended role's subscription is still on the server)",
			err, time.Since(began))
	}
}

// replyLog publishes to stream from its own connection and records every
// reply each publish gets.
type replyLog struct {
	nc    *nats.Conn
	inbox string
	mu    sync.Mutex
	got   map[string][]string
}

func newReplyLog(t *testing.T, url string) *replyLog {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	l := &replyLog{nc: nc, inbox: nats.NewInbox(), got: map[string][]string{}}
	if _, err := nc.Subscribe(l.inbox+".*", func(m *nats.Msg) {
		what := "confirm"
		if e := replyError(m); e != nil {
			what = e.Code
		} else if len(m.Data) == 0 {
			what = "no_responders"
		}
		l.mu.Lock()
		l.got[m.Subject] = append(l.got[m.Subject], what)
		l.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	return l
}

// flood publishes to stream until stop is closed, pausing for pause every
// every publishes; it sends how many it published on the returned channel.
func (l *replyLog) flood(stream string, stop <-chan struct{}, every int, pause time.Duration) <-chan int {
	sent := make(chan int, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				sent <- i
				return
			default:
			}
			_ = l.nc.PublishRequest(wire.PublishSubject(stream), fmt.Sprintf("%s.%d", l.inbox, i), payload(i))
			if every > 0 && i%every == 0 {
				time.Sleep(pause)
			}
		}
	}()
	return sent
}

// mustBeAnsweredOnce fails if a publish got more than one reply.
func (l *replyLog) mustBeAnsweredOnce(t *testing.T, sent int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	twice, refusedAndConfirmed := 0, 0
	for _, rs := range l.got {
		if len(rs) > 1 {
			twice++
			if slices.Contains(rs, "confirm") && (slices.Contains(rs, wire.CodeSealed) || slices.Contains(rs, wire.CodeNotOwner)) {
				refusedAndConfirmed++
			}
		}
	}
	t.Logf("%d publishes sent, %d answered, %d answered twice, %d both refused and confirmed", sent, len(l.got), twice, refusedAndConfirmed)
	if twice > 0 {
		t.Fatalf("%d publishes answered twice (%d refused by the ended role and confirmed by the new one)", twice, refusedAndConfirmed)
	}
}

// takeEpoch2 makes h the stream's owner at epoch 2.
func takeEpoch2(t *testing.T, c *miniCluster, h *Host, stream string, id uint64) {
	t.Helper()
	a2 := assignment(stream, id, 2, "n1", nil, wire.HistoryStart{Epoch: 1, Node: "n1"}, wire.HistoryStart{Epoch: 2, RecordTail: 1, Node: "n1"})
	c.table.Set(a2)
	if err := h.applyOne(context.Background(), &a2, 1<<40); err != nil {
		t.Fatalf("apply epoch 2: %v", err)
	}
	if st := h.lookupReplica(stream).status.Load(); st.role != wire.RoleOwner || st.epoch != 2 {
		t.Fatalf("role %v epoch %d", st.role, st.epoch)
	}
}

// TestRoleEndedWhileReconnectingLeavesNoInterest: an owner role that ends
// while the host's connection is reconnecting must not leave the server
// routing the stream's publishes to the host once it is back.
func TestRoleEndedWhileReconnectingLeavesNoInterest(t *testing.T) {
	const stream = "zombie"
	c, p, nc, h := proxiedOwner(t, stream, 11)
	p.cut()
	testEventually(t, "host connection reconnecting", func() bool { return nc.IsReconnecting() })
	endRole(h, stream, wire.CodeNotOwner)
	p.restore()
	testEventually(t, "host connection back", func() bool { return nc.IsConnected() })
	time.Sleep(500 * time.Millisecond) // the drain is over
	mustHaveNoResponders(t, c, stream)
}

// TestRoleEndsUnderLoadThenReconnect: the role ends while connected, its
// subscriptions draining with publishes queued, and the host's connection
// drops and comes back within the drain. Once back, nobody subscribes.
func TestRoleEndsUnderLoadThenReconnect(t *testing.T) {
	const stream = "loaded"
	c, p, nc, h := proxiedOwner(t, stream, 13)
	l := newReplyLog(t, c.url)
	stop := make(chan struct{})
	sent := l.flood(stream, stop, 0, 0)
	time.Sleep(100 * time.Millisecond)
	endRole(h, stream, wire.CodeSealed) // a seal ends the role while publishes are queued
	p.cut()                             // the connection drops while the drain waits for the queue
	close(stop)
	<-sent
	time.Sleep(30 * time.Millisecond)
	p.restore()
	testEventually(t, "host connection back", func() bool { return nc.IsConnected() })
	time.Sleep(500 * time.Millisecond)
	mustHaveNoResponders(t, c, stream)
}

// TestNewRoleSameHostWhileReconnectingAnsweredOnce: the owner role at
// epoch 1 ends and the same host takes the owner role at epoch 2 while its
// connection is reconnecting. Once back, each publish is answered by one
// role only: never refused by the ended role (not confirmed, retried by a
// client) while the new role writes and confirms it.
func TestNewRoleSameHostWhileReconnectingAnsweredOnce(t *testing.T) {
	const stream, id = "twice", 12
	c, p, nc, h := proxiedOwner(t, stream, id)
	p.cut()
	testEventually(t, "host connection reconnecting", func() bool { return nc.IsReconnecting() })
	takeEpoch2(t, c, h, stream, id)
	l := newReplyLog(t, c.url)
	stop := make(chan struct{})
	sent := l.flood(stream, stop, 50, time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	p.restore()
	testEventually(t, "host connection back", func() bool { return nc.IsConnected() })
	time.Sleep(500 * time.Millisecond)
	close(stop)
	n := <-sent
	time.Sleep(500 * time.Millisecond)
	l.mustBeAnsweredOnce(t, n)
}

// TestNewRoleAfterReconnectAnsweredOnce: the role ends under load, the
// connection drops and comes back within the drain, and the same host
// takes the owner role at epoch 2 right after. Each publish is answered
// once.
func TestNewRoleAfterReconnectAnsweredOnce(t *testing.T) {
	const stream, id = "twice2", 14
	c, p, nc, h := proxiedOwner(t, stream, id)
	l := newReplyLog(t, c.url)
	stop := make(chan struct{})
	sent := l.flood(stream, stop, 20, 100*time.Microsecond)
	time.Sleep(100 * time.Millisecond)
	endRole(h, stream, wire.CodeSealed)
	p.cut()
	time.Sleep(30 * time.Millisecond)
	p.restore()
	testEventually(t, "host connection back", func() bool { return nc.IsConnected() })
	takeEpoch2(t, c, h, stream, id)
	time.Sleep(300 * time.Millisecond)
	close(stop)
	n := <-sent
	time.Sleep(500 * time.Millisecond)
	l.mustBeAnsweredOnce(t, n)
}
