package client

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// sendQueue puts the client's publish batches on its connection one
// goroutine at a time (flat combining): a batch is pushed under its
// batcher's lock, which keeps a stream's batches in order, and sent by
// drain once the pusher holds no lock. The first goroutine to drain sends
// everything queued; others that push meanwhile return at once, and what
// they pushed goes out in the order pushed, from a goroutine of the
// queue's own while there is any.
//
// Why: PublishMsg takes the connection's one lock, which its flusher also
// holds while writing to the socket. With one goroutine per send, a mass
// failover queued thousands of them on that lock (about 18,000 goroutines
// in the bench of 10,000 streams, session 40), and on a machine whose
// cores are all busy each hand-off of a contended lock waits for its
// next holder to be scheduled: batches waited there seconds at the p99,
// and the batchers' locks, held across the send, held up their replies.
// One sender takes the lock once per batch, uncontended by the others,
// and a batcher's lock is no longer held across a network call. Alone on
// the connection (one publisher), the pusher drains its own batch at once,
// on its own goroutine, as before.
//
// sent runs on the draining goroutine with no lock of the queue held; it
// must not wait for another drain (it may push and drain: the nested drain
// returns at once and the outer loop sends what it pushed).
type sendQueue struct {
	nc *nats.Conn

	mu      sync.Mutex
	queue   []queuedSend // pushed, not yet taken by a drain
	spare   []queuedSend // the drained slice, reused
	sending bool         // a goroutine is draining
}

// queuedSend is one message and what to do once PublishMsg returned.
type queuedSend struct {
	msg *nats.Msg
	// via, if set, is the client link connection it goes on instead of
	// the bus (link.go).
	via  *hostConn
	sent func(error)
	// ended, once true, means the attempt the message carries ended
	// while it was queued (its connection was replaced, and its records
	// are retried): it is not sent, and sent gets errNotSent.
	ended *atomic.Bool
}

// errNotSent is what sent gets for a message whose attempt ended while it
// was queued.
var errNotSent = errors.New("not sent: the attempt ended while it was queued")

// push queues msg; sent gets PublishMsg's error once it was sent, or
// errNotSent if ended is true by then. The caller drains once it holds no
// lock.
func (q *sendQueue) push(msg *nats.Msg, via *hostConn, ended *atomic.Bool, sent func(error)) {
	q.mu.Lock()
	q.queue = append(q.queue, queuedSend{msg: msg, via: via, sent: sent, ended: ended})
	q.mu.Unlock()
}

// drain sends what is queued unless another goroutine is already draining
// (which then sends it). Call it with no lock held. It sends what it finds
// queued; if more was pushed meanwhile, a goroutine of the queue's own
// (drainRest) sends that, so that no caller sends others' batches for
// long while its own confirm waits.
func (q *sendQueue) drain() {
	q.mu.Lock()
	if q.sending {
		q.mu.Unlock()
		return
	}
	q.sending = true
	q.sendQueuedLocked()
	if len(q.queue) > 0 {
		q.mu.Unlock()
		go q.drainRest()
		return
	}
	q.sending = false
	q.mu.Unlock()
}

// drainRest sends until the queue is empty; drain starts it, at most one
// at a time (sending stays set), and it ends when nothing is queued.
func (q *sendQueue) drainRest() {
	q.mu.Lock()
	for len(q.queue) > 0 {
		q.sendQueuedLocked()
	}
	q.sending = false
	q.mu.Unlock()
}

// sendQueuedLocked sends what is queued now, with q.mu released while it
// sends; it is called and returns with q.mu held, by the one draining
// goroutine.
func (q *sendQueue) sendQueuedLocked() {
	batch := q.queue
	q.queue = q.spare[:0]
	q.mu.Unlock()
	for i := range batch {
		if e := batch[i].ended; e != nil && e.Load() {
			batch[i].sent(errNotSent)
		} else if v := batch[i].via; v != nil {
			batch[i].sent(v.send(batch[i].msg))
		} else {
			batch[i].sent(q.nc.PublishMsg(batch[i].msg))
		}
		batch[i] = queuedSend{}
	}
	q.mu.Lock()
	q.spare = batch
}

// flush returns once everything pushed before it was sent, by this or
// another goroutine (Close, before it drains the connection).
func (q *sendQueue) flush() {
	for {
		q.drain()
		q.mu.Lock()
		idle := !q.sending && len(q.queue) == 0
		q.mu.Unlock()
		if idle {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
