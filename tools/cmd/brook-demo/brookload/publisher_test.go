package brookload

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/client"
	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/tools/cluster"
)

// fakeOwner plays a stream's owner over real NATS, scripted by the test:
// an in-memory log, a duplicate window that (like the real host's) lives
// in the owner and is lost when the owner changes, and a switch that makes
// it swallow publishes (write them without answering), as an owner killed
// after writing does.
type fakeOwner struct {
	t      *testing.T
	nc     *nats.Conn
	stream string

	mu      sync.Mutex
	epoch   uint64
	log     [][]byte
	window  map[string]uint64 // producer/seq -> offset, of this epoch's owner
	swallow bool
	// unconfirmed is how many records at the log's tail are not yet
	// confirmed (the watermark is that far below the tail).
	unconfirmed int
	subs        []*nats.Subscription
	writes      map[ID]int // how often each record was appended
	keys        map[ID]string
	url         string
}

// noBatching makes the test's client publish each record on its own: the
// fake owner answers single publishes (wire.PublishSubject) only.
var noBatching = client.WithBatching(0, 0, 0)

func newFakeOwner(t *testing.T, url, stream string) *fakeOwner {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return &fakeOwner{t: t, nc: nc, stream: stream, url: url, window: map[string]uint64{}, writes: map[ID]int{}, keys: map[ID]string{}}
}

// serve subscribes as the owner at epoch.
func (f *fakeOwner) serve(epoch uint64) {
	f.mu.Lock()
	f.epoch = epoch
	f.mu.Unlock()
	for subj, h := range map[string]nats.MsgHandler{wire.PublishSubject(f.stream): f.onPub, wire.FetchSubject(f.stream): f.onFetch} {
		s, err := f.nc.Subscribe(subj, h)
		if err != nil {
			f.t.Fatal(err)
		}
		f.subs = append(f.subs, s)
	}
	if err := f.nc.Flush(); err != nil {
		f.t.Fatal(err)
	}
}

// die unsubscribes, as a killed owner's subscriptions vanish.
func (f *fakeOwner) die() {
	for _, s := range f.subs {
		_ = s.Unsubscribe()
	}
	f.subs = nil
	_ = f.nc.Flush()
	f.mu.Lock()
	f.window = map[string]uint64{} // the window does not move with a failover
	f.swallow = false
	f.mu.Unlock()
}

func (f *fakeOwner) setSwallow(on bool) {
	f.mu.Lock()
	f.swallow = on
	f.mu.Unlock()
}

func (f *fakeOwner) written(id ID) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writes[id]
}

func (f *fakeOwner) onPub(m *nats.Msg) {
	key := m.Header.Get(wire.HeaderProducer) + "/" + m.Header.Get(wire.HeaderSequence)
	f.mu.Lock()
	off, dup := f.window[key]
	if !dup {
		off = uint64(len(f.log))
		f.log = append(f.log, append([]byte(nil), m.Data...))
		f.window[key] = off
		if id, ok := Decode(m.Data); ok {
			f.writes[id]++
			f.keys[id] = key
		}
	}
	swallow, epoch := f.swallow, f.epoch
	f.mu.Unlock()
	if swallow {
		return
	}
	body, _ := json.Marshal(wire.PublishConfirm{Offset: off, Epoch: epoch, Copies: 2, Duplicate: dup})
	_ = m.Respond(body)
}

func (f *fakeOwner) onFetch(m *nats.Msg) {
	var req wire.FetchRequest
	if err := json.Unmarshal(m.Data, &req); err != nil {
		f.t.Errorf("fetch request: %v", err)
		return
	}
	f.mu.Lock()
	tail := uint64(len(f.log))
	wm := tail - uint64(min(f.unconfirmed, len(f.log)))
	b := &frame.Batch{Epoch: f.epoch, Tail: tail, Confirmed: wm}
	from := wm
	switch req.Start {
	case "offset":
		from = min(req.Offset, wm)
	case "earliest":
		from = 0
	}
	n := uint64(req.MaxRecords)
	if n == 0 {
		n = 1000
	}
	for off := from; off < wm && off < from+n; off++ {
		b.Records = append(b.Records, frame.Record{Offset: off, Data: f.log[off]})
	}
	b.Next = from + uint64(len(b.Records))
	f.mu.Unlock()
	_ = m.Respond(frame.AppendBatch(nil, b))
}

// setup starts NATS, a fake owner serving at epoch 1 and a publisher.
func setup(t *testing.T, attempt time.Duration) (*fakeOwner, *Publisher, context.Context) {
	t.Helper()
	ns, err := cluster.StartNATS("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	f := newFakeOwner(t, ns.URL(), "s")
	f.serve(1)
	c, err := client.Connect(ctx, ns.URL(), append(ClientOptions(attempt), client.WithName("brookload-test"), noBatching)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	p, err := NewPublisher(ctx, c, PublisherConfig{Stream: "s", Producer: "test", AttemptTimeout: attempt})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return f, p, ctx
}

func publish(ctx context.Context, t *testing.T, p *Publisher, id ID) Confirm {
	t.Helper()
	c, err := p.Publish(ctx, id, Encode(id, 32))
	if err != nil {
		t.Fatalf("publish %v: %v", id, err)
	}
	return c
}

// A publish the killed owner wrote (and the promoted copy holds) without
// answering is found in the new owner's log, not written a second time.
func TestUnansweredPublishFoundInNewOwnersLog(t *testing.T) {
	f, p, ctx := setup(t, 10*time.Second)
	for seq := range uint64(5) {
		publish(ctx, t, p, ID{Pub: 1, Seq: seq})
	}
	f.setSwallow(true)
	lost := ID{Pub: 2, Seq: 0}
	type result struct {
		c   Confirm
		err error
	}
	done := make(chan result, 1)
	began := time.Now()
	go func() {
		c, err := p.Publish(ctx, lost, Encode(lost, 32))
		done <- result{c, err}
	}()
	// Wait until the owner wrote it, then fail over: the same log (the
	// promoted copy held the record) under a new owner without its window.
	for f.written(lost) == 0 {
		time.Sleep(time.Millisecond)
	}
	f.die()
	time.Sleep(150 * time.Millisecond) // a moment with no owner at all
	f.serve(2)
	r := <-done
	if r.err != nil {
		t.Fatalf("publish: %v", r.err)
	}
	if !r.c.Resolved || r.c.Offset != 5 || r.c.Epoch != 2 {
		t.Errorf("confirm %+v, want resolved at offset 5, epoch 2", r.c)
	}
	if n := f.written(lost); n != 1 {
		t.Errorf("record written %d times, want once", n)
	}
	f.mu.Lock()
	key := f.keys[lost]
	f.mu.Unlock()
	if key != "test-2/0" {
		t.Errorf("publish carried producer/sequence %q, want test-2/0", key)
	}
	// The probe ended the attempt, not the 10 s attempt timeout.
	if took := time.Since(began); took > 3*time.Second {
		t.Errorf("publish took %v: the dead owner's attempt was not abandoned", took)
	}
	st := p.Stats()
	if st.Resolved != 1 || st.Abandoned < 1 || st.Retried != 0 {
		t.Errorf("stats %+v, want 1 resolved, >=1 abandoned, 0 retried", st)
	}
	if c := publish(ctx, t, p, ID{Pub: 1, Seq: 5}); c.Offset != 6 || c.Resolved {
		t.Errorf("next publish %+v, want offset 6 written plainly", c)
	}
}

// A publish the dead owner never wrote is sent again to the new owner and
// written once.
func TestUnansweredPublishNotInLogIsRetried(t *testing.T) {
	f, p, ctx := setup(t, 10*time.Second)
	publish(ctx, t, p, ID{Pub: 1, Seq: 0})
	f.die() // dead before the publish: nobody answers, nothing is written
	id := ID{Pub: 1, Seq: 1}
	done := make(chan error, 1)
	go func() {
		c, err := p.Publish(ctx, id, Encode(id, 32))
		if err == nil && (c.Resolved || c.Offset != 1 || c.Epoch != 2) {
			err = fmt.Errorf("confirm %+v, want offset 1 at epoch 2, written", c)
		}
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	f.serve(2)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := f.written(id); n != 1 {
		t.Errorf("record written %d times, want once", n)
	}
}

// An attempt that times out while the same owner still serves is sent
// again to it, whose window answers with the first write's offset.
func TestTimeoutOnSameOwnerRetriesIntoItsWindow(t *testing.T) {
	f, p, ctx := setup(t, 300*time.Millisecond)
	publish(ctx, t, p, ID{Pub: 1, Seq: 0})
	f.setSwallow(true)
	id := ID{Pub: 1, Seq: 1}
	go func() {
		for f.written(id) == 0 {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(400 * time.Millisecond) // past the attempt timeout
		f.setSwallow(false)
	}()
	c := publish(ctx, t, p, id)
	if c.Offset != 1 || c.Resolved || !c.Duplicate {
		t.Errorf("confirm %+v, want the window's answer: offset 1, duplicate", c)
	}
	if n := f.written(id); n != 1 {
		t.Errorf("record written %d times, want once", n)
	}
	if st := p.Stats(); st.Retried < 1 || st.Resolved != 0 {
		t.Errorf("stats %+v, want a retry and nothing resolved", st)
	}
}

// Records of an earlier run (same publisher and sequence) below the tail
// the publisher started at are never taken for its own.
func TestEarlierRunsRecordsAreNotOurs(t *testing.T) {
	f, _, ctx := setup(t, 10*time.Second)
	old := ID{Pub: 3, Seq: 0}
	f.mu.Lock()
	f.log = append(f.log, Encode(old, 32))
	f.mu.Unlock()
	// A new publisher on the same stream starts past that record.
	c, err := client.Connect(ctx, f.url, append(ClientOptions(10*time.Second), noBatching)...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}()
	p, err := NewPublisher(ctx, c, PublisherConfig{Stream: "s", Producer: "run2"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	f.die()
	done := make(chan error, 1)
	go func() {
		c, err := p.Publish(ctx, old, Encode(old, 32))
		if err == nil && (c.Resolved || c.Offset != 1) {
			err = fmt.Errorf("confirm %+v: took the earlier run's record at offset 0 for ours", c)
		}
		done <- err
	}()
	time.Sleep(200 * time.Millisecond)
	f.serve(2)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A publisher that starts while the owner's tail runs ahead of its
// watermark takes the watermark as its floor, not the tail: a failover may
// cut the records in between, and the publisher's own records then land
// there. Before the fix the floor was the tail (8), so the unanswered
// record written at 5 after the failover was not found and was written a
// second time.
func TestFloorIsTheWatermarkNotTheTail(t *testing.T) {
	ns, err := cluster.StartNATS("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	f := newFakeOwner(t, ns.URL(), "s")
	for i := range 8 {
		f.log = append(f.log, Encode(ID{Pub: 9, Seq: uint64(i)}, 32))
	}
	f.unconfirmed = 3 // tail 8, watermark 5
	f.serve(1)
	c, err := client.Connect(ctx, ns.URL(), append(ClientOptions(10*time.Second), noBatching)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	p, err := NewPublisher(ctx, c, PublisherConfig{Stream: "s", Producer: "test", AttemptTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)

	// The owner dies; the copy promoted at epoch 2 held only the 5
	// confirmed records. It writes the next publish and dies without
	// answering; the owner at epoch 3 holds what it wrote.
	f.die()
	f.mu.Lock()
	f.log, f.unconfirmed = f.log[:5], 0
	f.mu.Unlock()
	f.serve(2)
	f.setSwallow(true)
	lost := ID{Pub: 1, Seq: 0}
	done := make(chan error, 1)
	go func() {
		c, err := p.Publish(ctx, lost, Encode(lost, 32))
		if err == nil && c.Offset != 5 {
			err = fmt.Errorf("confirm %+v, want offset 5", c)
		}
		done <- err
	}()
	for f.written(lost) == 0 {
		time.Sleep(time.Millisecond)
	}
	f.die()
	time.Sleep(100 * time.Millisecond)
	f.serve(3)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := f.written(lost); n != 1 {
		t.Fatalf("record written %d times, want once: the publisher looked for it only past the old owner's tail", n)
	}
}

// Attempts begun together share a cohort; a probe's cut starts a new one,
// so that abandoning what was sent before the probe leaves later attempts
// alone; a cohort ends once its attempts have and it takes no more.
func TestAttemptCohorts(t *testing.T) {
	p := &Publisher{cfg: PublisherConfig{AttemptTimeout: time.Minute}, cohorts: map[*cohort]struct{}{}}
	ctx := context.Background()
	c1, ctx1 := p.begin(ctx)
	c2, _ := p.begin(ctx)
	if c1 != c2 || c1.n != 2 {
		t.Fatalf("two attempts begun together: cohorts %p and %p (n %d), want one of two", c1, c2, c1.n)
	}
	other, cancel := context.WithCancel(ctx)
	defer cancel()
	if c, _ := p.begin(other); c == c1 {
		t.Fatal("an attempt under another context joined the cohort")
	} else {
		p.end(c)
	}
	at := p.cutCohort()
	c3, ctx3 := p.begin(ctx)
	if c3 == c1 {
		t.Fatal("an attempt begun after the cut joined the cohort before it")
	}
	if n := p.abandon(func(c *cohort) bool { return c.opened.Before(at) }); n != 2 {
		t.Fatalf("abandoned %d attempts, want the 2 begun before the cut", n)
	}
	if context.Cause(ctx1) != errOwnerLost || !c1.stale.Load() {
		t.Fatalf("abandoned cohort: cause %v, stale %v", context.Cause(ctx1), c1.stale.Load())
	}
	if ctx3.Err() != nil || c3.stale.Load() {
		t.Fatal("the attempt begun after the cut was abandoned")
	}
	p.end(c1)
	p.end(c1)
	if _, held := p.cohorts[c1]; held {
		t.Fatal("a cohort with no attempt left and closed is still held")
	}
	p.end(c3)
	if _, held := p.cohorts[c3]; !held || p.cur != c3 {
		t.Fatal("the current cohort was ended when its attempts had")
	}
	p.epoch++
	cE, _ := p.begin(ctx)
	if cE == c3 {
		t.Fatal("an attempt at a newer epoch joined a cohort of an older one")
	}
	if _, held := p.cohorts[c3]; held {
		t.Fatal("a closed cohort with no attempt is still held")
	}
	time.Sleep(cohortSpan)
	if c, _ := p.begin(ctx); c == cE {
		t.Fatal("a cohort took an attempt past its span")
	}
	if len(p.cohorts) != 2 {
		t.Fatalf("%d cohorts held, want 2 (the previous one, outstanding, and the current)", len(p.cohorts))
	}
}

// uncomparable is a context that == cannot compare.
type uncomparable struct {
	context.Context
	tags []string
}

func TestSameContextNeverPanics(t *testing.T) {
	bg := context.Background()
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	u := uncomparable{Context: bg, tags: []string{"a"}}
	for _, c := range []struct {
		a, b context.Context
		want bool
	}{
		{ctx, ctx, true},
		{bg, context.Background(), true},
		{ctx, bg, false},
		{u, u, false},
		{context.WithoutCancel(u), context.WithoutCancel(u), false},
	} {
		if got := sameContext(c.a, c.b); got != c.want {
			t.Errorf("sameContext(%T, %T) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}
