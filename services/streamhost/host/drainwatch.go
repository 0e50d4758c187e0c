package host

import (
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// drainWatchEvery is how often watchDrain looks at the subscriptions it
// waits for; drainWatchLimit is how long it waits at most (nats.go's
// drain flushes with a 10 s timeout, then waits for the callbacks).
const (
	drainWatchEvery = 20 * time.Millisecond
	drainWatchLimit = 15 * time.Second
)

// watchDrain follows the drained subscriptions subs of an ended role
// until nats.go has removed them, and makes sure the server does not keep
// them after a reconnect of the host's NATS connection (Stats().Reconnects
// was reconnects when the drain began).
//
// nats.go (v1.55) keeps a draining subscription among the connection's
// until its drain is over, and a reconnect meanwhile sends its SUB again
// (resendSubscriptions, or the drain began while reconnecting and its
// UNSUB was never sent); the drain then removes it on the client alone,
// with no UNSUB. The server would route the stream's requests to this
// host for as long as the connection lasts: no "no responders" for a
// stream nobody owns, its clients waiting out their request timeout, and
// a newer role here or elsewhere sharing every publish with the ended
// role's subscription (unlessSuperseded keeps it silent when the newer
// role is here). So once the connection is back after a reconnect, the
// subscriptions still draining are unsubscribed, which sends the UNSUB:
// the requests still queued in them go unanswered, as a reconnect loses
// those in flight anyway. One the drain removed after a reconnect, before
// this saw it, is gone from the client only: then the connection itself
// is replaced (ForceReconnect), a new one subscribing only what the client
// still has. That costs the host's other streams the requests in flight,
// which their clients and followers retry; it takes a reconnect and a
// drain ending within one look (drainWatchEvery), and one forced
// reconnect serves every drain that ended before it was asked for
// (drainForces).
//
// One goroutine watches every drain of the host (drainWatch): a host
// expired with 2,500 owned streams ends 2,500 owner roles at once, and a
// watcher each, looking every drainWatchEvery for up to drainWatchLimit,
// was 125,000 wake-ups a second on a machine already short of CPU. The
// goroutine of the first drain while none is watched runs the watch, in
// the host's request tracker (reqs); a later drain joins it and returns.
// It ends once no drain is left, or with the host.
func (h *Host) watchDrain(subs []*nats.Subscription, reconnects uint64) {
	w := &h.drains
	w.mu.Lock()
	w.mu.sets = append(w.mu.sets, &drainSet{
		subs: slices.Clone(subs), reconnects: reconnects,
		deadline: time.Now().Add(drainWatchLimit), subject: subs[0].Subject,
	})
	if w.mu.running {
		w.mu.Unlock()
		return
	}
	w.mu.running = true
	w.mu.Unlock()

	t := time.NewTicker(drainWatchEvery)
	defer t.Stop()
	for {
		w.mu.Lock()
		sets := w.mu.sets
		w.mu.sets = nil
		w.mu.Unlock()
		ending := h.leaving.Load() || h.nc.IsClosed() // the connection ends with the host
		// One look at every drain, then at most one forced reconnect for
		// all those found gone in it: a force sends the connection to
		// reconnecting at once, and drains deciding one after another
		// forced one reconnect each.
		forces := h.drainForces.Load()
		var keep []*drainSet
		expired, first, gone := 0, "", ""
		for _, d := range sets {
			if ending {
				continue
			}
			switch h.lookAtDrain(d) {
			case drainWatched:
				keep = append(keep, d)
			case drainGone:
				if gone == "" {
					gone = d.subject
				}
			case drainExpired:
				if expired == 0 {
					first = d.subject
				}
				expired++
			}
		}
		if gone != "" {
			h.forceReconnect(forces, gone)
		}
		if expired > 0 {
			h.log.Warn("drained subscriptions still open; not watched any further", "subject", first, "roles", expired)
		}
		w.mu.Lock()
		w.mu.sets = append(keep, w.mu.sets...)
		if ending || len(w.mu.sets) == 0 {
			w.mu.sets, w.mu.running = nil, false
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		<-t.C
	}
}

// drainWatch holds the drains of ended roles the host still watches
// (watchDrain).
type drainWatch struct {
	mu struct {
		sync.Mutex
		sets    []*drainSet
		running bool // a goroutine runs the watch
	}
}

// drainSet is one ended role's drained subscriptions.
type drainSet struct {
	subs       []*nats.Subscription // not yet seen removed before any reconnect
	valid      []bool               // scratch of lookAtDrain
	reconnects uint64               // the connection's reconnects when the drain began
	deadline   time.Time            // watched until then at most
	subject    string               // the first subscription's, for the log
}

// What lookAtDrain found of a drain.
const (
	drainWatched = iota // still draining: looked at again
	drainDone           // removed or unsubscribed
	drainGone           // removed on the client alone after a reconnect: the connection is to be replaced
	drainExpired        // still open at its deadline: no longer watched
)

// lookAtDrain looks at drain d once: it unsubscribes, after a reconnect,
// the subscriptions still draining, and reports drainGone when one was
// removed on the client alone after a reconnect (watchDrain replaces the
// connection).
func (h *Host) lookAtDrain(d *drainSet) int {
	d.valid = d.valid[:0]
	for _, s := range d.subs {
		d.valid = append(d.valid, s.IsValid())
	}
	// Read after the subscriptions: one removed while this still reads
	// reconnects was removed before any resend.
	reconnected := h.nc.Stats().Reconnects != d.reconnects
	if reconnected && !h.nc.IsConnected() {
		return drainWatched // unsubscribe once the connection is back
	}
	gone := false
	next := d.subs[:0]
	for i, s := range d.subs {
		switch {
		case !d.valid[i]:
			gone = gone || reconnected
		case !reconnected:
			next = append(next, s)
		default:
			err := s.Unsubscribe()
			switch {
			case errors.Is(err, nats.ErrBadSubscription):
				gone = true // the drain removed it in between
			case err != nil && !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, nats.ErrConnectionDraining):
				h.log.Warn("unsubscribe after a reconnect", "subject", s.Subject, "err", err)
			}
		}
	}
	d.subs = next
	switch {
	case gone:
		return drainGone
	case len(d.subs) == 0:
		return drainDone
	case time.Now().After(d.deadline):
		return drainExpired
	}
	return drainWatched
}

// forceReconnect replaces the host's NATS connection unless a reconnect
// was asked for since drainForces was forces.
func (h *Host) forceReconnect(forces uint64, subject string) {
	if !h.drainForces.CompareAndSwap(forces, forces+1) {
		return
	}
	h.log.Info("reconnecting: an ended role's subscription may still be on the server after a reconnect", "subject", subject)
	if err := h.nc.ForceReconnect(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		h.log.Warn("force reconnect", "err", err)
	}
}
