package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/wire"
)

// batchOwner is a stand-in owner of stream "x" on the batch subject: it
// numbers records from 0 in arrival order, suppresses repeats of a
// producer sequence (answering the first offset), and keeps every batch
// it got. hold, if set, is called before each reply and may delay it.
type batchOwner struct {
	t  *testing.T
	nc *nats.Conn

	mu      sync.Mutex
	next    uint64
	seen    map[string]uint64 // producer/seq -> offset
	batches [][]frame.PubRecord
	got     chan int // batch sizes, as they arrive
	// answer, if set, decides a batch's reply: nil confirms it.
	answer func(n int, b *frame.PubBatch) *wire.Error
	// refuse, if set, names the records refused on their own with code.
	refuse func(r frame.PubRecord) string
	// hold, if set, runs before batch n's reply is sent, on its own
	// goroutine, so that later batches are served meanwhile.
	hold func(n int)
}

func newBatchOwner(t *testing.T, url string) *batchOwner {
	o := &batchOwner{t: t, nc: responderConn(t, url), seen: map[string]uint64{}, got: make(chan int, 1024)}
	subscribe(t, o.nc, wire.PublishBatchSubject("x"), o.serve)
	return o
}

func (o *batchOwner) serve(m *nats.Msg) {
	b, err := frame.DecodePubBatch(m.Data)
	if err != nil {
		respondError(o.t, m, wire.Errorf(wire.CodeBadRequest, "%v", err))
		return
	}
	o.mu.Lock()
	n := len(o.batches)
	o.batches = append(o.batches, b.Records)
	answer, refuse, hold := o.answer, o.refuse, o.hold
	o.mu.Unlock()
	o.got <- len(b.Records)
	if answer != nil {
		if e := answer(n, b); e != nil {
			respondError(o.t, m, e)
			return
		}
	}
	o.mu.Lock()
	r := &frame.PubReply{Copies: 2, W: 2}
	for _, rec := range b.Records {
		if refuse != nil {
			if code := refuse(rec); code != "" {
				r.Results = append(r.Results, frame.PubResult{Code: code})
				continue
			}
		}
		key := rec.Producer + "/" + strconv.FormatUint(rec.Seq, 10)
		if off, ok := o.seen[key]; ok && rec.Producer != "" {
			r.Results = append(r.Results, frame.PubResult{Offset: off, Duplicate: true})
			continue
		}
		if rec.Producer != "" {
			o.seen[key] = o.next
		}
		r.Results = append(r.Results, frame.PubResult{Offset: o.next})
		o.next++
	}
	o.mu.Unlock()
	reply := nats.NewMsg(m.Reply)
	reply.Header.Set(wire.HeaderStreamID, "1")
	reply.Header.Set(wire.HeaderEpoch, "1")
	reply.Data = frame.AppendPubReply(nil, r)
	send := func() {
		if err := m.RespondMsg(reply); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			o.t.Errorf("respond: %v", err)
		}
	}
	if hold == nil {
		send()
		return
	}
	go func() {
		hold(n)
		send()
	}()
}

// holdBatch keeps the reply to batch n (0 the first) until the returned
// release is called.
func (o *batchOwner) holdBatch(n int) (release func()) {
	ch := make(chan struct{})
	o.hold = func(got int) {
		if got == n {
			<-ch
		}
	}
	return func() { close(ch) }
}

// Publishes share batches: the open batch goes once it holds more records
// than are in flight, not at its linger (a minute here), and not while
// the records in flight, which will be released and may come back, are at
// least as many as it holds; a Flush sends it at once. Each record gets
// its own confirm at its own offset.
func TestBatchGoesOnceLargerThanInFlight(t *testing.T) {
	url := startNATS(t)
	o := newBatchOwner(t, url)
	release := o.holdBatch(0)
	c := connectClient(t, url, WithBatching(time.Minute, 0, 0))
	ctx := ctxTimeout(t, 10*time.Second)
	p, err := c.NewAsyncPublisher("x", AsyncConfig{Window: 16})
	if err != nil {
		t.Fatal(err)
	}
	var futures []*Future
	publish := func(i int) {
		t.Helper()
		f, err := p.PublishAsync(ctx, fmt.Appendf(nil, "r%d", i))
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
	}
	nextBatch := func(want int, what string) {
		t.Helper()
		select {
		case got := <-o.got:
			if got != want {
				t.Fatalf("%s: a batch of %d records, want %d", what, got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no batch in 5 s (the linger is a minute)", what)
		}
	}
	noBatch := func(what string) {
		t.Helper()
		select {
		case got := <-o.got:
			t.Fatalf("%s: a batch of %d records went", what, got)
		case <-time.After(50 * time.Millisecond):
		}
	}
	wait := func(i int) {
		t.Helper()
		if _, err := futures[i].Wait(ctx); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	publish(0)
	nextBatch(1, "nothing in flight") // held by the owner until release
	publish(1)
	noBatch("one record open, one in flight")
	publish(2)
	nextBatch(2, "two open, one in flight") // answered at once
	wait(1)
	wait(2)
	release()
	wait(0)
	// Nothing in flight; the replies released three records, and their
	// publishers have not come back.
	publish(3)
	publish(4)
	noBatch("nothing in flight, two of three released records back")
	publish(5)
	nextBatch(3, "all three back")
	publish(6)
	noBatch("one open, three in flight or answered and not back")
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	nextBatch(1, "Flush")
	seen := map[uint64]bool{}
	for i, f := range futures {
		pc, err := f.Result()
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if seen[pc.Offset] || pc.Offset >= uint64(len(futures)) {
			t.Fatalf("offset %d twice or out of range", pc.Offset)
		}
		seen[pc.Offset] = true
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// Closed-loop publishers, each publishing again once confirmed, travel
// together: a reply releases its batch's publishers, and the open batch
// waits until all of them are back rather than sending the first one
// alone (which split them into a batch of one and one of the rest, taking
// turns: twice the batches for the same records). Nor does it wait for
// the linger.
func TestBatchWaitsForTheReleasedPublishers(t *testing.T) {
	url := startNATS(t)
	sizes := make(chan int, 4096)
	answerLater(t, responderConn(t, url), func(b *frame.PubBatch) time.Duration {
		sizes <- len(b.Records)
		return 2 * time.Millisecond
	})
	const linger, publishers, run = 50 * time.Millisecond, 16, 600 * time.Millisecond
	c := connectClient(t, url, WithBatching(linger, 0, 0))
	publishClosedLoop(t, c, ctxTimeout(t, 20*time.Second), publishers, run)
	close(sizes)
	var all []int
	for n := range sizes {
		all = append(all, n)
	}
	// The publishers start apart and merge within the first batches; the
	// last ones stop at different times.
	const settle = 8
	if len(all) < 2*int(run/linger) {
		t.Fatalf("%d batches in %v: about as many as the linger (%v) alone would send", len(all), run, linger)
	}
	full := 0
	for _, n := range all[settle : len(all)-settle] {
		if n == publishers {
			full++
		}
	}
	if mid := len(all) - 2*settle; full < mid*9/10 {
		t.Fatalf("%d of %d batches held all %d publishers (sizes %v)", full, mid, publishers, all)
	}
}

// No record waits longer than the linger: while a batch is in flight (its
// reply held until then), a later publish goes out in the next batch after
// its linger, not when the first batch is answered.
func TestBatchLingerFlushes(t *testing.T) {
	url := startNATS(t)
	o := newBatchOwner(t, url)
	second := make(chan struct{})
	o.hold = func(n int) {
		switch n {
		case 0:
			select {
			case <-second:
			case <-time.After(time.Second): // 50 lingers, half the request timeout
				t.Errorf("the second batch did not come while the first was in flight")
			}
		case 1:
			close(second)
		}
	}
	c := connectClient(t, url, WithBatching(20*time.Millisecond, 0, 0))
	ctx := ctxTimeout(t, 10*time.Second)
	first := make(chan error, 1)
	go func() {
		_, err := c.Publish(ctx, "x", []byte("a"))
		first <- err
	}()
	<-o.got
	if _, err := c.Publish(ctx, "x", []byte("b")); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}

// A batch is cut at maxRecords, and an async publisher's window fills
// batches in call order: every future is confirmed at its own offset, in
// order.
func TestBatchAsyncSizesAndOrder(t *testing.T) {
	url := startNATS(t)
	o := newBatchOwner(t, url)
	c := connectClient(t, url, WithBatching(5*time.Millisecond, 8, 0))
	ctx := ctxTimeout(t, 20*time.Second)
	p, err := c.NewAsyncPublisher("x", AsyncConfig{Window: 64})
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	futs := make([]*Future, n)
	for i := range n {
		if futs[i], err = p.PublishAsync(ctx, fmt.Appendf(nil, "r%d", i), WithProducer("p", uint64(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for i, f := range futs {
		pc, err := f.Result()
		if err != nil || pc.Offset != uint64(i) || pc.StreamID != 1 || pc.Epoch != 1 || pc.W != 2 {
			t.Fatalf("future %d: %+v %v, want offset %d", i, pc, err, i)
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	multi := 0
	for _, b := range o.batches {
		if len(b) > 8 {
			t.Fatalf("batch of %d records, over 8", len(b))
		}
		if len(b) > 1 {
			multi++
		}
	}
	if multi == 0 {
		t.Fatalf("no batch held more than one record: %d batches", len(o.batches))
	}
}

// A batch refused whole with a retryable code is retried record by record
// through later batches, each record with its own producer sequence, so
// the owner's suppression keeps every record once; a record refused on its
// own fails with its code and is not retried.
func TestBatchRetriesAndRefusals(t *testing.T) {
	url := startNATS(t)
	o := newBatchOwner(t, url)
	o.answer = func(n int, _ *frame.PubBatch) *wire.Error {
		if n < 2 {
			return wire.Errorf(wire.CodeNotOwner, "moving")
		}
		return nil
	}
	o.refuse = func(r frame.PubRecord) string {
		if string(r.Data) == "too big" {
			return wire.CodePayloadTooLarge
		}
		return ""
	}
	c := connectClient(t, url, WithBatching(5*time.Millisecond, 0, 0))
	ctx := ctxTimeout(t, 10*time.Second)
	var wg sync.WaitGroup
	errs := make([]error, 6)
	pcs := make([]wire.PublishConfirm, 6)
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			data := fmt.Appendf(nil, "r%d", i)
			if i == 5 {
				data = []byte("too big")
			}
			pcs[i], errs[i] = c.Publish(ctx, "x", data, WithProducer("p", uint64(i)))
		}()
	}
	wg.Wait()
	offsets := map[uint64]bool{}
	for i := range 5 {
		if errs[i] != nil || offsets[pcs[i].Offset] {
			t.Fatalf("record %d: %+v %v", i, pcs[i], errs[i])
		}
		offsets[pcs[i].Offset] = true
	}
	if wire.CodeOf(errs[5]) != wire.CodePayloadTooLarge {
		t.Fatalf("refused record: %v, want %s", errs[5], wire.CodePayloadTooLarge)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.next != 5 {
		t.Fatalf("owner wrote %d records, want 5", o.next)
	}
	for _, b := range o.batches {
		for _, r := range b {
			if want := fmt.Sprintf("r%d", r.Seq); r.Producer != "p" || (r.Seq < 5 && string(r.Data) != want) {
				t.Fatalf("record %+v resent with another producer sequence", r)
			}
		}
	}
}

// With batching off, and for a record too large for a batch, publishes
// use the single publish subject.
func TestBatchOffAndOversizeUseSinglePublish(t *testing.T) {
	url := startNATS(t)
	o := newBatchOwner(t, url)
	singles := make(chan int, 10)
	rn := responderConn(t, url)
	subscribe(t, rn, wire.PublishSubject("x"), func(m *nats.Msg) {
		singles <- len(m.Data)
		respondJSON(t, m, wire.PublishConfirm{StreamID: 1, Offset: 9, Epoch: 1, Copies: 1, W: 1})
	})
	ctx := ctxTimeout(t, 10*time.Second)
	off := connectClient(t, url)
	if _, err := off.Publish(ctx, "x", []byte("a")); err != nil {
		t.Fatal(err)
	}
	on := connectClient(t, url, WithBatching(time.Millisecond, 0, 100))
	if _, err := on.Publish(ctx, "x", make([]byte, 200)); err != nil {
		t.Fatal(err)
	}
	if _, err := on.Publish(ctx, "x", []byte("small")); err != nil {
		t.Fatal(err)
	}
	if a, b := <-singles, <-singles; a != 1 || b != 200 {
		t.Fatalf("single publishes of %d and %d bytes, want 1 and 200", a, b)
	}
	if got := <-o.got; got != 1 {
		t.Fatalf("batch of %d, want 1", got)
	}
}

// Close sends the open batch and refuses later publishes.
func TestBatchClose(t *testing.T) {
	url := startNATS(t)
	newBatchOwner(t, url)
	c := connectClient(t, url, WithBatching(time.Millisecond, 0, 0))
	ctx := ctxTimeout(t, 10*time.Second)
	if _, err := c.Publish(ctx, "x", []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(context.Background(), "x", []byte("b")); !errors.Is(err, ErrClosed) {
		t.Fatalf("publish after close: %v, want ErrClosed", err)
	}
}

// Batches keep the order of the records across the client's pinning of the
// stream: once the first confirm pins the stream to its id, a later record
// (naming the id) does not overtake an earlier one still in the open batch
// (naming none).
func TestBatchOrderAcrossPinning(t *testing.T) {
	url := startNATS(t)
	o := newBatchOwner(t, url)
	release := []chan struct{}{make(chan struct{}), make(chan struct{})}
	o.hold = func(n int) {
		if n < len(release) {
			<-release[n]
		}
	}
	c := connectClient(t, url, WithBatching(time.Minute, 2, 0))
	ctx := ctxTimeout(t, 10*time.Second)
	p, err := c.NewAsyncPublisher("x", AsyncConfig{Window: 16})
	if err != nil {
		t.Fatal(err)
	}
	publish := func(i int) *Future {
		t.Helper()
		f, err := p.PublishAsync(ctx, fmt.Appendf(nil, "r%d", i))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	first := publish(0) // alone: nothing in flight
	<-o.got
	publish(1)
	publish(2) // full: the second batch goes
	<-o.got
	publish(3) // open: fewer records than in flight; goes on Close (Flush)
	close(release[0])
	<-first.Done()
	if got := c.idFor("x", 0); got != 1 {
		t.Fatalf("pinned to %d after the first confirm, want 1", got)
	}
	publish(4)
	close(release[1])
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	var order []string
	for _, b := range o.batches {
		for _, r := range b {
			order = append(order, string(r.Data))
		}
	}
	if fmt.Sprint(order) != "[r0 r1 r2 r3 r4]" {
		t.Fatalf("records reached the owner in the order %v", order)
	}
}

// Close on a Client made by New (the connection is the caller's and stays
// open) leaves none of its subscriptions behind: a batch still in flight
// gets its reply first, and the batcher's reply subscription ends with it.
func TestBatchCloseOnSharedConnUnsubscribes(t *testing.T) {
	url := startNATS(t)
	o := newBatchOwner(t, url)
	release := o.holdBatch(1)
	nc := responderConn(t, url)
	before := nc.NumSubscriptions()
	c := New(nc, WithBatching(time.Millisecond, 0, 0), WithRequestTimeout(5*time.Second),
		WithLogger(slog.New(slog.DiscardHandler)))
	ctx := ctxTimeout(t, 10*time.Second)
	if _, err := c.Publish(ctx, "x", []byte("a")); err != nil {
		t.Fatal(err)
	}
	held := make(chan error, 1)
	go func() {
		_, err := c.Publish(ctx, "x", []byte("b"))
		held <- err
	}()
	<-o.got
	<-o.got // the held batch arrived: its flight is in the air
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if nc.IsClosed() {
		t.Fatal("Close closed a connection it did not make")
	}
	release()
	if err := <-held; err != nil {
		t.Fatalf("the batch in flight at Close: %v, want its confirm", err)
	}
	for deadline := time.Now().Add(5 * time.Second); nc.NumSubscriptions() != before; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d subscriptions after Close, want %d as before New", nc.NumSubscriptions(), before)
		}
	}
}

// Closed-loop publishers (each publishes its next record once the last is
// confirmed) do not wait for the linger while another batch stays in
// flight: once all of them are back, their batch holds more records than
// are in flight and goes at once. Here one record is held by the owner for the
// whole run, so a batch is always in flight, and the others' batches are
// answered 3 ms after they come; waiting for the 30 ms linger, 16
// publishers would be confirmed about 16 times per linger.
func TestBatchClosedLoopSkipsTheLinger(t *testing.T) {
	url := startNATS(t)
	answerLater(t, responderConn(t, url), func(b *frame.PubBatch) time.Duration {
		if len(b.Records) == 1 && string(b.Records[0].Data) == "slow" {
			return 1800 * time.Millisecond // below the request timeout
		}
		return 3 * time.Millisecond
	})
	const linger = 30 * time.Millisecond
	c := connectClient(t, url, WithBatching(linger, 0, 0))
	ctx := ctxTimeout(t, 20*time.Second)
	slow := make(chan error, 1)
	go func() {
		_, err := c.Publish(ctx, "x", []byte("slow"))
		slow <- err
	}()
	time.Sleep(20 * time.Millisecond)
	const publishers, run = 16, 1200 * time.Millisecond
	confirmed := publishClosedLoop(t, c, ctx, publishers, run)
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	// Waiting for the linger: about publishers per linger. Going once
	// they are back (dueLocked): several times that.
	lingerBound := int64(publishers * (run/linger + 2))
	t.Logf("%d records confirmed in %v (the linger alone allows about %d)", confirmed, run, lingerBound)
	if got := confirmed; got < lingerBound*3/2 {
		t.Fatalf("%d records confirmed in %v, want over %d (the linger alone allows about %d)", got, run, lingerBound*3/2, lingerBound)
	}
}

// answerLater serves publish batches to stream "x" on nc: it numbers their
// records from 0 in arrival order and answers each batch after delay(b).
func answerLater(t *testing.T, nc *nats.Conn, delay func(b *frame.PubBatch) time.Duration) {
	var next atomic.Uint64
	subscribe(t, nc, wire.PublishBatchSubject("x"), func(m *nats.Msg) {
		b, err := frame.DecodePubBatch(m.Data)
		if err != nil {
			t.Error(err)
			return
		}
		r := &frame.PubReply{Copies: 2, W: 2}
		for range b.Records {
			r.Results = append(r.Results, frame.PubResult{Offset: next.Add(1) - 1})
		}
		time.AfterFunc(delay(b), func() {
			reply := nats.NewMsg(m.Reply)
			reply.Header.Set(wire.HeaderStreamID, "1")
			reply.Header.Set(wire.HeaderEpoch, "1")
			reply.Data = frame.AppendPubReply(nil, r)
			_ = nc.PublishMsg(reply)
		})
	})
}

// publishClosedLoop runs publishers goroutines that each publish to "x"
// again once confirmed, for run, and returns how many were confirmed.
func publishClosedLoop(t *testing.T, c *Client, ctx context.Context, publishers int, run time.Duration) int64 {
	var confirmed atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(run)
	for p := range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(end); i++ {
				if _, err := c.Publish(ctx, "x", fmt.Appendf(nil, "p%d-%d", p, i)); err != nil {
					t.Errorf("publish: %v", err)
					return
				}
				confirmed.Add(1)
			}
		}()
	}
	wg.Wait()
	return confirmed.Load()
}
