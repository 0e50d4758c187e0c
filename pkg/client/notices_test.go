package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/wire"
)

// announce publishes a new owner's notice for stream "s", as a host does
// once it takes publishes.
func announce(t *testing.T, o *standInOwner, node string) {
	t.Helper()
	data, err := json.Marshal(wire.OwnerNotice{Stream: "s", StreamID: 1, Epoch: o.epoch, Node: node})
	if err != nil {
		t.Fatal(err)
	}
	if err := o.nc.Publish(wire.OwnerNoticeSubject("s", node), data); err != nil {
		t.Fatal(err)
	}
	if err := o.nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// A publish that found nobody serving waits for its backoff (here at
// least 5 s) or for a new owner's notice: with the notice it is confirmed
// at once; without one, an owner that serves but does not announce is
// not tried again within a second.
func TestRetryWakesOnOwnerNotice(t *testing.T) {
	url := startNATS(t)
	c := connectClient(t, url, WithBackoff(10*time.Second, 10*time.Second), WithRetry(0, time.Minute))

	// Without a notice: the backoff holds the retry.
	quiet := startOwner(t, url, 1)
	for _, s := range quiet.subs {
		_ = s.Unsubscribe()
	}
	_ = quiet.nc.Flush()
	// The late subscription comes back over a channel: the goroutine
	// does not touch quiet.subs, which this one reads.
	resubscribed := make(chan *nats.Subscription, 1)
	go func() {
		time.Sleep(100 * time.Millisecond)
		resubscribed <- subscribe(t, quiet.nc, wire.PublishSubject("s"), quiet.onPublish)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_, err := c.Publish(ctx, "s", []byte("unheard"))
	cancel()
	if err == nil {
		t.Fatal("a publish retried without a notice was confirmed within 1s; its backoff is at least 5s")
	}
	_ = (<-resubscribed).Unsubscribe()
	_ = quiet.nc.Flush()

	// With a notice: the retry goes out at once.
	got := make(chan *standInOwner, 1)
	go func() {
		time.Sleep(100 * time.Millisecond)
		o := startOwner(t, url, 2)
		announce(t, o, "h2")
		got <- o
	}()
	start := time.Now()
	pc, err := c.Publish(ctxTimeout(t, 4*time.Second), "s", []byte("announced"))
	took := time.Since(start)
	o := <-got
	if err != nil || pc.Epoch != 2 {
		t.Fatalf("publish after the notice: %+v %v (after %v)", pc, err, took)
	}
	if n := o.pubs.Load(); n != 1 {
		t.Fatalf("the new owner saw %d publishes, want 1", n)
	}
}

// A publish held by an owner that died waits for a probe to learn that
// its attempt is lost; with the probe 10 s away, only the new owner's
// notice makes the client probe at once, abandon the attempt and retry it
// at the new owner, long before the 3 s request timeout.
func TestOwnerNoticeAbandonsAHeldAttempt(t *testing.T) {
	publishAcrossAnnouncedOwner(t, "the notice should have had the held attempt abandoned well before the 3s request timeout",
		WithOwnerProbe(10*time.Second))
}

// A notice that itself ends the attempt (it has the held attempt probed
// and abandoned) must still wake the retry: the notice came before the
// retry began to wait for one, and with a backoff of at least 5 s only
// the notice can bring the publish to the new owner within 2 s.
func TestOwnerNoticeThatAbandonsTheAttemptWakesItsRetry(t *testing.T) {
	publishAcrossAnnouncedOwner(t, "the notice that abandoned the attempt should have woken its retry, not left it its backoff",
		WithOwnerProbe(10*time.Second), WithBackoff(10*time.Second, 10*time.Second), WithRetry(0, time.Minute))
}

// publishAcrossAnnouncedOwner has the owner die holding a publish and a
// new owner announce itself 150 ms later (publishAfterOwnerIsReplaced),
// and fails with why unless the publish is confirmed at the new owner,
// once, within 2 s.
func publishAcrossAnnouncedOwner(t *testing.T, why string, opts ...Option) {
	t.Helper()
	pc, took, _, b, err := publishAfterOwnerIsReplaced(t, 150*time.Millisecond, func(url string) *standInOwner {
		b := startOwner(t, url, 2)
		announce(t, b, "h2")
		return b
	}, opts...)
	if err != nil || pc.Epoch != 2 {
		t.Fatalf("publish: %+v %v", pc, err)
	}
	if took > 2*time.Second {
		t.Fatalf("publish took %v; %s", took, why)
	}
	if n := b.pubs.Load(); n != 1 {
		t.Fatalf("the new owner saw %d publishes, want 1", n)
	}
}

// infoThatAnnounces has a stand-in coordinator, at its first stream.info
// request, start a new owner of stream s at epoch 2 that announces itself,
// and then run held before it answers; it answers every request with
// answer, or none with nil. The channel gets the new owner.
func infoThatAnnounces(t *testing.T, url string, held func(), answer any) <-chan *standInOwner {
	t.Helper()
	svc := responderConn(t, url)
	started := make(chan *standInOwner, 1)
	var once sync.Once
	subscribe(t, svc, wire.AdminSubject(wire.VerbStreamInfo), func(m *nats.Msg) {
		once.Do(func() {
			o := startOwner(t, url, 2)
			announce(t, o, "h2")
			started <- o
			held()
		})
		if answer != nil {
			respondJSON(t, m, answer)
		}
	})
	return started
}

// A notice that arrives while the client asks the coordinators about the
// stream (its status check after a failed attempt) wakes the retry as one
// arriving during the backoff does: here the new owner starts and announces
// itself while the stand-in coordinator holds its stream.info answer, and
// the backoff is 10 s, so only the notice can bring the retry within 3 s.
func TestOwnerNoticeDuringTheStatusCheck(t *testing.T) {
	url := startNATS(t)
	// The client is still waiting for the answer when the notice
	// reaches it.
	started := infoThatAnnounces(t, url, func() { time.Sleep(50 * time.Millisecond) },
		wire.StreamInfo{Stream: "s", StreamID: 1, Status: wire.StatusRecovering})
	c := connectClient(t, url, WithBackoff(10*time.Second, 10*time.Second), WithRetry(0, time.Minute))

	pc, err := c.Publish(ctxTimeout(t, 3*time.Second), "s", []byte("announced during the check"))
	if err != nil {
		t.Fatalf("publish whose new owner announced itself during the status check: %v (the retry waited its backoff)", err)
	}
	if pc.Epoch != 2 {
		t.Fatalf("confirm %+v, want epoch 2", pc)
	}
	if n := (<-started).pubs.Load(); n != 1 {
		t.Fatalf("the new owner saw %d publishes, want 1", n)
	}
}

// A notice cuts short the status check it arrives during: the retry
// goes to the announced owner without waiting for the coordinators'
// answer, which here never comes (the question's limit is a second), so
// only a check given up at the notice brings the confirm within 700 ms.
func TestOwnerNoticeCutsTheStatusCheckShort(t *testing.T) {
	url := startNATS(t)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	started := infoThatAnnounces(t, url, func() {
		select { // a coordinator too busy to answer
		case <-release:
		case <-time.After(5 * time.Second):
		}
	}, nil)
	c := connectClient(t, url, WithBackoff(10*time.Second, 10*time.Second), WithRetry(0, time.Minute),
		WithAdminTimeout(10*time.Second))

	began := time.Now()
	pc, err := c.Publish(ctxTimeout(t, 3*time.Second), "s", []byte("announced during an unanswered check"))
	took := time.Since(began)
	if err != nil || pc.Epoch != 2 {
		t.Fatalf("publish: %+v %v", pc, err)
	}
	if took > 700*time.Millisecond {
		t.Fatalf("publish took %v: the retry waited for the coordinators' answer after the new owner's notice", took)
	}
	if n := (<-started).pubs.Load(); n != 1 {
		t.Fatalf("the new owner saw %d publishes, want 1", n)
	}
}

// Many streams waiting for a new owner at once (a mass failover) share one
// wildcard notice subscription instead of one each: subscribing and
// dropping thousands costs every nats-server of the cluster. A notice of
// one of them still wakes its retry at once (the backoff is 10 s).
func TestManyWaitingStreamsShareOneNoticeSubscription(t *testing.T) {
	url := startNATS(t)
	c := connectClient(t, url, WithBackoff(10*time.Second, 10*time.Second), WithRetry(0, time.Minute))
	const n = 3 * sharedNoticesAt
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const stream = "m-150"
	announced := make(chan error, 1)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := fmt.Sprintf("m-%03d", i)
			_, err := c.Publish(ctx, s, []byte("waits"))
			if s == stream {
				announced <- err
			}
		}()
	}
	defer func() { cancel(); wg.Wait() }()
	// Every publish found nobody and waits for its backoff or a notice.
	deadline := time.Now().Add(10 * time.Second)
	for c.Stats().PublishAttempts < n || c.Stats().StatusChecks < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %+v after 10 s", c.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := c.Stats().NoticeSubscribes; got > sharedNoticesAt+1 {
		t.Fatalf("%d streams waiting hold %d notice subscriptions, want at most %d", n, got, sharedNoticesAt+1)
	}

	// One of them gets an owner, which announces itself.
	owner := responderConn(t, url)
	subscribe(t, owner, wire.PublishSubject(stream), func(m *nats.Msg) {
		respondJSON(t, m, wire.PublishConfirm{StreamID: 1, Offset: 0, Epoch: 2, Copies: 2, W: 2})
	})
	data, _ := json.Marshal(wire.OwnerNotice{Stream: stream, StreamID: 1, Epoch: 2, Node: "h2"})
	if err := owner.Publish(wire.OwnerNoticeSubject(stream, "h2"), data); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-announced:
		if err != nil {
			t.Fatalf("publish to the announced stream: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatalf("the publish to %s was not woken by its notice within 3 s (its backoff is 10 s): %+v", stream, c.Stats())
	}
}

// TestNoNATSCallUnderTheNoticesLock: a stream's notice subscription is
// made after the notices' lock is released, so a subscription call that
// waits (for the connection's lock, held by its reader or flusher) holds
// up no other stream's wait, mark or check; every retrying publish takes
// that lock at each attempt.
func TestNoNATSCallUnderTheNoticesLock(t *testing.T) {
	url := startNATS(t)
	c := connectClient(t, url)
	entered, release := make(chan struct{}, 1), make(chan struct{})
	real := c.notices.subscribe
	c.notices.subscribe = func(subject string, cb nats.MsgHandler) (*nats.Subscription, error) {
		if subject == wire.OwnerNoticeWildcard("slow") {
			entered <- struct{}{}
			<-release
		}
		return real(subject, cb)
	}
	slowDone := make(chan func(), 1)
	go func() {
		_, rel := c.awaitOwner("slow")
		slowDone <- rel
	}()
	<-entered
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, rel := c.awaitOwner("other")
		c.noticeMark("other")
		c.noticesHeard("slow")
		rel()
	}()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		close(release)
		t.Fatal("another stream's notice wait was held up behind a subscription call")
	}
	close(release)
	select {
	case rel := <-slowDone:
		rel()
	case <-time.After(3 * time.Second):
		t.Fatal("the slow stream's wait did not return once its subscription went through")
	}
	c.notices.mu.Lock()
	s := c.notices.subs["slow"]
	c.notices.mu.Unlock()
	if s == nil || s.sub == nil {
		t.Fatalf("the slow stream's entry %+v has no subscription once it went through", s)
	}
}

// TestSharedNoticeReachesAStreamWhoseOwnSubscriptionIsNotConfirmed: a
// stream's own subscription, made after the notices' lock was released,
// may reach the server after the shared one; until it is known to hear,
// the shared one's notices still wake the stream, and after, they are
// left to it.
func TestSharedNoticeReachesAStreamWhoseOwnSubscriptionIsNotConfirmed(t *testing.T) {
	c := &Client{watches: map[string]*ownerWatch{}}
	s := &noticeSub{next: make(chan struct{}), sub: &nats.Subscription{Subject: wire.OwnerNoticeWildcard("x")}, heard: &heard{}, users: 1}
	c.notices.subs = map[string]*noticeSub{"x": s}
	notice := &nats.Msg{Subject: wire.OwnerNoticeSubject("x", "h2")}
	c.onSharedNotice(notice)
	if s.seq != 1 {
		t.Fatalf("a shared notice for a stream whose own subscription is not confirmed: %d notices counted, want 1", s.seq)
	}
	s.heard.ok.Store(true)
	c.onSharedNotice(notice)
	if s.seq != 1 {
		t.Fatalf("a shared notice for a stream whose own subscription hears: %d notices counted, want it left to that one", s.seq)
	}
}

// A notice heard after the attempt failed and before the retry began to
// wait (awaitOwner) is not missed: the channel it closed was never the
// retry's, but the stream's notice count moved. The backoff is 10 s, so
// only a retry that sees the notice is confirmed within 3 s.
func TestNoticeBeforeTheWaitBeginsIsNotMissed(t *testing.T) {
	url := startNATS(t)
	c := connectClient(t, url, WithBackoff(10*time.Second, 10*time.Second), WithRetry(0, time.Minute))
	// Another waiter (as the owner watch of an attempt in flight) holds
	// the stream's notice entry, so the notice is counted.
	_, release := c.awaitOwner("s")
	defer release()
	var owner *standInOwner
	var once sync.Once
	c.testHooks.beforeAwait = func() {
		once.Do(func() {
			owner = startOwner(t, url, 2)
			c.onOwnerNotice("s") // heard just now, as from the subscription
		})
	}
	pc, err := c.Publish(ctxTimeout(t, 3*time.Second), "s", []byte("announced before the wait"))
	if err != nil || pc.Epoch != 2 {
		t.Fatalf("publish: %+v %v (the notice heard before the wait began was missed)", pc, err)
	}
	if n := owner.pubs.Load(); n != 1 {
		t.Fatalf("the new owner saw %d publishes, want 1", n)
	}
}

// When the caller's context has ended and a notice is ready at the same
// time, the retry gives up rather than send again: a batched publish sends
// before it looks at the context, so a retry then would send the record
// after its caller gave up. The select of the wait picks among ready cases
// at random, so sixteen publishes each meet both ready at once.
func TestCallerEndBeatsANoticeReadyWithIt(t *testing.T) {
	url := startNATS(t)
	sent := refuser(t, url, wire.PublishBatchSubject("s"), wire.Errorf(wire.CodeSealed, "sealed"))
	c := connectClient(t, url, WithBatching(time.Millisecond, 16, 1<<16), WithBackoff(10*time.Second, 10*time.Second),
		WithRetry(0, time.Minute))
	var cancel atomic.Pointer[context.CancelFunc]
	c.testHooks.beforeWait = func() {
		(*cancel.Load())()
		c.onOwnerNotice("s")
	}
	for i := range int64(16) {
		ctx, cancelCtx := context.WithCancel(context.Background())
		cancel.Store(&cancelCtx)
		_, err := c.Publish(ctx, "s", []byte("given up"))
		cancelCtx()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("publish %d: %v, want the caller's context's end", i, err)
		}
		if n := sent.Load(); n != i+1 {
			t.Fatalf("after publish %d the owner saw %d batches, want %d: a retry went after the caller gave up", i, n, i+1)
		}
	}
}

// A notice heard during an attempt is found after it even when the
// stream's notice entry was dropped meanwhile (idle for noticeLinger while
// the attempt was out, as for a fetch, which no owner watch holds it
// for): the retry's mark holds the dropped entry, whose count moved.
func TestNoticeOnADroppedEntryIsFound(t *testing.T) {
	url := startNATS(t)
	c := connectClient(t, url)
	_, release := c.awaitOwner("s")
	mark := c.noticeMark("s") // an attempt begins
	c.onOwnerNotice("s")      // the new owner announces itself during it
	release()
	deadline := time.Now().Add(noticeLinger + 3*time.Second)
	for c.notices.held.Load() != 0 { // the entry's idle drop
		if time.Now().After(deadline) {
			t.Fatal("the idle notice entry was not dropped")
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, noticed, rel := c.awaitOwnerSince("s", mark)
	defer rel()
	if !noticed {
		t.Fatal("a notice heard during the attempt was missed once its entry was dropped")
	}
	_, noticed, rel2 := c.awaitOwnerSince("s", c.noticeMark("s"))
	defer rel2()
	if noticed {
		t.Fatal("a mark taken after the notice reports it heard since")
	}
}

// A retry that joins a stream's notice entry whose subscription another
// waiter is still making (an owner watch just started) waits for that
// subscription to go out before it asks the coordinators: the new owner
// announces itself while they are asked, and a subscription sent after
// the question would miss the notice, leaving the retry its whole backoff
// (10 s here: only the notice brings it within 3 s). Seen once as a flake
// of TestOwnerNoticeDuringTheStatusCheck under make test's load.
func TestJoinedNoticeEntryWaitsForItsSubscription(t *testing.T) {
	url := startNATS(t)
	started := infoThatAnnounces(t, url, func() { time.Sleep(50 * time.Millisecond) },
		wire.StreamInfo{Stream: "s", StreamID: 1, Status: wire.StatusRecovering})
	c := connectClient(t, url, WithBackoff(10*time.Second, 10*time.Second), WithRetry(0, time.Minute))
	subscribe := c.notices.subscribe
	var calls atomic.Int32
	c.notices.subscribe = func(subject string, cb nats.MsgHandler) (*nats.Subscription, error) {
		if calls.Add(1) == 1 {
			time.Sleep(300 * time.Millisecond) // the first waiter's subscription is slow to go out
		}
		return subscribe(subject, cb)
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		_, release := c.awaitOwner("s")
		defer release()
		<-done
	}()
	for c.notices.held.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	pc, err := c.Publish(ctxTimeout(t, 3*time.Second), "s", []byte("announced while asked"))
	if err != nil || pc.Epoch != 2 {
		t.Fatalf("publish: %+v %v (the retry asked before the joined subscription went out, and missed the notice)", pc, err)
	}
	if n := (<-started).pubs.Load(); n != 1 {
		t.Fatalf("the new owner saw %d publishes, want 1", n)
	}
}
