package host

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/nettest"
	"github.com/brook-streams/brook/pkg/wire"
)

// beatFixture is one host whose main connection goes through a nettest.StallProxy,
// with a beat connection of its own (or none), and a listener of its
// beats on a connection of its own.
type beatFixture struct {
	proxy  *nettest.StallProxy
	mainNC *nats.Conn
	beatNC *nats.Conn // nil: the host beats on mainNC
	host   *Host
	cancel context.CancelFunc
	done   chan error

	mu    sync.Mutex
	beats []wire.Heartbeat
}

func newBeatFixture(t *testing.T, ownBeatConn bool, adjust ...func(*Config)) *beatFixture {
	t.Helper()
	ns := startNATS(t, server.Options{})
	f := &beatFixture{proxy: nettest.NewStallProxy(t, ns.Addr().String()), done: make(chan error, 1)}

	listen, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(listen.Close)
	if _, err := listen.Subscribe(wire.HeartbeatSubject("n1"), func(m *nats.Msg) {
		var hb wire.Heartbeat
		if json.Unmarshal(m.Data, &hb) == nil {
			f.mu.Lock()
			f.beats = append(f.beats, hb)
			f.mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := listen.Subscribe(wire.HostLeaveWildcard, func(m *nats.Msg) { _ = m.Respond([]byte(`{"ok":true}`)) }); err != nil {
		t.Fatal(err)
	}
	if err := listen.Flush(); err != nil {
		t.Fatal(err)
	}

	if f.mainNC, err = nats.Connect(f.proxy.URL(), nats.Name("brook-streamhost:n1")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.mainNC.Close)
	if ownBeatConn {
		if f.beatNC, err = nats.Connect(ns.ClientURL(), nats.Name("brook-streamhost-beat:n1")); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(f.beatNC.Close)
	}
	cfg := Config{
		Node:              "n1",
		DataDir:           t.TempDir(),
		HeartbeatInterval: 200 * time.Millisecond,
		LivenessInterval:  20 * time.Millisecond,
		BeatConn:          f.beatNC,
		AckWait:           50 * time.Millisecond,
		SealLinger:        100 * time.Millisecond,
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	for _, a := range adjust {
		a(&cfg)
	}
	f.host, err = New(cfg, f.mainNC)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	go func() { f.done <- f.host.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-f.done; err != nil {
			t.Errorf("host run: %v", err)
		}
	})
	return f
}

// liveBeats counts the liveness beats heard so far.
func (f *beatFixture) liveBeats() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, hb := range f.beats {
		if hb.Live {
			n++
		}
	}
	return n
}

func (f *beatFixture) last() wire.Heartbeat {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.beats[len(f.beats)-1]
}

// waitLive waits until n liveness beats are heard.
func (f *beatFixture) waitLive(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for f.liveBeats() < n {
		if time.Now().After(deadline) {
			t.Fatalf("heard %d liveness beats in 10 s; want %d", f.liveBeats(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stallMain pauses the proxy and publishes on the main connection until
// its writes block (no publish returned for 300 ms), then returns a
// function that resumes the proxy and waits for the publisher to end.
func (f *beatFixture) stallMain(t *testing.T) (resume func()) {
	t.Helper()
	f.proxy.Pause()
	var sent atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		junk := make([]byte, 64<<10)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if f.mainNC.Publish("junk", junk) != nil {
				return
			}
			sent.Add(1)
		}
	}()
	resume = func() {
		close(stop)
		f.proxy.Resume()
		<-done
	}
	deadline := time.Now().Add(20 * time.Second)
	for prev := int64(-1); ; {
		time.Sleep(300 * time.Millisecond)
		n := sent.Load()
		if n == prev {
			return resume
		}
		prev = n
		if time.Now().After(deadline) {
			resume()
			t.Fatal("the main connection's writes never blocked")
		}
	}
}

// TestBeatsFlowWhileMainConnectionStalls: with a beat connection of their
// own, liveness beats keep coming while the main connection's writes are
// blocked (its lock held by a write to a full socket), and they name the
// main connection. With one connection for all, the same stall stops
// them: the case of issue 17's false expiries, and the proof the stall
// here is real.
func TestBeatsFlowWhileMainConnectionStalls(t *testing.T) {
	for _, own := range []bool{true, false} {
		name := "own beat connection"
		if !own {
			name = "one connection"
		}
		t.Run(name, func(t *testing.T) {
			f := newBeatFixture(t, own)
			f.waitLive(t, 3)
			wantID, err := f.mainNC.GetClientID()
			if err != nil {
				t.Fatal(err)
			}
			wantServer := f.mainNC.ConnectedServerId()

			resume := f.stallMain(t)
			before := f.liveBeats()
			time.Sleep(time.Second)
			during := f.liveBeats() - before
			last := f.last()
			resume()

			if !own {
				if during > 2 {
					t.Fatalf("%d liveness beats in 1 s of a stalled shared connection: the stall did not hold its lock", during)
				}
				f.waitLive(t, before+during+3) // they come back
				return
			}
			// 1 s at 20 ms would be 50; a loaded machine gets fewer.
			if during < 10 {
				t.Fatalf("%d liveness beats in 1 s of a stalled main connection; want at least 10", during)
			}
			if last.ConnID != wantID || last.ConnServer != wantServer {
				t.Fatalf("beat names connection %s/%d; want the main one, %s/%d", last.ConnServer, last.ConnID, wantServer, wantID)
			}
		})
	}
}

// TestBeatConnClosedOnShutdown: the last beat (leaving) goes out on the
// beat connection, which Run closes when it stops; the main connection
// stays with its owner.
func TestBeatConnClosedOnShutdown(t *testing.T) {
	f := newBeatFixture(t, true)
	f.waitLive(t, 1)
	f.cancel()
	if err := <-f.done; err != nil {
		t.Fatalf("run: %v", err)
	}
	f.done <- nil // for the cleanup
	if !f.beatNC.IsClosed() {
		t.Fatal("the beat connection is still open after Run returned")
	}
	if f.mainNC.IsClosed() {
		t.Fatal("Run closed the main connection, which its caller owns")
	}
	if last := f.last(); !last.Leaving {
		t.Fatalf("the last beat heard does not say leaving: %+v", last)
	}
}

// TestReconnectBeatsAtOnce: a reconnect of the main connection publishes
// a liveness beat naming it at once, even while a heartbeat's report is
// being built (beatMu held) and long before the next periodic beat: the
// coordinators expire a host not heard on its new connection within the
// disconnect grace after the server's advisory about the old one.
func TestReconnectBeatsAtOnce(t *testing.T) {
	f := newBeatFixture(t, true, func(c *Config) {
		c.HeartbeatInterval = time.Minute
		c.LivenessInterval = 30 * time.Second
	})
	deadline := time.Now().Add(10 * time.Second)
	for !f.host.reported.Load() {
		if time.Now().After(deadline) {
			t.Fatal("no first heartbeat in 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	before := f.liveBeats()
	f.host.beatMu.Lock() // a report being built
	defer f.host.beatMu.Unlock()
	f.host.Disconnected()
	f.host.Reconnected()
	f.waitLive(t, before+1)
	wantID, err := f.mainNC.GetClientID()
	if err != nil {
		t.Fatal(err)
	}
	if last := f.last(); !last.Live || last.ConnID != wantID || last.ConnServer != f.mainNC.ConnectedServerId() {
		t.Fatalf("beat after the reconnect %+v, want a liveness beat naming the main connection %d", last, wantID)
	}
}
