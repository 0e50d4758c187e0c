package client

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
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
// for the probe delay. A notice is only a hint to try again: nothing in
// it is trusted, and a notice lost (or refused by the client's NATS
// permissions) leaves the backoff as it was.
//
// The subscription of a stream's notices is held while requests wait to
// retry and while publishes are in flight (the stream's owner watch runs),
// and dropped noticeLinger after the last of them, so a burst of retries
// shares one subscription and steady publishing does not subscribe and
// unsubscribe with every request. Once sharedNoticesAt streams wait at
// once, the next ones share one wildcard subscription of all streams'
// notices, held until no stream waits.

// noticeLinger is how long a stream's notice subscription outlives its last
// waiting request.
const noticeLinger = 2 * time.Second

// sharedNoticesAt is how many streams must be waiting (holding notice
// subscriptions) before the next ones share one wildcard subscription of
// every stream's notices instead of subscribing each: a mass failover has
// thousands of streams wait at once, and each subscription made and dropped
// costs every nats-server of the cluster (the interest is routed). The
// shared subscription hears every stream's notices, and those of streams
// nobody waits for are dropped on arrival; it is held until no stream waits.
const sharedNoticesAt = 64

// noticeSub is the notice subscription of one stream.
type noticeSub struct {
	// sub is the stream's own subscription; nil when the stream's notices
	// come through the shared one (notices.shared).
	sub   *nats.Subscription
	users int
	// next is closed at the next notice (and then replaced).
	next chan struct{}
	// seq counts the notices heard, so that a retry can tell whether one
	// came during its attempt (noticeMark).
	seq uint64
	// idle is the pending drop after the last user left; nil while used.
	idle *time.Timer
	// heard says whether sub is known to hear (nil with the shared one).
	heard *heard
	// sent is closed once the subscription the entry's notices come
	// through has gone out on the connection (or failed): its own, or the
	// shared one. A request sent after that is ordered after it, so the
	// server routes a notice its answer causes to it.
	sent <-chan struct{}
}

// notices holds the client's notice subscriptions by stream. No NATS call
// is made under mu: every publish attempt of a retrying request takes it
// (noticeMark), and a subscription call waits for the connection's lock,
// which its reader and flusher hold while they work. Held across them, mu
// was 77% of the bench client's mutex waits in a 10,000-stream failover
// (awaitOwner under it, noticeMark behind it).
type notices struct {
	mu   sync.Mutex
	subs map[string]*noticeSub
	// shared is the wildcard subscription of every stream's notices, held
	// from when sharedNoticesAt streams wait until none does;
	// sharedPending is set while one awaitOwner subscribes it.
	shared        *nats.Subscription
	sharedPending bool
	// sharedHeard says whether shared is known to hear.
	sharedHeard *heard
	// sharedSent is closed once the shared subscription held or pending
	// has gone out (noticeSub.sent).
	sharedSent chan struct{}
	// held is len(subs), kept under mu, read without it by noticeMark:
	// with no subscription at all (no request is retrying, the usual
	// case) a publish's mark takes no lock.
	held atomic.Int32
	// subscribe subscribes on the client's connection (nc.Subscribe; a
	// test may slow it down).
	subscribe func(subject string, cb nats.MsgHandler) (*nats.Subscription, error)
}

// awaitOwner returns a channel closed when the next owner notice of stream
// arrives, and a release to call once the caller stops waiting. Where
// subscribing fails the channel never fires, and the caller's backoff
// decides alone (noticesHeard says whether a notice would be heard). A
// failed shared subscription leaves the streams that joined it without
// notices until a later stream subscribes it again.
//
// A new stream's entry is made under mu and its subscription after mu is
// released: a notice that comes before the server has it is missed, as it
// was before the subscription went out. A caller that joins the entry
// meanwhile waits, before it returns, until the subscription has gone out
// on the connection (noticeSub.sent), so that what the caller sends next
// reaches the server after it.
func (c *Client) awaitOwner(stream string) (<-chan struct{}, func()) {
	next, _, release := c.awaitOwnerSince(stream, noticeMark{})
	return next, release
}

// awaitOwnerSince is awaitOwner that also reports whether a notice of the
// stream was heard after since, an earlier mark (noticeMark), judged under
// the lock that hands out the channel: a notice heard after that is the
// channel's, one heard before it is in the answer, so none is missed in
// between. That includes one heard on an entry dropped since the mark
// (idle for noticeLinger during a long attempt): since holds that entry,
// whose count mu still guards.
func (c *Client) awaitOwnerSince(stream string, since noticeMark) (<-chan struct{}, bool, func()) {
	n := &c.notices
	n.mu.Lock()
	s := n.subs[stream]
	var own, shared bool // what this call subscribes once mu is released
	var ownSent chan struct{}
	if s == nil {
		s = &noticeSub{next: make(chan struct{})}
		if n.shared == nil && !n.sharedPending && len(n.subs) >= sharedNoticesAt {
			n.sharedPending, shared = true, true
			n.sharedSent = make(chan struct{})
		}
		// With the shared subscription held or on its way, the stream's
		// notices come through it (s.sub stays nil).
		own = n.shared == nil && !n.sharedPending
		if own {
			ownSent = make(chan struct{})
			s.sent = ownSent
		} else {
			s.sent = n.sharedSent
		}
		if n.subs == nil {
			n.subs = make(map[string]*noticeSub)
		}
		n.subs[stream] = s
		n.held.Add(1)
	}
	if s.idle != nil {
		s.idle.Stop()
		s.idle = nil
	}
	s.users++
	next, noticed, sent := s.next, since.passedOn(s), s.sent
	n.mu.Unlock()
	if shared {
		c.subscribeShared()
	}
	if own {
		c.subscribeOwn(stream, s)
		close(ownSent)
	}
	// Joined an entry whose subscription another caller is still making:
	// the caller's next requests (a retry's question to the coordinators)
	// must go out after it, or a notice they cause can reach the server
	// before the subscription does and be missed.
	if sent != nil {
		<-sent
	}
	var once sync.Once
	return next, noticed, func() { once.Do(func() { c.releaseNotice(stream, s) }) }
}

// subscribeOwn subscribes stream's own notices for its entry s. A failure
// leaves s without one: its waits fire only at their backoff.
func (c *Client) subscribeOwn(stream string, s *noticeSub) {
	n := &c.notices
	sub, err := n.subscribe(wire.OwnerNoticeWildcard(stream), func(*nats.Msg) { c.onOwnerNotice(stream) })
	if err != nil {
		c.log.Debug("owner notices not heard", "stream", stream, "err", err)
		return
	}
	c.stats.noticeSubscribes.Add(1)
	h := c.confirmHeard(sub.Subject)
	// s is still stream's entry: its creator, this call's caller, holds
	// one of its users until awaitOwner returns, so it cannot be dropped.
	n.mu.Lock()
	s.sub, s.heard = sub, h
	n.mu.Unlock()
}

// subscribeShared subscribes the shared wildcard subscription, which this
// call marked pending. Its caller's entry holds a user meanwhile, so the
// subscription is wanted when it is through (the drop releases it once no
// stream waits).
func (c *Client) subscribeShared() {
	n := &c.notices
	sub, err := n.subscribe(wire.OwnerNoticeWildcard("*"), c.onSharedNotice)
	var h *heard
	if err != nil {
		c.log.Debug("owner notices not heard", "err", err)
		sub = nil
	} else {
		c.stats.noticeSubscribes.Add(1)
		h = c.confirmHeard(sub.Subject)
	}
	n.mu.Lock()
	n.sharedPending = false
	n.shared, n.sharedHeard = sub, h
	close(n.sharedSent)
	n.mu.Unlock()
}

// unsubscribeNotices drops a notice subscription; call it without mu.
func (c *Client) unsubscribeNotices(sub *nats.Subscription) {
	if err := sub.Unsubscribe(); err != nil {
		c.log.Debug("drop owner notices", "subject", sub.Subject, "err", err)
	}
}

// heard says whether a notice subscription is known to hear every notice
// of its subject: the server took it (a flush after it came back with no
// permission refusal of the subject; the client principals may be denied
// owner notices) and the connection has not reconnected since it was made
// (a notice sent while the client was away is lost). Only while it hears
// may the retries and probes of a stream that nobody serves slow down
// (noticesHeard): the new owner's notice is what wakes them.
type heard struct {
	ok         atomic.Bool
	reconnects uint64
}

// heardConfirmWait bounds the flush that confirms a notice subscription.
const heardConfirmWait = 5 * time.Second

// confirmHeard returns the heard of a notice subscription to subject just
// made, confirmed in the background.
func (c *Client) confirmHeard(subject string) *heard {
	h := &heard{reconnects: c.nc.Stats().Reconnects}
	go func() {
		if err := c.nc.FlushTimeout(heardConfirmWait); err != nil {
			return
		}
		// The server refuses a subscription it does not permit with an
		// -ERR before it answers the flush's PING.
		if err := c.nc.LastError(); errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), subject) {
			c.log.Debug("owner notices refused", "subject", subject, "err", err)
			return
		}
		h.ok.Store(true)
	}()
	return h
}

// hears reports whether h is known to hear (see heard).
func (h *heard) hears(c *Client) bool {
	return h != nil && h.ok.Load() && c.nc.Stats().Reconnects == h.reconnects
}

// noticesHeard reports whether a new owner's notice of stream would be
// heard now: a subscription of its notices (its own or the shared one) is
// held and known to hear.
func (c *Client) noticesHeard(stream string) bool {
	n := &c.notices
	if n.held.Load() == 0 {
		return false
	}
	n.mu.Lock()
	s := n.subs[stream]
	h := n.sharedHeard
	if s != nil && s.sub != nil {
		h = s.heard
	}
	n.mu.Unlock()
	return s != nil && h.hears(c)
}

// noticeMark is where stream's notices stand: its subscription (nil while
// none is held) and the notices it heard. A retry marks the start of each
// attempt and, after a failed one, asks awaitOwnerSince: a notice that
// came during the attempt (often the cause of its failure: it has the
// attempt probed and abandoned) was heard before the retry began to wait
// for one.
func (c *Client) noticeMark(stream string) noticeMark {
	n := &c.notices
	if n.held.Load() == 0 {
		return noticeMark{}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if s := n.subs[stream]; s != nil {
		return noticeMark{sub: s, seq: s.seq}
	}
	return noticeMark{}
}

// noticeMark is a stream's notice subscription and its count of notices
// at one moment.
type noticeMark struct {
	sub *noticeSub
	seq uint64
}

// passedOn reports whether a notice of the stream was heard after m, cur
// being the stream's entry now; call it with mu held. The entry of m, even
// if dropped since, counts on past m; an entry made after m (another than
// m's) heard only notices later than m.
func (m noticeMark) passedOn(cur *noticeSub) bool {
	return (m.sub != nil && m.sub.seq > m.seq) || (cur != m.sub && cur.seq > 0)
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
		var drop []*nats.Subscription
		n.mu.Lock()
		if s.users > 0 || n.subs[stream] != s {
			n.mu.Unlock()
			return
		}
		delete(n.subs, stream)
		n.held.Add(-1)
		if s.sub != nil {
			drop = append(drop, s.sub)
		}
		if len(n.subs) == 0 && n.shared != nil {
			drop = append(drop, n.shared)
			n.shared, n.sharedHeard = nil, nil
		}
		n.mu.Unlock()
		for _, sub := range drop {
			c.unsubscribeNotices(sub)
		}
	})
}

// onSharedNotice takes a notice heard on the shared subscription
// (brook.s.<stream>.owner.<node>; a stream name holds no dot) to its
// stream, if a request waits on it.
func (c *Client) onSharedNotice(m *nats.Msg) {
	tokens := strings.Split(m.Subject, ".")
	if len(tokens) != 5 {
		return
	}
	stream := tokens[2]
	n := &c.notices
	n.mu.Lock()
	s := n.subs[stream]
	// A stream with a subscription of its own hears it there, once the
	// server is known to have it: made after mu was released, it may
	// reach the server after the shared one, which alone hears the
	// notices in between. Until then both may deliver: a second wake is
	// one more attempt, a lost one a backoff.
	deliver := s != nil && (s.sub == nil || !s.heard.ok.Load())
	n.mu.Unlock()
	if deliver {
		c.onOwnerNotice(stream)
	}
}

// onOwnerNotice wakes the requests waiting to retry on stream and has the
// stream's owner watch probe at once.
func (c *Client) onOwnerNotice(stream string) {
	c.stats.notices.Add(1)
	n := &c.notices
	n.mu.Lock()
	if s := n.subs[stream]; s != nil {
		close(s.next)
		s.next = make(chan struct{})
		s.seq++
	}
	n.mu.Unlock()
	c.watchMu.Lock()
	w := c.watches[stream]
	c.watchMu.Unlock()
	if w != nil {
		w.probeNow()
	}
}
