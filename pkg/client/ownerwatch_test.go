package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/wire"
)

// standInOwner plays a stream's owner at one epoch: it confirms publishes
// and answers fetches with its epoch. With hold set it keeps the next
// publish unanswered and unsubscribes, as an owner that died holding it.
type standInOwner struct {
	t     *testing.T
	epoch uint64
	nc    *nats.Conn
	subs  []*nats.Subscription

	mu     sync.Mutex
	hold   bool
	held   chan struct{}
	pubs   atomic.Int32
	delay  time.Duration // before answering a publish
	offset uint64
}

// holdNext keeps the next publish unanswered and unsubscribes (hold).
func (o *standInOwner) holdNext() {
	o.mu.Lock()
	o.hold = true
	o.mu.Unlock()
}

func startOwner(t *testing.T, url string, epoch uint64) *standInOwner {
	o := &standInOwner{t: t, epoch: epoch, nc: responderConn(t, url), held: make(chan struct{})}
	began := time.Now()
	o.subs = append(o.subs,
		subscribe(t, o.nc, wire.PublishSubject("s"), o.onPublish),
		subscribe(t, o.nc, wire.FetchSubject("s"), func(m *nats.Msg) {
			// As a host does: how long it has been serving.
			r := nats.NewMsg(m.Reply)
			r.Header.Set(wire.HeaderServingFor, fmt.Sprint(time.Since(began).Milliseconds()))
			r.Data = frame.AppendBatch(nil, &frame.Batch{Epoch: o.epoch})
			_ = m.RespondMsg(r)
		}))
	return o
}

func (o *standInOwner) onPublish(m *nats.Msg) {
	o.pubs.Add(1)
	o.mu.Lock()
	hold, delay := o.hold, o.delay
	o.offset++
	off := o.offset
	o.mu.Unlock()
	if hold {
		for _, s := range o.subs {
			_ = s.Unsubscribe()
		}
		_ = o.nc.Flush()
		close(o.held)
		return
	}
	if delay > 0 {
		go func() {
			time.Sleep(delay)
			respondJSON(o.t, m, wire.PublishConfirm{StreamID: 1, Offset: off, Epoch: o.epoch, Copies: 2, W: 2})
		}()
		return
	}
	respondJSON(o.t, m, wire.PublishConfirm{StreamID: 1, Offset: off, Epoch: o.epoch, Copies: 2, W: 2})
}

// wantRetriedToTheNewOwner checks that the second publish of
// publishAfterOwnerDies (or its kin) was confirmed by the new owner at
// epoch 2 within within (why says what a longer wait means), its held
// attempt having reached the old owner and its one retry the new owner.
func wantRetriedToTheNewOwner(t *testing.T, pc wire.PublishConfirm, took time.Duration, a, b *standInOwner, err error, within time.Duration, why string) {
	t.Helper()
	if err != nil || pc.Epoch != 2 {
		t.Fatalf("publish: %+v %v", pc, err)
	}
	if took > within {
		t.Fatalf("publish took %v; %s", took, why)
	}
	if a.pubs.Load() != 2 || b.pubs.Load() != 1 {
		t.Fatalf("old owner saw %d publishes, new owner %d; want 2 and 1", a.pubs.Load(), b.pubs.Load())
	}
}

// publishAfterOwnerDies confirms a first publish at epoch 1, then lets the
// owner die holding the second, starts a new owner at epoch 2 after
// newOwnerAfter, and returns the second publish's confirm and time, the
// two owners, and the second publish's error.
func publishAfterOwnerDies(t *testing.T, newOwnerAfter time.Duration, opts ...Option) (wire.PublishConfirm, time.Duration, *standInOwner, *standInOwner, error) {
	return publishAfterOwnerIsReplaced(t, newOwnerAfter, func(url string) *standInOwner { return startOwner(t, url, 2) }, opts...)
}

// publishAfterOwnerIsReplaced is publishAfterOwnerDies with the new owner
// started by newOwner (at epoch 2).
func publishAfterOwnerIsReplaced(t *testing.T, newOwnerAfter time.Duration, newOwner func(url string) *standInOwner, opts ...Option) (wire.PublishConfirm, time.Duration, *standInOwner, *standInOwner, error) {
	return publishAsProducerAfterOwnerIsReplaced(t, newOwnerAfter, newOwner, "", opts...)
}

// publishAsProducerAfterOwnerIsReplaced is publishAfterOwnerIsReplaced
// with both publishes under producer id producer ("": none).
func publishAsProducerAfterOwnerIsReplaced(t *testing.T, newOwnerAfter time.Duration, newOwner func(url string) *standInOwner, producer string, opts ...Option) (wire.PublishConfirm, time.Duration, *standInOwner, *standInOwner, error) {
	url := startNATS(t)
	a := startOwner(t, url, 1)
	c := connectClient(t, url, append([]Option{WithRequestTimeout(3 * time.Second)}, opts...)...)
	as := func(seq uint64) []PublishOption {
		if producer == "" {
			return nil
		}
		return []PublishOption{WithProducer(producer, seq)}
	}
	if pc, err := c.Publish(ctxTimeout(t, 10*time.Second), "s", []byte("one"), as(1)...); err != nil || pc.Epoch != 1 {
		t.Fatalf("first publish: %+v %v", pc, err)
	}
	a.holdNext()
	started := make(chan *standInOwner, 1)
	go func() {
		<-a.held
		time.Sleep(newOwnerAfter)
		started <- newOwner(url)
	}()
	start := time.Now()
	pc, err := c.Publish(ctxTimeout(t, 20*time.Second), "s", []byte("two"), as(2)...)
	took := time.Since(start)
	return pc, took, a, <-started, err
}

// An owner that died and was replaced by one at a newer epoch (after a
// moment with nobody serving, as a failover takes): the publish it held is
// abandoned once the new owner answers the probe, and confirmed by it,
// long before the 3s request timeout.
func TestPublishAbandonsAnAttemptToAReplacedOwner(t *testing.T) {
	pc, took, a, b, err := publishAfterOwnerDies(t, 400*time.Millisecond)
	wantRetriedToTheNewOwner(t, pc, took, a, b, err, 2*time.Second, "the held attempt should be abandoned well before the 3s request timeout")
}

// The new owner already serves when the first probe goes out (a fast
// failover, or a blackholed owner replaced within the probe delay): the
// probe's epoch bounds nothing, but the new owner began serving after the
// attempt was sent, so the attempt cannot have reached it and is
// abandoned. Before, it waited for the whole request timeout (3 s here).
func TestPublishAbandonsAnAttemptOlderThanTheServingOwner(t *testing.T) {
	pc, took, a, b, err := publishAfterOwnerDies(t, 150*time.Millisecond)
	wantRetriedToTheNewOwner(t, pc, took, a, b, err, 2*time.Second, "the held attempt should be abandoned well before the 3s request timeout")
}

// An owner that died with nobody serving yet: the probe finds no
// responders, the attempt is abandoned and retried until the new owner
// serves.
func TestPublishAbandonsAnAttemptToAGoneOwner(t *testing.T) {
	pc, took, _, b, err := publishAfterOwnerDies(t, 700*time.Millisecond)
	if err != nil || pc.Epoch != 2 || b.pubs.Load() < 1 {
		t.Fatalf("publish: %+v %v", pc, err)
	}
	if took > 2500*time.Millisecond {
		t.Fatalf("publish took %v; want the new owner's confirm soon after it started (700ms)", took)
	}
}

// An attempt with a producer id lost as the owner changed (the balance
// bench: a publish sent as a planned move's seal ended the old owner's
// role, lost between NATS servers): the new owner began serving a moment
// after the attempt was sent, too soon for the probe to rule the attempt
// out as the new owner's, so the rules without producer ids keep it to the
// request timeout (5 s here). With a producer id it is abandoned once the
// new owner's epoch, above the one the client knew, answers a probe, and
// its retry is confirmed by the new owner.
func TestPublishAbandonsAnIdempotentAttemptAcrossAnOwnerChange(t *testing.T) {
	// The new owner starts at once: within sendGuard of the attempt.
	pc, took, a, b, err := publishAsProducerAfterOwnerIsReplaced(t, 0, func(url string) *standInOwner { return startOwner(t, url, 2) },
		"p", WithRequestTimeout(5*time.Second))
	wantRetriedToTheNewOwner(t, pc, took, a, b, err, 2500*time.Millisecond, "the lost attempt should be abandoned well before the 5s request timeout")
}

// An attempt abandoned because a newer owner answered the probe is retried
// at once, not after a backoff: that owner serves now. In a 10,000-stream
// failover most retries that a new owner's notice woke were abandoned so
// (the notice kicks a probe, which the new owner answers with an epoch
// above the one the client knew when the retry went out), and each then
// waited a backoff before trying again (session 39). With backoffs of 6 s
// the publish would take 3 s more.
func TestAbandonedAttemptIsRetriedAtOnce(t *testing.T) {
	pc, took, a, b, err := publishAfterOwnerDies(t, 400*time.Millisecond, WithBackoff(6*time.Second, 6*time.Second), WithRequestTimeout(10*time.Second))
	wantRetriedToTheNewOwner(t, pc, took, a, b, err, 2500*time.Millisecond, "its abandoned attempt should be retried at once, not after a backoff of 3 to 6 s")
}

// With the probe off, the held attempt waits out the request timeout: the
// probe is what makes the two tests above fast.
func TestPublishWithoutOwnerProbeWaitsForTheTimeout(t *testing.T) {
	pc, took, _, _, err := publishAfterOwnerDies(t, 400*time.Millisecond, WithOwnerProbe(0))
	if err != nil || pc.Epoch != 2 {
		t.Fatalf("publish: %+v %v", pc, err)
	}
	if took < 3*time.Second {
		t.Fatalf("publish took %v without the probe, less than the 3s request timeout", took)
	}
}

// A slow owner that still serves at the epoch the client knows is not
// abandoned: its publish is answered once, by it.
func TestPublishKeepsAnAttemptToASlowLiveOwner(t *testing.T) {
	a, c := ownerTurnedSlow(t, time.Second, WithRequestTimeout(3*time.Second))
	pc, err := c.Publish(ctxTimeout(t, 10*time.Second), "s", []byte("two"))
	if err != nil || pc.Offset != 2 || a.pubs.Load() != 2 {
		t.Fatalf("publish: %+v %v after %d publishes; want offset 2 from the only attempt", pc, err, a.pubs.Load())
	}
}

// ownerTurnedSlow starts an owner at epoch 1 and a client (request timeout
// 5 s unless opts say otherwise) that publishes once to it, then has the
// owner wait delay before each later confirm.
func ownerTurnedSlow(t *testing.T, delay time.Duration, opts ...Option) (*standInOwner, *Client) {
	url := startNATS(t)
	a := startOwner(t, url, 1)
	c := connectClient(t, url, append([]Option{WithRequestTimeout(5 * time.Second)}, opts...)...)
	if _, err := c.Publish(ctxTimeout(t, 10*time.Second), "s", []byte("one")); err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	a.delay = delay
	a.mu.Unlock()
	return a, c
}

// A live owner whose confirms all take 600 ms (a host working through a
// burst) is probed only until the client has seen that its confirms take
// that long (here: two of them): the probe delay follows the client's confirm round trips
// (confirmrtt.go), so later publishes send no probe. Each was probed at
// 250 ms before, each probe a fetch the busy owner had to serve.
func TestSlowConfirmsDelayTheProbes(t *testing.T) {
	a, c := ownerTurnedSlow(t, 600*time.Millisecond)
	// The first slow confirm is probed: nothing said it would be slow.
	// After it the estimate (about 680 ms) is close to 600 ms; after a
	// second one it is over a second, so a loaded machine's late confirm
	// does not cross it.
	for _, data := range []string{"two", "three"} {
		if _, err := c.Publish(ctxTimeout(t, 10*time.Second), "s", []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	before := c.Stats()
	for i := range 3 {
		if pc, err := c.Publish(ctxTimeout(t, 10*time.Second), "s", []byte("more")); err != nil || pc.Offset != uint64(4+i) {
			t.Fatalf("publish: %+v %v, want offset %d", pc, err, 4+i)
		}
	}
	if n := c.Stats().Sub(before).Probes; n != 0 {
		t.Fatalf("%d probes of 3 publishes confirmed in 600 ms each after two such confirms, want 0", n)
	}
	if a.pubs.Load() != 6 {
		t.Fatalf("owner saw %d publishes, want 6 (no attempt abandoned)", a.pubs.Load())
	}
}

// A client that knew an older epoch publishes to the new owner, which is
// slow to confirm (as right after a promotion): the probe finds that owner
// serving, so the attempt reached it and is not abandoned; the record is
// written once.
func TestPublishKeepsAnAttemptToASlowNewOwner(t *testing.T) {
	url := startNATS(t)
	a := startOwner(t, url, 1)
	c := connectClient(t, url, WithRequestTimeout(3*time.Second))
	if _, err := c.Publish(ctxTimeout(t, 10*time.Second), "s", []byte("one")); err != nil {
		t.Fatal(err)
	}
	for _, sub := range a.subs {
		_ = sub.Unsubscribe()
	}
	_ = a.nc.Flush()
	b := startOwner(t, url, 2)
	b.mu.Lock()
	b.delay = 600 * time.Millisecond
	b.mu.Unlock()
	pc, err := c.Publish(ctxTimeout(t, 10*time.Second), "s", []byte("two"))
	if err != nil || pc.Epoch != 2 || b.pubs.Load() != 1 {
		t.Fatalf("publish: %+v %v with %d publishes at the new owner; want its one confirm", pc, err, b.pubs.Load())
	}
}

// The async publisher abandons a first attempt held by a dead owner the
// same way.
func TestAsyncPublishAbandonsAnAttemptToAReplacedOwner(t *testing.T) {
	url := startNATS(t)
	a := startOwner(t, url, 1)
	c := connectClient(t, url, WithRequestTimeout(3*time.Second))
	p, err := c.NewAsyncPublisher("s", AsyncConfig{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := p.PublishAsync(ctxTimeout(t, 5*time.Second), []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	if pc, err := f.Wait(ctxTimeout(t, 5*time.Second)); err != nil || pc.Epoch != 1 {
		t.Fatalf("first publish: %+v %v", pc, err)
	}
	a.holdNext()
	go func() {
		<-a.held
		time.Sleep(400 * time.Millisecond)
		startOwner(t, url, 2)
	}()
	start := time.Now()
	f, err = p.PublishAsync(ctxTimeout(t, 5*time.Second), []byte("two"))
	if err != nil {
		t.Fatal(err)
	}
	pc, err := f.Wait(ctxTimeout(t, 10*time.Second))
	if err != nil || pc.Epoch != 2 {
		t.Fatalf("publish: %+v %v", pc, err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("async publish took %v; want it abandoned well before the 3s request timeout", took)
	}
}

// A client keeps a watch per stream it published to; once it holds many,
// creating another drops those idle for watchIdleTTL and keeps the rest,
// and a dropped stream's next attempt gets a new watch.
func TestIdleWatchesAreDropped(t *testing.T) {
	c := connectClient(t, startNATS(t))
	for i := range minWatchPrune {
		done := c.watchAttempt(fmt.Sprintf("s%d", i), false, func() {})
		done(wire.PublishConfirm{Epoch: 7})
	}
	// Everything but s0 has been idle long enough; s1 still has an
	// attempt in flight.
	busy := c.watchAttempt("s1", false, func() {})
	defer busy(wire.PublishConfirm{})
	c.watchMu.Lock()
	for name, w := range c.watches {
		w.mu.Lock()
		if name != "s0" {
			w.idle = time.Now().Add(-watchIdleTTL)
		}
		w.mu.Unlock()
	}
	old := c.watches["s2"]
	c.watchMu.Unlock()
	// The watch goroutines of the ended attempts stop within a tick.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		running := 0
		c.watchMu.Lock()
		for name, w := range c.watches {
			w.mu.Lock()
			if w.running && name != "s1" {
				running++
			}
			w.mu.Unlock()
		}
		c.watchMu.Unlock()
		if running == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d watches still run with no attempt", running)
		}
	}
	c.watchAttempt("new", false, func() {})(wire.PublishConfirm{})
	c.watchMu.Lock()
	var kept []string
	for name := range c.watches {
		kept = append(kept, name)
	}
	c.watchMu.Unlock()
	slices.Sort(kept)
	if want := []string{"new", "s0", "s1"}; !slices.Equal(kept, want) {
		t.Fatalf("watches kept %v, want %v", kept, want)
	}
	old.mu.Lock()
	dropped := old.dropped
	old.mu.Unlock()
	if !dropped {
		t.Fatal("the dropped watch of s2 is not marked dropped")
	}
	c.watchAttempt("s2", false, func() {})(wire.PublishConfirm{})
	c.watchMu.Lock()
	renewed := c.watches["s2"]
	c.watchMu.Unlock()
	if renewed == nil || renewed == old || renewed.epoch != 0 {
		t.Fatalf("s2 after being dropped: %+v, want a new watch", renewed)
	}
}

// Probes name the stream id the client's confirms carried: an owner of an
// older stream of the same name, at a higher epoch of its own history,
// must not make the client abandon a publish the owner of the stream it
// reached is about to confirm.
func TestProbeNamesTheStreamID(t *testing.T) {
	url := startNATS(t)
	// The owner of stream 2 confirms at epoch 1, the second publish only
	// after 800 ms; it answers probes a little late.
	owner := responderConn(t, url)
	var pubs atomic.Int32
	var probeIDs sync.Map
	subscribe(t, owner, wire.PublishSubject("s"), func(m *nats.Msg) {
		n := pubs.Add(1)
		go func() {
			if n > 1 {
				time.Sleep(800 * time.Millisecond)
			}
			respondJSON(t, m, wire.PublishConfirm{StreamID: 2, Offset: uint64(n - 1), Epoch: 1, Copies: 2, W: 2})
		}()
	})
	subscribe(t, owner, wire.FetchSubject("s"), func(m *nats.Msg) {
		probeIDs.Store(m.Header.Get(wire.HeaderStreamID), true)
		go func() {
			time.Sleep(20 * time.Millisecond)
			respondBatch(t, m, &frame.Batch{Epoch: 1})
		}()
	})
	// A stale owner of stream 1 (deleted; it has not learnt yet) at epoch
	// 9: it answers a probe for stream 2 with not_owner, any other with
	// its epoch, at once.
	stale := responderConn(t, url)
	subscribe(t, stale, wire.FetchSubject("s"), func(m *nats.Msg) {
		if m.Header.Get(wire.HeaderStreamID) == "2" {
			respondError(t, m, wire.Errorf(wire.CodeNotOwner, "this host owns stream s id 1, not id 2"))
			return
		}
		respondBatch(t, m, &frame.Batch{Epoch: 9})
	})
	c := connectClient(t, url, WithRetry(1, 10*time.Second))
	ctx := ctxTimeout(t, 10*time.Second)
	for i := range 2 {
		pc, err := c.Publish(ctx, "s", []byte("x"))
		if err != nil || pc.Offset != uint64(i) {
			t.Fatalf("publish %d: %+v %v", i, pc, err)
		}
	}
	if n := pubs.Load(); n != 2 {
		t.Fatalf("the owner got %d publishes, want 2 (the second was abandoned and sent again)", n)
	}
	if _, ok := probeIDs.Load("2"); !ok {
		t.Fatal("no probe named stream id 2")
	}
}

// A publish held for 3 s by a slow owner that still serves: while the
// client holds the stream's owner-notice subscription, a new owner would
// announce itself and have the watch probe at once, so probing every
// 100 ms finds nothing a notice would not; the probes back off (here about
// 6 instead of about 28).
func TestSlowOwnerIsProbedLessWhileNoticesAreHeld(t *testing.T) {
	a, c := ownerTurnedSlow(t, 3*time.Second)
	before := c.Stats()
	pc, err := c.Publish(ctxTimeout(t, 10*time.Second), "s", []byte("two"))
	if err != nil || pc.Offset != 2 || a.pubs.Load() != 2 {
		t.Fatalf("publish: %+v %v after %d publishes; want offset 2 from the only attempt", pc, err, a.pubs.Load())
	}
	if n := c.Stats().Sub(before).Probes; n < 1 || n > 10 {
		t.Fatalf("%d probes of a slow live owner over 3 s, want between 1 and 10", n)
	}
}

// A failure retried at once (an attempt abandoned for a serving owner, or
// one during which a new owner's notice was heard) is not retried after the
// caller's context ended: the caller gets its context's error. Retried
// regardless, a batched publish would send the record again after its
// caller gave up (the batcher sends before it looks at the context).
func TestAbandonedAttemptAfterTheContextEndedIsNotRetried(t *testing.T) {
	c := connectClient(t, startNATS(t))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := c.newRetrier("publish", "s", 0)
	err := r.next(ctx, fmt.Errorf("%s: %w", wire.PublishSubject("s"), ErrOwnerLost))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("retry of an abandoned attempt after the context ended: %v, want the context's error", err)
	}
	_, release := c.awaitOwner("s") // the stream's notices are heard
	defer release()
	r = c.newRetrier("publish", "s", 0)
	c.onOwnerNotice("s")
	err = r.next(ctx, fmt.Errorf("%s: %w", wire.PublishSubject("s"), nats.ErrNoResponders))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("retry after a notice with the context ended: %v, want the context's error", err)
	}
}
