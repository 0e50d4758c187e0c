package connwatch

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/nettest"
)

func startNATS(t *testing.T) string {
	t.Helper()
	return startServer(t).ClientURL()
}

// startServer starts an embedded nats-server, shut down at the test's end
// (or before by the test).
func startServer(t *testing.T) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(s.Shutdown)
	return s
}

// answers reports whether f returns within d.
func answers(d time.Duration, f func()) bool {
	done := make(chan struct{})
	go func() { f(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// A connection whose server stopped reading: IsConnected waits behind the
// write that holds the connection's lock (this is what /healthz did), and
// the watch still answers at once, first from its last answer and then,
// once the question has waited past the stale bound, that the connection
// is down.
func TestErrAnswersWhileTheConnectionIsBlocked(t *testing.T) {
	p := nettest.NewStallProxy(t, startNATS(t))
	nc, err := nats.Connect(p.URL(), nats.FlusherTimeout(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const stale = 500 * time.Millisecond
	w := New(nc, 20*time.Millisecond, stale)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	waitFor(t, "the first answer", func() bool { return w.Err() == nil })

	// Stall the server's side and publish until a publish blocks in its
	// socket write, holding the connection's lock.
	p.Pause()
	defer p.Resume()
	nettest.BlockWrites(t, nc)
	if answers(200*time.Millisecond, func() { nc.IsConnected() }) {
		t.Fatal("IsConnected answered while a write held the connection's lock")
	}

	if !answers(100*time.Millisecond, func() { _ = w.Err() }) {
		t.Fatal("Err waited for the blocked connection")
	}
	waitFor(t, "the blocked connection reported", func() bool {
		err := w.Err()
		return err != nil && strings.Contains(err.Error(), "has not answered")
	})
}

func TestErrSaysNotConnectedAfterClose(t *testing.T) {
	nc, err := nats.Connect(startNATS(t))
	if err != nil {
		t.Fatal(err)
	}
	w := New(nc, 10*time.Millisecond, time.Second)
	if err := w.Err(); err == nil || !strings.Contains(err.Error(), "not been checked") {
		t.Fatalf("before Run: %v, want not checked yet", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	waitFor(t, "up", func() bool { return w.Err() == nil })
	nc.Close()
	waitFor(t, "down after close", func() bool {
		err := w.Err()
		return err != nil && strings.Contains(err.Error(), "not connected")
	})
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// A server that stops hearing the connection (a silent partition: the TCP
// connection stays open) is found out by the pings: the connection is
// closed as stale and made again, and the watch says down meanwhile.
func TestPingsFindASilentServer(t *testing.T) {
	url := startNATS(t)
	px := nettest.NewStallProxy(t, url)
	const every = 100 * time.Millisecond
	stale := make(chan error, 1)
	nc, err := nats.Connect(px.URL(), append(pingOptions(every),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(50*time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			select {
			case stale <- err:
			default:
			}
		}))...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	w := New(nc, 20*time.Millisecond, time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	px.Pause()
	paused := time.Now()
	select {
	case err := <-stale:
		if err != nats.ErrStaleConnection {
			t.Fatalf("disconnected with %v, want %v", err, nats.ErrStaleConnection)
		}
	case <-time.After(20 * every * MaxPingsOut):
		t.Fatalf("the connection was not found stale %v after its server stopped hearing it", time.Since(paused))
	}
	took := time.Since(paused)
	if lo := time.Duration(MaxPingsOut) * every; took < lo {
		t.Fatalf("found stale after %v, before %d pings could go unanswered", took, MaxPingsOut)
	}
	deadline := time.Now().Add(5 * time.Second)
	for w.Err() == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if w.Err() == nil {
		t.Fatal("the watch says up while the connection is being made again")
	}
	px.Resume()
	deadline = time.Now().Add(10 * time.Second)
	for (w.Err() != nil || !nc.IsConnected()) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if w.Err() != nil {
		t.Fatalf("not connected again after the server hears it again: %v", w.Err())
	}
}

func TestPingOptions(t *testing.T) {
	o := nats.GetDefaultOptions()
	for _, opt := range PingOptions() {
		if err := opt(&o); err != nil {
			t.Fatal(err)
		}
	}
	if o.PingInterval != PingInterval || o.MaxPingsOut != MaxPingsOut {
		t.Fatalf("ping every %v, %d out; want %v, %d", o.PingInterval, o.MaxPingsOut, PingInterval, MaxPingsOut)
	}
}

// A connection found stale is made again under its lock, and an attempt
// to a server that does not answer holds the lock for the connection's
// Timeout: a question asked then waits it out, and the watch went on
// saying up (the e2e silent partition's /healthz said down 2-5 s after
// the host's connection was closed as stale). Told of the loss (Losses,
// calling Lost), the watch says down at once; the question's answer, once
// the server hears it again, says up.
//
// Losses must not wait for the connection's callbacks, which run one at
// a time: a disconnect handler can wait behind the host's reconnect
// handler, which reads the connection while an attempt holds its lock
// (a connection lost right after it came back). Here the callbacks are
// held up for the whole test.
//
// Two servers, so that the first attempt follows the disconnect at once
// (nats.go sleeps ReconnectWait only after trying every server), and a
// watch that asks seldom enough not to slip in between.
func TestLossesSayDownWhileAnAttemptHoldsTheLock(t *testing.T) {
	url := startNATS(t)
	a, b := nettest.NewStallProxy(t, url), nettest.NewStallProxy(t, url)
	const (
		every   = 100 * time.Millisecond
		attempt = 4 * time.Second // each connection attempt's Timeout
	)
	held := make(chan struct{})
	defer close(held)
	nc, err := nats.Connect(a.URL()+","+b.URL(), append(pingOptions(every),
		nats.DontRandomize(),
		nats.Timeout(attempt),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(10*time.Millisecond),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { <-held }))...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	w := New(nc, 300*time.Millisecond, 2*attempt)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	losses := make(chan time.Time, 16)
	go Losses(ctx, nc, func() {
		w.Lost()
		select {
		case losses <- time.Now():
		default:
		}
	})
	waitFor(t, "the first answer", func() bool { return w.Err() == nil })

	a.Pause()
	b.Pause()
	var at time.Time
	select {
	case at = <-losses:
	case <-time.After(20 * every * MaxPingsOut):
		t.Fatal("no loss heard: the connection was not found stale, or Losses waited for the callbacks")
	}
	waitFor(t, "down", func() bool { return w.Err() != nil })
	if took := time.Since(at); took > attempt/2 {
		t.Fatalf("the watch said down %v after the loss, want at once", took)
	}
	waitFor(t, "a connection attempt holding the lock", func() bool {
		return !answers(100*time.Millisecond, func() { nc.IsConnected() })
	})
	if err := w.Err(); err == nil || !strings.Contains(err.Error(), "not connected") {
		t.Fatalf("during the attempt: %v, want not connected", err)
	}
	a.Resume()
	b.Resume()
	waitFor(t, "up again", func() bool { return w.Err() == nil })
}

// gatedConn answers "connected" to each question once the test lets it,
// and "not connected" at once after done is closed.
type gatedConn struct {
	asked chan struct{} // a question began
	let   chan struct{} // the question may answer
	done  chan struct{} // the test ended
}

func (c gatedConn) IsConnected() bool {
	select {
	case c.asked <- struct{}{}:
	case <-c.done:
		return false
	}
	select {
	case <-c.let:
		return true
	case <-c.done:
		return false
	}
}

// A loss says down at once, with a question waiting; and as that question
// may have read the connection before the loss, its "up" must not
// overwrite it.
func TestLostDropsTheAnswerAskedBefore(t *testing.T) {
	c := gatedConn{asked: make(chan struct{}), let: make(chan struct{}), done: make(chan struct{})}
	w := New(c, time.Millisecond, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); close(c.done) }()
	go w.Run(ctx)
	<-c.asked
	c.let <- struct{}{}
	<-c.asked // the first answer is in; the second question waits
	if err := w.Err(); err != nil {
		t.Fatalf("after the first answer: %v", err)
	}
	w.Lost()
	if err := w.Err(); err == nil || !strings.Contains(err.Error(), "not connected") {
		t.Fatalf("after a loss, a question waiting: %v, want not connected", err)
	}
	c.let <- struct{}{}
	<-c.asked // the second answer ("up", read before the loss) is in
	if err := w.Err(); err == nil || !strings.Contains(err.Error(), "not connected") {
		t.Fatalf("after a loss and an answer asked before it: %v, want not connected", err)
	}
	c.let <- struct{}{}
	<-c.asked
	if err := w.Err(); err != nil {
		t.Fatalf("after an answer asked after the loss: %v", err)
	}
}

// TestLossesHearsALossBeforeItStarted: a connection that went down before
// Losses registered for its changes is a loss as Losses starts (nats.go
// sends the listener nothing for it).
func TestLossesHearsALossBeforeItStarted(t *testing.T) {
	s := startServer(t)
	nc, err := nats.Connect(s.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	s.Shutdown()
	waitFor(t, "the connection down", func() bool { return nc.Status() == nats.RECONNECTING })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	heard := make(chan struct{}, 1)
	go Losses(ctx, nc, func() {
		select {
		case heard <- struct{}{}:
		default:
		}
	})
	select {
	case <-heard:
	case <-time.After(5 * time.Second):
		t.Fatal("a connection down before Losses started was not heard as a loss")
	}
}
