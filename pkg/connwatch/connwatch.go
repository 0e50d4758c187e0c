// Package connwatch tells whether a process's NATS connection is up
// without waiting for the connection.
//
// nats.go's IsConnected (and Stats) take the connection's lock, and its
// flusher holds that lock while it writes to the socket. When the server
// stops reading (stalled, or the network between them), a write blocks
// until the connection's FlusherTimeout, a minute by default, and so does
// every caller of IsConnected. A health endpoint that asked the connection
// itself hung with it, one goroutine per probe, and said nothing about why.
//
// A Watch asks the connection from a goroutine of its own, every interval,
// and keeps the answer. Err answers at once, from memory: the connection
// is down when its last answer was "not connected" or a loss was told
// since (below), and also when the question in flight has waited longer
// than the stale bound, which is what a connection blocked in a write
// looks like from outside.
//
// The lock is held for another reason too: nats.go makes a connection
// again under it, and an attempt to a server that accepts the TCP
// connection but does not answer (a silent partition, a stalled server)
// holds it for the connection's Timeout (2 s by default), attempt after
// attempt. The question asked just after a disconnect waits through them,
// and the last answer ("up") stood meanwhile. So the service tells the
// watch of each loss as nats.go makes it (Losses, calling Lost): the
// watch says down at once, and drops the answer of a question asked
// before the loss.
//
// # Locks and goroutines
//
// A Watch's mutex (mu) guards its last answer and the count of losses; it
// is held for a few instructions, never across a question. Run is the
// watch's one goroutine; its caller starts it and owns it, and it returns
// when its context ends, after the question in flight (which waits for
// the connection's lock: at most the connection's FlusherTimeout or a
// connection attempt's Timeout, or until the connection closes). Losses
// is a goroutine of its caller's too, ended by its context, after its
// first read of the connection's status, which waits for the same lock;
// it calls Lost. Err is called from any goroutine.
package connwatch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// Interval is how often a service's Watch asks its connection, and Stale
// how long a question may wait before the connection counts as down. A
// question waits for the connection's lock, which a busy connection hands
// from publisher to publisher; seconds of it are a stuck socket, not load.
const (
	Interval = 500 * time.Millisecond
	Stale    = 5 * time.Second
)

// PingInterval and MaxPingsOut are how brook's services ping their NATS
// server: a connection whose server answers none of MaxPingsOut pings in
// a row (PingInterval apart) is closed as stale and made again, to the
// same server or another of the cluster. nats.go's defaults (2 minutes,
// 2 pings) leave a process behind a silent partition (its TCP connection
// open, nothing getting through) believing it is connected for minutes:
// its health says up, and it never tries another server. With these it
// finds out within (MaxPingsOut+1) x PingInterval, 8 s. A ping waits
// behind what the connection sent before it, so the bound stays seconds,
// far above what a loaded connection takes to answer.
const (
	PingInterval = 2 * time.Second
	MaxPingsOut  = 3
)

// PingOptions are the nats.Options of PingInterval and MaxPingsOut, for a
// service's connections.
func PingOptions() []nats.Option { return pingOptions(PingInterval) }

func pingOptions(every time.Duration) []nats.Option {
	return []nats.Option{nats.PingInterval(every), nats.MaxPingsOutstanding(MaxPingsOut)}
}

// Conn is what a Watch asks; *nats.Conn is one.
type Conn interface{ IsConnected() bool }

// The last answer, in Watch.mu.state.
const (
	unknown int32 = iota // no answer yet
	up
	down
)

// Watch keeps a connection's last answer; New makes one, Run keeps it
// current, and Err reads it.
type Watch struct {
	conn     Conn
	interval time.Duration
	stale    time.Duration

	askedAt atomic.Int64 // Unix nanoseconds when the question in flight began; 0 when none is

	mu struct {
		sync.Mutex
		state  int32  // unknown, up or down: the last answer, or down after a loss
		losses uint64 // calls of Lost: an answer to a question asked before the last one is dropped
	}
}

// New returns a watch of c that asks every interval and counts a question
// unanswered for longer than stale as the connection down. It asks nothing
// until Run.
func New(c Conn, interval, stale time.Duration) *Watch {
	return &Watch{conn: c, interval: interval, stale: stale}
}

// Run asks the connection at once and then every interval, until ctx ends.
func (w *Watch) Run(ctx context.Context) {
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		w.mu.Lock()
		losses := w.mu.losses
		w.mu.Unlock()
		w.askedAt.Store(time.Now().UnixNano())
		connected := w.conn.IsConnected()
		w.askedAt.Store(0)
		w.mu.Lock()
		// A loss told while the question waited stands: the answer may
		// have been read before it.
		if w.mu.losses == losses {
			w.mu.state = down
			if connected {
				w.mu.state = up
			}
		}
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Lost tells the watch that the connection is down (Losses calls it): Err
// says so at once,
// without waiting for a question that a connection attempt holds up, and
// the answer of a question asked before it is dropped. The answer to the
// next question asked after it says whether the connection is up again.
func (w *Watch) Lost() {
	w.mu.Lock()
	w.mu.losses++
	w.mu.state = down
	w.mu.Unlock()
}

// Losses calls lost each time c's status changes to reconnecting (again
// after an attempt that connected and then failed), disconnected or
// closed, until ctx ends: a
// service starts it with its watch, with the watch's Lost. nats.go sends
// these changes as it makes them, under the connection's lock, not
// through the goroutine that runs the connection's callbacks, where its
// disconnect handler may wait behind a reconnect handler that reads the
// connection while an attempt to connect again holds the lock (a
// connection lost right after it came back). Being on a goroutine of its
// own, a loss may also be heard after the reconnect that followed it,
// which costs the watch one question; what must follow the connection's
// changes in order belongs in its handlers. A connection already down
// when Losses has registered for the changes (a loss as the service
// starts) is a loss too: Losses reads the status once then, which waits
// for the connection's lock as Run's question does (an attempt in
// progress, a write blocked up to the FlusherTimeout); the changes
// meanwhile wait in the channel.
func Losses(ctx context.Context, c *nats.Conn, lost func()) {
	// nats.go drops a change the channel has no room for; those in the
	// channel say the same.
	ch := c.StatusChanged(nats.RECONNECTING, nats.DISCONNECTED, nats.CLOSED)
	defer c.RemoveStatusListener(ch)
	switch c.Status() {
	case nats.RECONNECTING, nats.DISCONNECTED, nats.CLOSED:
		lost()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-ch:
			if !ok {
				return
			}
			lost()
		}
	}
}

// Err is nil when the connection was up at its last kept answer, with no
// loss told since (Lost), and no question has waited longer than the
// stale bound; otherwise it says why not. It never waits.
func (w *Watch) Err() error {
	if at := w.askedAt.Load(); at != 0 {
		if waited := time.Since(time.Unix(0, at)); waited > w.stale {
			return fmt.Errorf("the NATS connection has not answered for %s: its writes are blocked", waited.Round(100*time.Millisecond))
		}
	}
	w.mu.Lock()
	state := w.mu.state
	w.mu.Unlock()
	switch state {
	case unknown:
		return errors.New("the NATS connection has not been checked yet")
	case down:
		return errors.New("not connected to NATS")
	}
	return nil
}
