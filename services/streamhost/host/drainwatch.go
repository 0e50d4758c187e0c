package host

import (
	"errors"
	"slices"
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
func (h *Host) watchDrain(subs []*nats.Subscription, reconnects uint64) {
	deadline := time.Now().Add(drainWatchLimit)
	t := time.NewTicker(drainWatchEvery)
	defer t.Stop()
	open := slices.Clone(subs) // not yet seen removed before any reconnect
	valid := make([]bool, len(open))
	for {
		if h.leaving.Load() || h.nc.IsClosed() {
			return // the connection ends with the host
		}
		forces := h.drainForces.Load()
		for i, s := range open {
			valid[i] = s.IsValid()
		}
		// Read after the subscriptions: one removed while this still
		// reads reconnects was removed before any resend.
		reconnected := h.nc.Stats().Reconnects != reconnects
		if reconnected && !h.nc.IsConnected() {
			<-t.C // unsubscribe once the connection is back
			continue
		}
		gone := false
		next := open[:0]
		for i, s := range open {
			switch {
			case !valid[i]:
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
		open = next
		valid = valid[:len(open)]
		if gone {
			h.forceReconnect(forces, subs[0].Subject)
			return
		}
		if len(open) == 0 {
			return
		}
		if time.Now().After(deadline) {
			h.log.Warn("drained subscriptions still open; not watched any further", "subject", subs[0].Subject)
			return
		}
		<-t.C
	}
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
