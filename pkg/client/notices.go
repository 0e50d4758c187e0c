package client

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/wire"
)

// A host that has just become a stream's owner announces it once it takes
// publishes (wire.OwnerNoticeSubject). A request retried across a failover
// waits for its backoff or for such a notice, whichever comes first, so the
// retry meets the new owner a few milliseconds after it serves rather than
// up to a backoff later; the attempts still waiting for the old owner are
// probed at once (ownerwatch.go), so they too are retried without waiting
// for DefaultProbeAfter. A notice is only a hint to try again: nothing in
// it is trusted, and a notice lost (or refused by the client's NATS
// permissions) leaves the backoff as it was.
//
// The subscription of a stream's notices is held while requests wait to
// retry and while publishes are in flight (the stream's owner watch runs),
// and dropped noticeLinger after the last of them, so a burst of retries
// shares one subscription and steady publishing does not subscribe and
// unsubscribe with every request.

// noticeLinger is how long a stream's notice subscription outlives its last
// waiting request.
const noticeLinger = 2 * time.Second

// noticeSub is the notice subscription of one stream.
type noticeSub struct {
	sub   *nats.Subscription
	users int
	// next is closed at the next notice (and then replaced).
	next chan struct{}
	// idle is the pending drop after the last user left; nil while used.
	idle *time.Timer
}

// notices holds the client's notice subscriptions by stream.
type notices struct {
	mu   sync.Mutex
	subs map[string]*noticeSub
}

// awaitOwner returns a channel closed when the next owner notice of stream
// arrives, and a release to call once the caller stops waiting. Where
// subscribing fails the channel is nil: it never fires, and the caller's
// backoff decides alone.
func (c *Client) awaitOwner(stream string) (<-chan struct{}, func()) {
	n := &c.notices
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.subs[stream]
	if s == nil {
		s = &noticeSub{next: make(chan struct{})}
		sub, err := c.nc.Subscribe(wire.OwnerNoticeWildcard(stream), func(*nats.Msg) { c.onOwnerNotice(stream) })
		if err != nil {
			c.log.Debug("owner notices not heard", "stream", stream, "err", err)
			return nil, func() {}
		}
		s.sub = sub
		if n.subs == nil {
			n.subs = make(map[string]*noticeSub)
		}
		n.subs[stream] = s
	}
	if s.idle != nil {
		s.idle.Stop()
		s.idle = nil
	}
	s.users++
	var once sync.Once
	return s.next, func() { once.Do(func() { c.releaseNotice(stream, s) }) }
}

// releaseNotice ends one wait on s; the last one schedules the drop.
func (c *Client) releaseNotice(stream string, s *noticeSub) {
	n := &c.notices
	n.mu.Lock()
	defer n.mu.Unlock()
	s.users--
	if s.users > 0 {
		return
	}
	s.idle = time.AfterFunc(noticeLinger, func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if s.users > 0 || n.subs[stream] != s {
			return
		}
		delete(n.subs, stream)
		if err := s.sub.Unsubscribe(); err != nil {
			c.log.Debug("drop owner notices", "stream", stream, "err", err)
		}
	})
}

// onOwnerNotice wakes the requests waiting to retry on stream and has the
// stream's owner watch probe at once.
func (c *Client) onOwnerNotice(stream string) {
	n := &c.notices
	n.mu.Lock()
	if s := n.subs[stream]; s != nil {
		close(s.next)
		s.next = make(chan struct{})
	}
	n.mu.Unlock()
	c.watchMu.Lock()
	w := c.watches[stream]
	c.watchMu.Unlock()
	if w != nil {
		w.probeNow()
	}
}
