package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/recovery"
)

const (
	// maxSealBatch is the most seals the batcher puts in one request
	// (the host takes up to wire.MaxSealBatch). A host answers a batch
	// when its slowest seal has ended, so a smaller batch keeps one slow
	// seal (a copy waiting for its queued writes) from holding many
	// answers back: at 3,000 streams batches of 256, 4 in flight, left
	// many first seal rounds unanswered within the then-default 1 s seal
	// timeout, batches of 64, 8 in flight, none (docs/benchmarks.md,
	// session 25).
	maxSealBatch = 64
	// maxSealSenders is the most batches in flight to one node at once:
	// one slow batch (a batch is answered when its slowest seal is) does
	// not hold up the seals queued behind it.
	maxSealSenders = 8
	// maxSealQueue bounds the seals waiting for one node; past it a seal
	// fails at once (overloaded) rather than queue without bound. Each
	// recovery worker has at most one seal per copy waiting, each bounded
	// by its caller's deadline, so the queue is already bounded by the
	// streams recovering at once; this bound is only a guard. It must hold
	// a whole mass failover's seals for one node: at 10,000 streams about
	// 1,900 seals wait for each surviving host, and a bound of 1,024
	// refused the rest, whose workers then backed off 50 ms doubling to
	// 2 s while the queue drained and the senders idled: the recovery
	// commits trickled over 9.5 s instead of following the seal batches
	// (issue 17, docs/benchmarks.md session 27).
	maxSealQueue = 256 * maxSealBatch
	// maxSealBatchWait bounds a batch whose callers all have no deadline.
	maxSealBatchWait = 30 * time.Second
)

// sealBatcher is recovery.Sealer over NATS that sends the concurrent
// seals for one node as one request on brook.host.<node>.seals. A failover
// of thousands of streams starts a worker per stream, each sealing every
// copy at once: sent one request each, the leader's one connection and
// the hosts drown in thousands of small requests that time out and are all
// sent again the next round. Here each node has a queue and up to
// maxSealSenders batches in flight: a seal that finds fewer in flight is
// sent at once (a batch of what waits, often one); otherwise it queues,
// and when a batch is answered its sender takes the queue (up to
// maxSealBatch of it) as its next batch. So batches grow with the load,
// and a lone seal waits for no timer.
//
// Each seal has a budget (recovery.Sealer), counted from when its batch is
// sent, not from when it was queued: under a mass failover seals wait in
// the queue behind the batches in flight, and a budget counted from the
// call left those queued longest a few milliseconds at the host (issue
// 17). A batch's request is bounded by the longest budget among its seals
// (each caller still gets its answer or its own context's error,
// whichever comes first), and by maxSealBatchWait for a seal without one.
// It asks the host to answer within nine tenths of the shortest budget
// (timeout_ms: a seal still running then is answered timeout), so one
// slow seal does not hold its batch-mates' answers past theirs. A host that
// does not answer the batch subject (no responders: a release before
// seal batches, or no host at all) gets the batch's seals alone on
// brook.host.<node>.seal; each batch to such a host costs one extra round
// trip. Each caller's span (the recovery's seal span) gets an event when
// its batch is sent and when it is answered, so queue time shows apart
// from request time. A full queue first drops the seals whose callers
// have left, so they do not count toward maxSealQueue. A caller whose context ends
// gets ctx.Err() and leaves; its answer, when the batch returns, goes to a
// channel of one that nobody reads and is dropped. Seals whose callers
// have left before their batch is sent are not sent.
//
// Goroutines: at most maxSealSenders per node with seals queued or in
// flight (send), started by Seal and ending when its node's queue is
// empty; close
// ends the batches in flight, fails the seals queued and waits for them.
type sealBatcher struct {
	nc  *nats.Conn
	log *slog.Logger
	// gone, if not nil, reports whether the state counts node gone
	// (expired or left): a batch to such a node that nobody answers is
	// not sent again seal by seal.
	gone func(node string) bool
	// maxBatch, maxQueue and maxSenders are maxSealBatch, maxSealQueue
	// and maxSealSenders (tests change them).
	maxBatch, maxQueue, maxSenders int
	// ctx is the parent of every batch's request; close cancels it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// mu guards closed and nodes (each queue's fields).
	mu     sync.Mutex
	closed bool
	nodes  map[string]*sealQueue
}

// sealQueue is one node's seals waiting for a batch and how many send
// goroutines run for the node.
type sealQueue struct {
	waiting []*sealCall
	senders int
}

// prune drops the waiting seals whose callers have left, so that they do
// not count toward maxSealQueue. Called with the batcher's mu held.
func (q *sealQueue) prune() {
	kept := q.waiting[:0]
	for _, c := range q.waiting {
		if c.ctx.Err() == nil {
			kept = append(kept, c)
		}
	}
	clear(q.waiting[len(kept):])
	q.waiting = kept
}

// sealCall is one caller's seal; done has room for the one answer, so
// the sender never blocks on a caller that has left.
type sealCall struct {
	ctx context.Context
	req wire.SealRequest
	// budget is the seal's time from when its batch is sent (0: none,
	// bounded by maxSealBatchWait).
	budget time.Duration
	done   chan sealAnswer
}

type sealAnswer struct {
	reply *wire.SealReply
	err   error
}

var _ recovery.Sealer = (*sealBatcher)(nil)

func newSealBatcher(nc *nats.Conn, log *slog.Logger, gone func(node string) bool) *sealBatcher {
	ctx, cancel := context.WithCancel(context.Background())
	return &sealBatcher{nc: nc, log: log, gone: gone, maxBatch: maxSealBatch, maxQueue: maxSealQueue, maxSenders: maxSealSenders,
		ctx: ctx, cancel: cancel, nodes: map[string]*sealQueue{}}
}

// errSealerClosed answers the seals queued or asked once the coordinator
// stops.
var errSealerClosed = wire.Errorf(wire.CodeShuttingDown, "the coordinator is stopping")

// Seal queues req for node's next batch and waits for its answer or for
// ctx; budget is its time from when the batch is sent. An error reply of
// the host for this seal comes back as a *wire.Error; so does a full
// queue (overloaded) and a stopping coordinator (shutting_down).
func (b *sealBatcher) Seal(ctx context.Context, node string, req wire.SealRequest, budget time.Duration) (*wire.SealReply, error) {
	call := &sealCall{ctx: ctx, req: req, budget: budget, done: make(chan sealAnswer, 1)}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, errSealerClosed
	}
	q := b.nodes[node]
	if q == nil {
		q = &sealQueue{}
		b.nodes[node] = q
	}
	if len(q.waiting) >= b.maxQueue {
		q.prune()
	}
	if len(q.waiting) >= b.maxQueue {
		b.mu.Unlock()
		return nil, wire.Errorf(wire.CodeOverloaded, "seal %s of %s: %d seals already wait for node %s", node, req.Stream, b.maxQueue, node)
	}
	q.waiting = append(q.waiting, call)
	if q.senders < b.maxSenders {
		q.senders++
		b.wg.Add(1)
		go b.send(node, q)
	}
	b.mu.Unlock()
	select {
	case a := <-call.done:
		return a.reply, a.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// send sends node's queued seals, a batch at a time, until none is left.
func (b *sealBatcher) send(node string, q *sealQueue) {
	defer b.wg.Done()
	for {
		calls := b.next(node, q)
		if len(calls) == 0 {
			return
		}
		answers := b.request(node, calls)
		for i, c := range calls {
			c.done <- answers[i]
		}
	}
}

// next takes node's next batch off its queue, leaving out callers gone
// already; with none left (or the batcher closed: the queued ones fail),
// it ends this sender (the node's queue with its last) and returns nil.
func (b *sealBatcher) next(node string, q *sealQueue) []*sealCall {
	b.mu.Lock()
	defer b.mu.Unlock()
	var calls []*sealCall
	for len(q.waiting) > 0 && len(calls) < b.maxBatch {
		c := q.waiting[0]
		q.waiting[0] = nil
		q.waiting = q.waiting[1:]
		switch {
		case b.closed:
			c.done <- sealAnswer{err: errSealerClosed}
		case c.ctx.Err() == nil:
			calls = append(calls, c)
		}
	}
	if len(calls) == 0 {
		q.senders--
		if q.senders == 0 {
			delete(b.nodes, node)
		}
	}
	return calls
}

// request sends one batch and returns an answer per call, in order.
func (b *sealBatcher) request(node string, calls []*sealCall) []sealAnswer {
	batch := wire.SealBatch{Seals: make([]wire.SealRequest, len(calls))}
	shortest, longest := maxSealBatchWait, time.Duration(0)
	for i, c := range calls {
		batch.Seals[i] = c.req
		budget := c.budget
		if budget <= 0 || budget > maxSealBatchWait {
			budget = maxSealBatchWait
		}
		shortest, longest = min(shortest, budget), max(longest, budget)
	}
	// The host answers within the shortest budget, less a tenth for the
	// reply's way back: a seal still running then is answered timeout, so
	// one slow seal does not hold its batch-mates past their budgets.
	batch.TimeoutMs = uint64(max(shortest*9/10, time.Millisecond) / time.Millisecond)
	ctx, cancel := context.WithTimeout(b.ctx, longest)
	defer cancel()
	answers := make([]sealAnswer, len(calls))
	fail := func(err error) []sealAnswer {
		for i, c := range calls {
			answers[i].err = sealErr(node, c.req, fmt.Errorf("in a batch of %d: %w", len(calls), err))
		}
		return answers
	}
	data, err := json.Marshal(batch)
	if err != nil {
		return fail(fmt.Errorf("encode seal batch: %w", err))
	}
	for _, c := range calls {
		trace.SpanFromContext(c.ctx).AddEvent("seal batch sent", trace.WithAttributes(
			attribute.Int("seals", len(calls)), attribute.Int64("timeout_ms", int64(batch.TimeoutMs))))
	}
	began := time.Now()
	resp, err := b.nc.RequestWithContext(ctx, wire.SealBatchSubject(node), data)
	if errors.Is(err, nats.ErrNoResponders) {
		// No host answers brook.host.<node>.seals: a host of a release
		// before seal batches (a rolling upgrade) or none at all. A node
		// the state counts gone (expired or left) is down: asking it
		// again seal by seal would only ask the same silence once per
		// seal (a killed host's 2,500 copies at 10,000 streams), so its
		// batch fails whole; an alive host of an older release is live
		// again once heard. Otherwise each seal goes alone on
		// brook.host.<node>.seal, which an old host answers.
		if b.gone != nil && b.gone(node) {
			b.log.Debug("no responders for a seal batch to a gone node", "node", node, "seals", len(calls))
			return fail(err)
		}
		b.log.Debug("no responders for a seal batch; sealing one at a time", "node", node, "seals", len(calls))
		return b.requestEach(node, calls)
	}
	if err != nil {
		if errors.Is(err, context.Canceled) && b.ctx.Err() != nil {
			err = errSealerClosed
		}
		b.log.Debug("seal batch failed", "node", node, "seals", len(calls), "took", time.Since(began).String(), "err", err)
		return fail(err)
	}
	var reply wire.SealBatchReply
	if err := decodeReply(resp, &reply); err != nil {
		return fail(err)
	}
	if len(reply.Replies) != len(calls) {
		return fail(fmt.Errorf("seal batch reply holds %d answers for %d seals", len(reply.Replies), len(calls)))
	}
	for i, r := range reply.Replies {
		req := calls[i].req
		trace.SpanFromContext(calls[i].ctx).AddEvent("seal batch answered")
		switch {
		case r.Error != nil:
			answers[i].err = sealErr(node, req, r.Error)
		case r.Reply == nil:
			answers[i].err = errors.New("seal batch reply holds neither a reply nor an error")
		case r.Reply.Stream != req.Stream:
			answers[i].err = sealErr(node, req, otherStream(r.Reply))
		default:
			answers[i].reply = r.Reply
		}
	}
	b.log.Debug("seal batch answered", "node", node, "seals", len(calls), "took", time.Since(began).String())
	return answers
}

// requestEach sends each call's seal alone on brook.host.<node>.seal, all
// at once (at most a batch of them per send goroutine), and returns an
// answer per call, in order.
func (b *sealBatcher) requestEach(node string, calls []*sealCall) []sealAnswer {
	answers := make([]sealAnswer, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithCancel(c.ctx)
			defer cancel()
			stop := context.AfterFunc(b.ctx, cancel)
			defer stop()
			answers[i].reply, answers[i].err = sealAlone(ctx, b.nc, node, c.req)
		}()
	}
	wg.Wait()
	return answers
}

// sealAlone requests one seal from node on brook.host.<node>.seal and
// decodes its reply; an error reply comes back as a *wire.Error.
func sealAlone(ctx context.Context, nc *nats.Conn, node string, req wire.SealRequest) (*wire.SealReply, error) {
	data, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode seal: %w", err)
	}
	msg := nats.NewMsg(wire.SealSubject(node))
	msg.Data = data
	if req.TraceParent != "" {
		msg.Header.Set("traceparent", req.TraceParent)
	}
	resp, err := nc.RequestMsgWithContext(ctx, msg)
	if err != nil {
		return nil, sealErr(node, req, err)
	}
	var reply wire.SealReply
	if err := decodeReply(resp, &reply); err != nil {
		return nil, sealErr(node, req, err)
	}
	if reply.Stream != req.Stream {
		return nil, sealErr(node, req, otherStream(&reply))
	}
	return &reply, nil
}

// sealErr is err of req's seal on node, named as every seal error is.
func sealErr(node string, req wire.SealRequest, err error) error {
	return fmt.Errorf("seal %s of %s at epoch %d: %w", node, req.Stream, req.FenceEpoch, err)
}

// otherStream is the error of a seal answered for another stream than
// the one asked.
func otherStream(r *wire.SealReply) error {
	return fmt.Errorf("answered for stream %q", r.Stream)
}

// close fails every seal queued, ends the batches in flight and waits for
// the send goroutines. Seal fails at once afterwards.
func (b *sealBatcher) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.cancel()
	b.wg.Wait()
}
