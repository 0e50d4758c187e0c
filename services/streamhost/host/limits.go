package host

import (
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/wire"
)

// Defaults of the caps on requests in flight (Config.MaxFetchWaits and
// Config.MaxInflight).
const (
	DefaultMaxFetchWaits = 1024
	DefaultMaxInflight   = 4096
)

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
	limit int64
	n     atomic.Int64

	refused atomic.Int64 // since the last log line
	logged  atomic.Int64 // unix nanoseconds of the last log line
}

func newBudget(what, state string, limit int) *budget {
	return &budget{what: what, state: state, limit: int64(limit)}
}

// take takes a slot, or reports that all are taken.
func (b *budget) take() bool {
	for {
		n := b.n.Load()
		if n >= b.limit {
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

// refuse answers reply with overloaded and logs the refusals of b at most
// once per overloadLogEvery, with how many there were since the last line.
func (h *Host) refuse(reply string, b *budget) {
	h.replyErr(reply, wire.Errorf(wire.CodeOverloaded, "host %s has %d %s %s; retry", h.cfg.Node, b.limit, b.what, b.state))
	b.refused.Add(1)
	now := time.Now().UnixNano()
	last := b.logged.Load()
	if now-last < int64(overloadLogEvery) || !b.logged.CompareAndSwap(last, now) {
		return
	}
	h.log.Warn("overloaded: refusing requests", "budget", b.what+" "+b.state, "limit", b.limit,
		"refused_since_last_line", b.refused.Swap(0))
}

// goRequest serves a request of the owner in its own tracked goroutine if b
// has a slot for it, and answers overloaded at once otherwise.
func (o *owner) goRequest(m *nats.Msg, b *budget, serve func()) {
	if !b.take() {
		o.h.refuse(m.Reply, b)
		return
	}
	started := o.goTracked(func() {
		defer b.give()
		serve()
	})
	if !started {
		b.give()
		o.h.replyErr(m.Reply, o.closedErr())
	}
}
