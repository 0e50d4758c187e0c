package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/wire"
)

// DefaultWindow is the default bound of outstanding async publishes.
const DefaultWindow = 256

// AsyncConfig configures an AsyncPublisher.
type AsyncConfig struct {
	// Window bounds the publishes sent but not yet confirmed or failed;
	// PublishAsync waits while it is full. Default DefaultWindow.
	Window int
	// OnResult, if set, is called once per publish when it completes,
	// from an internal goroutine. It must not block for long: the window
	// slot is freed after it returns, and with the client link it runs on
	// the reader of the connection to the owner's host, which every
	// stream owned there shares. It must not call Client.Close.
	OnResult func(*Future)
}

// Future is the outcome of one async publish.
type Future struct {
	Data    []byte
	done    chan struct{}
	confirm wire.PublishConfirm
	err     error
}

// Done is closed when the publish is confirmed or failed.
func (f *Future) Done() <-chan struct{} { return f.done }

// Result returns the confirm or the error; call it after Done is closed.
func (f *Future) Result() (wire.PublishConfirm, error) {
	select {
	case <-f.done:
		return f.confirm, f.err
	default:
		return wire.PublishConfirm{}, errors.New("brook: publish still outstanding")
	}
}

// Wait waits for the publish to complete or ctx to end.
func (f *Future) Wait(ctx context.Context) (wire.PublishConfirm, error) {
	select {
	case <-f.done:
		return f.confirm, f.err
	case <-ctx.Done():
		return wire.PublishConfirm{}, ctx.Err()
	}
}

// pending is one publish whose first attempt awaits its reply.
type pending struct {
	fut     *Future
	opts    publishOpts
	timer   *time.Timer // set once the first attempt was sent (sent), nil before
	r       *retrier
	watched func(wire.PublishConfirm) // ends the owner watch of the first attempt; set with timer
	sentID  uint64                    // the stream id the first attempt named (0: none)
	// stopConn unregisters the retry on a reconnect (set under p.mu).
	stopConn func() bool
	// ended is set when the first attempt is taken; still queued then,
	// it is not sent (as a batch's flight).
	ended atomic.Bool
}

// AsyncPublisher publishes to one stream with up to Window publishes
// outstanding. First attempts go out in the order of the PublishAsync calls
// over one reply subscription, so the owner sees them in that order
// (with the client link, but for a change of way: doc.go). A
// publish that must be retried (a failover) is retried on its own, with the
// same rules as Publish, and may land after records published later.
type AsyncPublisher struct {
	c      *Client
	stream string
	cfg    AsyncConfig
	prefix string // reply subjects are prefix + id
	sub    *nats.Subscription
	slots  chan struct{}

	// ctx bounds the retries; Close cancels it once everything settled or
	// its own context ended.
	ctx    context.Context
	cancel context.CancelFunc

	mu          sync.Mutex
	nextID      uint64
	pend        map[uint64]*pending
	outstanding int
	idle        chan struct{} // closed while outstanding == 0
	closed      bool
}

// NewAsyncPublisher returns a publisher to stream.
func (c *Client) NewAsyncPublisher(stream string, cfg AsyncConfig) (*AsyncPublisher, error) {
	if err := wire.ValidName("stream", stream); err != nil {
		return nil, fmt.Errorf("new async publisher: %w", err)
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &AsyncPublisher{
		c: c, stream: stream, cfg: cfg,
		prefix: c.nc.NewInbox() + ".",
		slots:  make(chan struct{}, cfg.Window),
		ctx:    ctx, cancel: cancel,
		pend: make(map[uint64]*pending),
		idle: make(chan struct{}),
	}
	close(p.idle)
	sub, err := c.nc.Subscribe(p.prefix+"*", p.onReply)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("new async publisher %s: subscribe replies: %w", stream, err)
	}
	// Replies must not be dropped as a slow consumer: the window bounds
	// them anyway.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		_ = sub.Unsubscribe()
		cancel()
		return nil, fmt.Errorf("new async publisher %s: %w", stream, err)
	}
	p.sub = sub
	return p, nil
}

// PublishAsync sends data and returns its Future at once, or waits while
// the window is full. ctx bounds only that wait; the publish itself is
// bounded by the Client's request timeout and retry limits. data must not
// be modified until the Future is done.
func (p *AsyncPublisher) PublishAsync(ctx context.Context, data []byte, opts ...PublishOption) (*Future, error) {
	var o publishOpts
	for _, opt := range opts {
		opt(&o)
	}
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("publish async %s: %w", p.stream, ErrClosed)
	}
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("publish async %s: wait for window: %w", p.stream, ctx.Err())
	}
	fut := &Future{Data: data, done: make(chan struct{})}
	pd := &pending{fut: fut, opts: o, r: p.c.newRetrier("publish", p.stream, o.streamID)}
	b, berr := p.c.batcherFor(p.stream, data, o)

	p.mu.Lock()
	if p.closed || berr != nil {
		p.mu.Unlock()
		if b != nil {
			b.release()
		}
		<-p.slots
		if berr != nil {
			return nil, fmt.Errorf("publish async: %w", berr)
		}
		return nil, fmt.Errorf("publish async %s: %w", p.stream, ErrClosed)
	}
	if b != nil {
		p.addBatched(b, pd)
		p.mu.Unlock()
		p.c.sends.drain()
		return fut, nil
	}
	p.nextID++
	id := p.nextID
	p.pend[id] = pd
	if p.outstanding == 0 {
		p.idle = make(chan struct{})
	}
	p.outstanding++
	// A reconnect may lose the attempt (or its reply): retry it at once
	// (see batcher.sendLocked).
	pd.stopConn = context.AfterFunc(p.c.gen.Current(), func() {
		p.firstFailed(id, fmt.Errorf("%s: the connection was replaced while waiting: %w", wire.PublishSubject(p.stream), nats.ErrDisconnected))
	})
	// Queued under the lock (on the client's sendQueue, as batches are),
	// first attempts go out in call order.
	sent := o
	sent.streamID = p.c.idFor(p.stream, o.streamID)
	pd.sentID = sent.streamID
	msg := publishMsg(p.stream, data, sent)
	msg.Reply = p.prefix + strconv.FormatUint(id, 10)
	injectTrace(ctx, msg)
	seen := p.c.seenEpoch(p.stream)
	p.c.sends.push(msg, nil, &pd.ended, func(err error) { p.sent(id, o.hasSeq, seen, err) })
	p.mu.Unlock()
	p.c.sends.drain()
	return fut, nil
}

// sent starts first attempt id's timeout and owner watch once PublishMsg
// put it in the connection's buffer, as a batch's (batcher.sent), judged
// against the epoch known before; or retries it on PublishMsg's error. A
// reply or a reconnect that took the attempt first leaves nothing to start.
func (p *AsyncPublisher) sent(id uint64, idempotent bool, seen epochSeen, err error) {
	if err != nil {
		p.firstFailed(id, fmt.Errorf("%s: %w", wire.PublishSubject(p.stream), err))
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	pd := p.pend[id]
	if pd == nil {
		return
	}
	pd.timer = time.AfterFunc(p.c.opts.requestTimeout, func() {
		p.firstFailed(id, fmt.Errorf("%s: no reply in %v: %w", wire.PublishSubject(p.stream), p.c.opts.requestTimeout, ErrTimeout))
	})
	pd.watched = p.c.watchAttemptSeen(p.stream, idempotent, &seen, func() {
		p.firstFailed(id, fmt.Errorf("%s: %w", wire.PublishSubject(p.stream), ErrOwnerLost))
	})
}

// addBatched makes the first attempt of pd through the batcher b (under
// p.mu, so that first attempts join batches in call order). A failed
// attempt is retried like an unbatched one's.
func (p *AsyncPublisher) addBatched(b *batcher, pd *pending) {
	if p.outstanding == 0 {
		p.idle = make(chan struct{})
	}
	p.outstanding++
	b.add(pd.fut.Data, pd.opts, func(pc wire.PublishConfirm, err error) {
		if err != nil {
			p.retry(pd, err)
			return
		}
		if pd.opts.streamID == 0 {
			err = p.c.learnFromConfirm(p.stream, pc)
		}
		p.complete(pd, pc, err)
	})
}

// take removes and returns the pending publish id, or nil if another path
// (reply or timer) took it already.
func (p *AsyncPublisher) take(id uint64) *pending {
	p.mu.Lock()
	defer p.mu.Unlock()
	pd := p.pend[id]
	if pd != nil {
		delete(p.pend, id)
		pd.ended.Store(true)
		if pd.timer != nil {
			pd.timer.Stop()
		}
		if pd.stopConn != nil {
			pd.stopConn()
		}
		if pd.watched != nil {
			pd.watched(wire.PublishConfirm{})
		}
	}
	return pd
}

// onReply handles the reply to a first attempt.
func (p *AsyncPublisher) onReply(m *nats.Msg) {
	id, err := strconv.ParseUint(strings.TrimPrefix(m.Subject, p.prefix), 10, 64)
	if err != nil {
		return
	}
	pd := p.take(id)
	if pd == nil {
		return // a reply after the attempt timed out; the retry decides
	}
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		p.retry(pd, fmt.Errorf("%s: %w", wire.PublishSubject(p.stream), nats.ErrNoResponders))
		return
	}
	if werr := replyError(m, replyJSON); werr != nil {
		p.retry(pd, namedError(pd.sentID, werr))
		return
	}
	pc, err := decodeConfirm(p.stream, m)
	if pd.watched != nil { // nil: the reply beat sent to p.mu
		pd.watched(pc) // take ended the watch; this records the stream id and epoch seen
	}
	if err == nil && pd.opts.streamID == 0 {
		err = p.c.learnFromConfirm(p.stream, pc)
	}
	p.complete(pd, pc, err)
}

// firstFailed handles a first attempt that timed out or could not be sent.
func (p *AsyncPublisher) firstFailed(id uint64, err error) {
	if pd := p.take(id); pd != nil {
		p.retry(pd, err)
	}
}

// retry continues a publish whose first attempt failed with err, on its
// own goroutine so replies to the others keep flowing.
func (p *AsyncPublisher) retry(pd *pending, err error) {
	go func() {
		if ferr := pd.r.next(p.ctx, err); ferr != nil {
			p.complete(pd, wire.PublishConfirm{}, ferr)
			return
		}
		pc, rerr := p.c.publishRetry(p.ctx, pd.r, p.stream, pd.fut.Data, pd.opts)
		p.complete(pd, pc, rerr)
	}()
}

// complete settles a publish and frees its window slot.
func (p *AsyncPublisher) complete(pd *pending, pc wire.PublishConfirm, err error) {
	pd.fut.confirm, pd.fut.err = pc, err
	close(pd.fut.done)
	if p.cfg.OnResult != nil {
		p.cfg.OnResult(pd.fut)
	}
	p.mu.Lock()
	p.outstanding--
	if p.outstanding == 0 {
		close(p.idle)
	}
	p.mu.Unlock()
	<-p.slots
}

// Outstanding returns how many publishes are sent and not yet settled.
func (p *AsyncPublisher) Outstanding() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.outstanding
}

// Flush sends the stream's open batch at once (it does not wait for its
// linger) and waits until every publish made so far is confirmed or
// failed; a retry made meanwhile joins a later batch within its linger.
func (p *AsyncPublisher) Flush(ctx context.Context) error {
	p.c.flushStream(p.stream)
	p.mu.Lock()
	idle := p.idle
	p.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("flush %s: %d outstanding: %w", p.stream, p.Outstanding(), ctx.Err())
	}
}

// Close refuses further publishes, waits for the outstanding ones (Flush)
// and releases the reply subscription. If ctx ends first, the remaining
// retries are cancelled and fail with the context's error.
func (p *AsyncPublisher) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	ferr := p.Flush(ctx)
	p.cancel()
	if err := p.sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, nats.ErrBadSubscription) {
		return errors.Join(ferr, fmt.Errorf("close async publisher %s: %w", p.stream, err))
	}
	return ferr
}
