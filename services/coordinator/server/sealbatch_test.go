package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/internal/testutil"
	"github.com/brook-streams/brook/services/coordinator/recovery"
)

// heldHost answers brook.host.<node>.seals: it records each batch and
// answers it once the test releases it (one release per batch); a seal of
// stream "bad" is answered not_found.
type heldHost struct {
	t       *testing.T
	release chan struct{}
	mu      sync.Mutex
	batches [][]string // the streams of each batch, in arrival order
}

func newHeldHost(t *testing.T, nc *nats.Conn, node string) *heldHost {
	h := &heldHost{t: t, release: make(chan struct{}, 100)}
	sub, err := nc.Subscribe(wire.SealBatchSubject(node), func(m *nats.Msg) {
		var b wire.SealBatch
		if err := json.Unmarshal(m.Data, &b); err != nil {
			t.Errorf("decode batch: %v", err)
			return
		}
		var streams []string
		out := wire.SealBatchReply{}
		for i, s := range b.Seals {
			streams = append(streams, s.Stream)
			if s.Stream == "bad" {
				out.Replies = append(out.Replies, wire.SealResult{Error: wire.Errorf(wire.CodeNotFound, "no copy of bad")})
				continue
			}
			out.Replies = append(out.Replies, wire.SealResult{Reply: &wire.SealReply{Node: node, Stream: s.Stream,
				FenceEpoch: s.FenceEpoch, Transition: s.Transition, RecordTail: uint64(100 + i)}})
		}
		h.mu.Lock()
		h.batches = append(h.batches, streams)
		h.mu.Unlock()
		go func() {
			<-h.release
			data, _ := json.Marshal(out)
			_ = m.Respond(data)
		}()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return h
}

// waitBatches waits until the host has received n batches and returns them.
func (h *heldHost) waitBatches(n int) [][]string {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		h.mu.Lock()
		got := append([][]string(nil), h.batches...)
		h.mu.Unlock()
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("host got %d batches, want %d: %v", len(got), n, got)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func newTestBatcher(t *testing.T) (*sealBatcher, *nats.Conn) {
	t.Helper()
	ns := testutil.StartNATS(t)
	nc, err := nats.Connect(ns.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	b := newSealBatcher(nc, slog.New(slog.DiscardHandler), nil)
	b.maxSenders = 1 // one batch in flight per node unless a test says more
	t.Cleanup(b.close)
	return b, nc
}

// waitQueued waits until n seals wait in node's queue.
func waitQueued(t *testing.T, b *sealBatcher, node string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		b.mu.Lock()
		got := 0
		if q := b.nodes[node]; q != nil {
			got = len(q.waiting)
		}
		b.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d seals queued for %s, want %d", got, node, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type sealed struct {
	stream string
	reply  *wire.SealReply
	err    error
}

func sealAsync(ctx context.Context, b *sealBatcher, node, stream string, budget time.Duration, out chan<- sealed) {
	go func() {
		r, err := b.Seal(ctx, node, wire.SealRequest{Stream: stream, StreamID: 1, FenceEpoch: 2, Transition: 1}, budget)
		out <- sealed{stream, r, err}
	}()
}

// TestSealBatcherGathersAndDemuxes: a seal for an idle node goes alone;
// the seals asked while it is in flight go together as the next batch,
// each caller gets its own answer (an error entry as its *wire.Error),
// and a node with no host fails at once.
func TestSealBatcherGathersAndDemuxes(t *testing.T) {
	b, nc := newTestBatcher(t)
	h := newHeldHost(t, nc, "n1")
	ctx := context.Background()
	out := make(chan sealed, 10)
	sealAsync(ctx, b, "n1", "first", 0, out)
	h.waitBatches(1)
	streams := []string{"a", "bad", "c", "d"}
	for _, s := range streams {
		sealAsync(ctx, b, "n1", s, 0, out)
	}
	waitQueued(t, b, "n1", len(streams))
	h.release <- struct{}{}
	h.release <- struct{}{}
	got := map[string]sealed{}
	for range 1 + len(streams) {
		r := <-out
		got[r.stream] = r
	}
	batches := h.waitBatches(2)
	if len(batches) != 2 || len(batches[0]) != 1 || len(batches[1]) != len(streams) {
		t.Fatalf("batches %v, want [first] then the 4 others together", batches)
	}
	for _, s := range append([]string{"first"}, streams...) {
		r := got[s]
		if s == "bad" {
			var we *wire.Error
			if !errors.As(r.err, &we) || we.Code != wire.CodeNotFound || r.reply != nil {
				t.Errorf("bad: %+v %v, want not_found", r.reply, r.err)
			}
			continue
		}
		if r.err != nil || r.reply == nil || r.reply.Stream != s {
			t.Errorf("%s: %+v %v, want its own reply", s, r.reply, r.err)
		}
	}
	if _, err := b.Seal(ctx, "nobody", wire.SealRequest{Stream: "x", FenceEpoch: 2}, 0); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("seal on a node without a host: %v, want no responders", err)
	}
}

// TestSealBatcherSendersInFlight: with two batches allowed in flight, a
// seal asked while one batch is held goes at once as a second; the next
// ones queue until a batch is answered, then go together.
func TestSealBatcherSendersInFlight(t *testing.T) {
	b, nc := newTestBatcher(t)
	b.maxSenders = 2
	h := newHeldHost(t, nc, "n1")
	out := make(chan sealed, 10)
	ctx := context.Background()
	sealAsync(ctx, b, "n1", "a", 0, out)
	h.waitBatches(1)
	sealAsync(ctx, b, "n1", "b", 0, out)
	h.waitBatches(2)
	sealAsync(ctx, b, "n1", "c", 0, out)
	sealAsync(ctx, b, "n1", "d", 0, out)
	waitQueued(t, b, "n1", 2)
	for range 3 {
		h.release <- struct{}{}
	}
	for range 4 {
		if r := <-out; r.err != nil || r.reply == nil || r.reply.Stream != r.stream {
			t.Errorf("%s: %+v %v", r.stream, r.reply, r.err)
		}
	}
	if batches := h.waitBatches(3); len(batches) != 3 || len(batches[2]) != 2 {
		t.Errorf("batches %v, want [a] [b] [c d]", batches)
	}
	waitQueued(t, b, "n1", 0)
}

// TestSealBatcherCallerLeaves: a caller whose context ends gets its
// error at once; its answer, arriving later, is dropped without blocking
// the batcher, and a caller gone before its batch is sent is left out of
// it.
func TestSealBatcherCallerLeaves(t *testing.T) {
	b, nc := newTestBatcher(t)
	h := newHeldHost(t, nc, "n1")
	out := make(chan sealed, 10)
	ctx, cancel := context.WithCancel(context.Background())
	sealAsync(ctx, b, "n1", "left-in-flight", 0, out)
	h.waitBatches(1)
	qctx, qcancel := context.WithCancel(context.Background())
	sealAsync(qctx, b, "n1", "left-queued", 0, out)
	sealAsync(context.Background(), b, "n1", "stays", 0, out)
	waitQueued(t, b, "n1", 2)
	cancel()
	qcancel()
	for range 2 {
		if r := <-out; !errors.Is(r.err, context.Canceled) || r.reply != nil {
			t.Errorf("%s: %+v %v, want context.Canceled", r.stream, r.reply, r.err)
		}
	}
	h.release <- struct{}{} // the first batch's late answer
	h.release <- struct{}{}
	if r := <-out; r.stream != "stays" || r.err != nil {
		t.Fatalf("%s: %v, want its reply", r.stream, r.err)
	}
	if batches := h.waitBatches(2); len(batches[1]) != 1 || batches[1][0] != "stays" {
		t.Errorf("second batch %v, want only the seal whose caller stayed", batches[1])
	}
	waitQueued(t, b, "n1", 0)
}

// TestSealBatcherQueueFull: past maxQueue seals waiting for a node, a
// seal fails at once with overloaded; other nodes are not affected.
func TestSealBatcherQueueFull(t *testing.T) {
	b, nc := newTestBatcher(t)
	b.maxQueue = 3
	h := newHeldHost(t, nc, "n1")
	h2 := newHeldHost(t, nc, "n2")
	out := make(chan sealed, 10)
	ctx := context.Background()
	sealAsync(ctx, b, "n1", "inflight", 0, out)
	h.waitBatches(1)
	for i := range 3 {
		sealAsync(ctx, b, "n1", fmt.Sprintf("q%d", i), 0, out)
	}
	waitQueued(t, b, "n1", 3)
	_, err := b.Seal(ctx, "n1", wire.SealRequest{Stream: "over", FenceEpoch: 2}, 0)
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeOverloaded {
		t.Fatalf("seal past the queue's bound: %v, want overloaded", err)
	}
	h2.release <- struct{}{}
	if _, err := b.Seal(ctx, "n2", wire.SealRequest{Stream: "other", FenceEpoch: 2}, 0); err != nil {
		t.Fatalf("seal to another node: %v", err)
	}
	h.release <- struct{}{}
	h.release <- struct{}{}
	for range 4 {
		if r := <-out; r.err != nil {
			t.Errorf("%s: %v", r.stream, r.err)
		}
	}
}

// TestSealBatcherClose: close ends the batch in flight and fails the
// queued seals with shutting_down, returns once its goroutines ended, and
// every later seal fails at once.
func TestSealBatcherClose(t *testing.T) {
	b, nc := newTestBatcher(t)
	h := newHeldHost(t, nc, "n1")
	defer close(h.release) // the held callback ends with the test
	out := make(chan sealed, 10)
	ctx := context.Background()
	sealAsync(ctx, b, "n1", "inflight", 0, out)
	h.waitBatches(1)
	sealAsync(ctx, b, "n1", "queued", 0, out)
	waitQueued(t, b, "n1", 1)
	b.close()
	for range 2 {
		r := <-out
		var we *wire.Error
		if !errors.As(r.err, &we) || we.Code != wire.CodeShuttingDown {
			t.Errorf("%s after close: %v, want shutting_down", r.stream, r.err)
		}
	}
	b.mu.Lock()
	left := len(b.nodes)
	b.mu.Unlock()
	if left != 0 {
		t.Errorf("%d node queues left after close", left)
	}
	if _, err := b.Seal(ctx, "n1", wire.SealRequest{Stream: "late", FenceEpoch: 2}, 0); !errors.Is(err, errSealerClosed) {
		t.Errorf("seal after close: %v, want shutting_down", err)
	}
}

// TestSealBatcherSlowSealHoldsNoBatchMate (review r1, medium 1): a batch
// carries its shortest budget as timeout_ms; a host that answers by it
// (as the stream host does: a seal still running then is answered
// timeout) gets a fast seal answered within its caller's deadline
// although a batch-mate's seal takes longer. Without timeout_ms
// the host answers when its slowest seal is done, past the fast caller's
// deadline.
func TestSealBatcherSlowSealHoldsNoBatchMate(t *testing.T) {
	b, nc := newTestBatcher(t)
	delay := map[string]time.Duration{"gate": 200 * time.Millisecond, "slow": 1500 * time.Millisecond}
	subscribe(t, nc, wire.SealBatchSubject("n1"), func(m *nats.Msg) {
		var sb wire.SealBatch
		_ = json.Unmarshal(m.Data, &sb)
		limit := time.Duration(sb.TimeoutMs) * time.Millisecond
		var wait time.Duration
		out := wire.SealBatchReply{}
		for _, s := range sb.Seals {
			d := delay[s.Stream]
			if limit > 0 && d > limit {
				out.Replies = append(out.Replies, wire.SealResult{Error: wire.Errorf(wire.CodeTimeout, "still running")})
				d = limit
			} else {
				out.Replies = append(out.Replies, wire.SealResult{Reply: &wire.SealReply{Node: "n1", Stream: s.Stream, FenceEpoch: s.FenceEpoch, Transition: s.Transition}})
			}
			wait = max(wait, d)
		}
		go func() { time.Sleep(wait); d, _ := json.Marshal(out); _ = m.Respond(d) }()
	})
	out := make(chan sealed, 3)
	sealAsync(context.Background(), b, "n1", "gate", 0, out)
	time.Sleep(50 * time.Millisecond)
	long, c1 := context.WithTimeout(context.Background(), 10*time.Second)
	defer c1()
	sealAsync(long, b, "n1", "slow", 10*time.Second, out)
	waitQueued(t, b, "n1", 1)
	const budget = 600 * time.Millisecond
	short, c2 := context.WithTimeout(context.Background(), (1+recovery.SealQueueAllowance)*budget)
	defer c2()
	if _, err := b.Seal(short, "n1", wire.SealRequest{Stream: "fast", StreamID: 1, FenceEpoch: 2, Transition: 1}, budget); err != nil {
		t.Errorf("fast seal failed (%v) because its batch-mate 'slow' took 1.5s", err)
	}
	for range 2 {
		r := <-out
		var we *wire.Error
		if r.stream == "slow" && (!errors.As(r.err, &we) || we.Code != wire.CodeTimeout) {
			t.Errorf("slow seal: %v, want the host's timeout", r.err)
		}
	}
}

// TestSealBatcherFallsBackToSingleSeals (review r1, medium 2): a host of a
// release before seal batches answers only brook.host.<node>.seal; the
// batch finds no responders and each seal goes alone, so a rolling
// upgrade's failovers do not stall. A reply of another stream is refused.
func TestSealBatcherFallsBackToSingleSeals(t *testing.T) {
	b, nc := newTestBatcher(t)
	var mu sync.Mutex
	var got []string
	subscribe(t, nc, wire.SealSubject("old"), func(m *nats.Msg) {
		var req wire.SealRequest
		_ = json.Unmarshal(m.Data, &req)
		mu.Lock()
		got = append(got, req.Stream)
		mu.Unlock()
		stream := req.Stream
		if stream == "liar" {
			stream = "other"
		}
		d, _ := json.Marshal(wire.SealReply{Node: "old", Stream: stream, FenceEpoch: req.FenceEpoch, Transition: req.Transition})
		_ = m.Respond(d)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, r := range sealEach(ctx, b, "old", "a", "b", "c") {
		if r.err != nil || r.reply == nil || r.reply.Stream != r.stream {
			t.Errorf("%s on a host answering only .seal: %+v %v", r.stream, r.reply, r.err)
		}
	}
	if _, err := b.Seal(ctx, "old", wire.SealRequest{Stream: "liar", FenceEpoch: 2}, 0); err == nil {
		t.Error("a reply of another stream was taken")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 4 {
		t.Errorf("single seals asked: %v, want 4", got)
	}
}

// sealEach seals each of streams on node at once and returns their
// answers, in the order they came.
func sealEach(ctx context.Context, b *sealBatcher, node string, streams ...string) []sealed {
	out := make(chan sealed, len(streams))
	for _, s := range streams {
		sealAsync(ctx, b, node, s, 0, out)
	}
	got := make([]sealed, 0, len(streams))
	for range streams {
		got = append(got, <-out)
	}
	return got
}

// TestSealBatcherAsksAGoneNodeOnce: a batch to a node the state counts
// gone that nobody answers fails whole, without asking each seal again
// alone (a host of an older release is asked alone only while live).
func TestSealBatcherAsksAGoneNodeOnce(t *testing.T) {
	b, nc := newTestBatcher(t)
	b.gone = func(node string) bool { return node == "dead" }
	var singles atomic.Int32
	subscribe(t, nc, wire.SealSubject("*"), func(m *nats.Msg) { singles.Add(1) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, r := range sealEach(ctx, b, "dead", "a", "b", "c") {
		if !errors.Is(r.err, nats.ErrNoResponders) {
			t.Errorf("%s on a gone node: %+v %v, want no responders", r.stream, r.reply, r.err)
		}
	}
	if n := singles.Load(); n != 0 {
		t.Errorf("%d seals asked alone of a gone node", n)
	}
}

// TestSealBatcherRefusesAnotherStreamsAnswer: a batch answer whose seal
// reply names another stream than its request fails that caller.
func TestSealBatcherRefusesAnotherStreamsAnswer(t *testing.T) {
	b, nc := newTestBatcher(t)
	subscribe(t, nc, wire.SealBatchSubject("n1"), func(m *nats.Msg) {
		var sb wire.SealBatch
		_ = json.Unmarshal(m.Data, &sb)
		out := wire.SealBatchReply{}
		for range sb.Seals {
			out.Replies = append(out.Replies, wire.SealResult{Reply: &wire.SealReply{Node: "n1", Stream: "other", FenceEpoch: 2, Transition: 1}})
		}
		d, _ := json.Marshal(out)
		_ = m.Respond(d)
	})
	if r, err := b.Seal(context.Background(), "n1", wire.SealRequest{Stream: "mine", FenceEpoch: 2, Transition: 1}, 0); err == nil {
		t.Errorf("answer of another stream taken: %+v", r)
	}
}

// TestSealBatcherQueueFullPrunesLeftCallers: seals whose callers have left
// do not count toward the queue's bound.
func TestSealBatcherQueueFullPrunesLeftCallers(t *testing.T) {
	b, nc := newTestBatcher(t)
	b.maxQueue = 3
	h := newHeldHost(t, nc, "n1")
	out := make(chan sealed, 10)
	sealAsync(context.Background(), b, "n1", "inflight", 0, out)
	h.waitBatches(1)
	gone, leave := context.WithCancel(context.Background())
	for i := range 3 {
		sealAsync(gone, b, "n1", fmt.Sprintf("q%d", i), 0, out)
	}
	waitQueued(t, b, "n1", 3)
	leave()
	for range 3 {
		<-out
	}
	sealAsync(context.Background(), b, "n1", "after", 0, out)
	waitQueued(t, b, "n1", 1)
	h.release <- struct{}{}
	h.release <- struct{}{}
	for range 2 {
		if r := <-out; r.err != nil {
			t.Errorf("%s: %v", r.stream, r.err)
		}
	}
}

// TestSealBatcherMarksTheSealSpan: the caller's span (the recovery's seal
// span) gets an event when its batch is sent and when it is answered, so
// its queue time shows apart from its request time.
func TestSealBatcherMarksTheSealSpan(t *testing.T) {
	b, nc := newTestBatcher(t)
	h := newHeldHost(t, nc, "n1")
	h.release <- struct{}{}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ctx, span := tp.Tracer("test").Start(context.Background(), "seal n1")
	if _, err := b.Seal(ctx, "n1", wire.SealRequest{Stream: "a", FenceEpoch: 2, Transition: 1}, 0); err != nil {
		t.Fatal(err)
	}
	span.End()
	var names []string
	for _, e := range rec.Ended()[0].Events() {
		names = append(names, e.Name)
	}
	if !slices.Equal(names, []string{"seal batch sent", "seal batch answered"}) {
		t.Errorf("seal span events %v, want the batch sent and answered", names)
	}
}

// TestSealBatcherBudgetStartsWhenSent (issue 17, a mass failover's
// round-1 seals): a seal that waited in its node's queue for most of its
// time budget, behind a slow batch, still gets its whole budget at the
// host once its batch is sent. Counted from when the caller queued it,
// the batch asked the host to answer within the few milliseconds left
// (timeout_ms ~1 ms at 10,000 streams), and a seal the host needed 200 ms
// for came back timed out although the host was answering.
func TestSealBatcherBudgetStartsWhenSent(t *testing.T) {
	b, nc := newTestBatcher(t)
	const budget = 600 * time.Millisecond
	release, gateIn := make(chan struct{}), make(chan struct{})
	var (
		mu       sync.Mutex
		timeouts = map[string]uint64{}
	)
	subscribe(t, nc, wire.SealBatchSubject("n1"), func(m *nats.Msg) {
		var sb wire.SealBatch
		_ = json.Unmarshal(m.Data, &sb)
		mu.Lock()
		for _, s := range sb.Seals {
			timeouts[s.Stream] = sb.TimeoutMs
		}
		mu.Unlock()
		go func() {
			// Each seal takes the host 200 ms (the gate none: it is held
			// until released); one still running at timeout_ms is
			// answered timeout, as the stream host does.
			work, limit := 200*time.Millisecond, time.Duration(sb.TimeoutMs)*time.Millisecond
			if sb.Seals[0].Stream == "gate" {
				close(gateIn)
				<-release
				work = 0
			}
			out := wire.SealBatchReply{}
			for _, s := range sb.Seals {
				if limit < work {
					out.Replies = append(out.Replies, wire.SealResult{Error: wire.Errorf(wire.CodeTimeout, "still running")})
					continue
				}
				out.Replies = append(out.Replies, wire.SealResult{Reply: &wire.SealReply{Node: "n1", Stream: s.Stream,
					FenceEpoch: s.FenceEpoch, Transition: s.Transition}})
			}
			time.Sleep(min(work, limit))
			d, _ := json.Marshal(out)
			_ = m.Respond(d)
		}()
	})
	out := make(chan sealed, 1)
	sealAsync(context.Background(), b, "n1", "gate", 0, out)
	<-gateIn
	// late queues behind gate's batch (one sender) and waits there for
	// two thirds of its budget; its call is bounded as the recovery
	// worker bounds it.
	ctx, cancel := context.WithTimeout(context.Background(), (1+recovery.SealQueueAllowance)*budget)
	defer cancel()
	time.AfterFunc(budget*2/3, func() { close(release) })
	_, err := b.Seal(ctx, "n1", wire.SealRequest{Stream: "late", StreamID: 1, FenceEpoch: 2, Transition: 1}, budget)
	<-out
	mu.Lock()
	got := time.Duration(timeouts["late"]) * time.Millisecond
	mu.Unlock()
	if got < budget*8/10 {
		t.Errorf("late's batch asked the host to answer within %v, want its budget of %v less the way back (it waited %v in the queue)", got, budget, budget*2/3)
	}
	if err != nil {
		t.Errorf("late seal: %v, want an answer: the host answers it in 200 ms of its %v budget", err, budget)
	}
}

// TestSealBatcherQueueHoldsAMassFailover: the seals a mass failover asks
// of one surviving host at once (about 1,900 at 10,000 streams) all wait
// for their batch and are answered; none is refused overloaded, which sent
// its worker into a backoff while the queue drained (issue 17).
func TestSealBatcherQueueHoldsAMassFailover(t *testing.T) {
	b, nc := newTestBatcher(t)
	h := newHeldHost(t, nc, "n1")
	const n = 2000
	out := make(chan sealed, n)
	sealAsync(context.Background(), b, "n1", "inflight", 0, out)
	h.waitBatches(1)
	for i := range n - 1 {
		sealAsync(context.Background(), b, "n1", fmt.Sprintf("s%d", i), 0, out)
	}
	waitQueued(t, b, "n1", n-1)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case h.release <- struct{}{}:
			case <-done:
				return
			}
		}
	}()
	refused := 0
	for range n {
		r := <-out
		var we *wire.Error
		if errors.As(r.err, &we) && we.Code == wire.CodeOverloaded {
			refused++
		} else if r.err != nil {
			t.Errorf("%s: %v", r.stream, r.err)
		}
	}
	if refused > 0 {
		t.Fatalf("%d of %d seals refused overloaded, want all to wait for their batch", refused, n)
	}
}
