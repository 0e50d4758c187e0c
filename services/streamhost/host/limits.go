package host

import (
	"sync/atomic"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
)

// Defaults of the caps on requests in flight (Config.MaxFetchWaits and
// Config.MaxInflight).
const (
	DefaultMaxFetchWaits = 1024
	DefaultMaxInflight   = 4096
)

// replSlotsPerFollower bounds an owner's replication requests in flight
// per follower of its stream. A follower copy has one request with a reply
// out at a time (its long poll; its standalone acks have no reply and take
// no slot); one more covers a request it sent again after its own timeout
// while the first is still parked here, and the rest is slack for a
// reconnect. The bound is per owned stream, not per host: every follower
// copy parks its long poll at its owner, so a host's replication requests
// grow with the streams it owns times their followers (5,000 and more per
// host at 10,000 streams of 3 copies on 4 hosts), and a host-wide cap
// refused followers that were doing nothing wrong, holding their confirms
// back behind their backoff.
const replSlotsPerFollower = 4

// replSlots is the replication budget's limit of an owner with followers
// followers: one more follower's worth, so that a request of a node that
// is no longer (or not yet) a follower is answered for what it is rather
// than overloaded.
func replSlots(followers int) int { return replSlotsPerFollower * (followers + 1) }

// overloadLogEvery is the least time between two log lines of one budget
// about the requests it refused.
const overloadLogEvery = time.Second

// budget counts the requests of one kind a host serves at once and refuses
// one more than its limit. Taking a slot never blocks: a NATS callback that
// waited for one would hold up every later message of its subscription,
// the publishes of its stream included. A refused request is answered at
// once with wire.CodeOverloaded, which clients retry after a backoff.
type budget struct {
	what  string // "requests", "long-poll fetches": the message's noun
	state string // "in flight", "waiting"
	limit atomic.Int64
	n     atomic.Int64

	refused atomic.Int64 // since the last log line
	logged  atomic.Int64 // unix nanoseconds of the last log line
}

func newBudget(what, state string, limit int) *budget {
	b := &budget{what: what, state: state}
	b.setLimit(limit)
	return b
}

// setLimit changes the limit; slots taken beyond a lowered one stay taken
// until given back.
func (b *budget) setLimit(limit int) { b.limit.Store(int64(limit)) }

// take takes a slot, or reports that all are taken.
func (b *budget) take() bool {
	for {
		n := b.n.Load()
		if n >= b.limit.Load() {
			return false
		}
		if b.n.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// give returns a slot taken with take.
func (b *budget) give() { b.n.Add(-1) }

// inUse is how many slots are taken.
func (b *budget) inUse() int64 { return b.n.Load() }

// refuse answers a request with overloaded (fail) and logs the refusals
// of b at most once per overloadLogEvery, with how many there were since
// the last line.
func (h *Host) refuse(fail func(*wire.Error), b *budget) {
	fail(h.overloaded(b))
	h.noteRefused(b, 1)
}

// failer answers a request on reply subject to with an error.
func (h *Host) failer(to string) func(*wire.Error) {
	return func(e *wire.Error) { h.replyErr(to, e) }
}

// overloaded is the error a request b has no slot for is answered with.
func (h *Host) overloaded(b *budget) *wire.Error {
	return wire.Errorf(wire.CodeOverloaded, "host %s has %d %s %s; retry", h.cfg.Node, b.limit.Load(), b.what, b.state)
}

// stopping is the error a request the stopping host no longer serves is
// answered with.
func (h *Host) stopping() *wire.Error {
	return wire.Errorf(wire.CodeShuttingDown, "node %s is stopping", h.cfg.Node)
}

// noteRefused counts n requests b refused and logs them at most once per
// overloadLogEvery.
func (h *Host) noteRefused(b *budget, n int) {
	b.refused.Add(int64(n))
	now := time.Now().UnixNano()
	last := b.logged.Load()
	if now-last < int64(overloadLogEvery) || !b.logged.CompareAndSwap(last, now) {
		return
	}
	h.log.Warn("overloaded: refusing requests", "budget", b.what+" "+b.state, "limit", b.limit.Load(),
		"refused_since_last_line", b.refused.Swap(0))
}

// goRequest serves a request of the owner within b's slots, and answers
// overloaded at once when b has none. It runs on the host's pool
// (goTracked), whose workers keep the stacks earlier requests grew: a new
// goroutine per request grew its stack every time. The requests running
// stay bounded by the budgets; the pool's idle workers number at most the
// most jobs that ran at once, each ending after workerIdle idle.
// fail answers the request when it is not served.
func (o *owner) goRequest(fail func(*wire.Error), b *budget, serve func()) {
	if !b.take() {
		o.h.refuse(fail, b)
		return
	}
	if !o.goTracked(func() {
		defer b.give()
		serve()
	}) {
		b.give()
		fail(o.closedErr())
	}
}
