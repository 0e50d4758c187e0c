package recovery

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/brook-streams/brook/pkg/wire"
)

// noResponders fails at once, as a seal to a dead host's subject does.
func noResponders(context.Context, wire.SealRequest, int) (*wire.SealReply, error) {
	return nil, errors.New("nats: no responders available for request")
}

// answersAfter makes node of se refuse its first n seals (overloaded, as a
// busy host does), then answer with its tails.
func answersAfter(se *fakeSealer, node string, n int) {
	se.act[node] = func(ctx context.Context, req wire.SealRequest, call int) (*wire.SealReply, error) {
		if call <= n {
			return nil, errors.New("overloaded")
		}
		return se.reply(node, req), nil
	}
}

// slowC is a recovery of copies a, b, c in which a is dead, b answers at
// once and c refuses its first failing seals.
func slowC(failing int) (*fakeState, *fakeSealer) {
	pr := pending("majority_durable", "a", "b", "c")
	se := newSealer(map[string][2]uint64{"b": {10, 0}, "c": {11, 0}})
	se.act["a"] = noResponders
	answersAfter(se, "c", failing)
	return &fakeState{pr: &pr, version: 3}, se
}

// TestWorkerKeepsAnswersAcrossRounds: a copy that answered the seal is not
// sealed again in the next rounds at the same fence; only the copies that
// did not answer are asked again (a mass failover re-sealed every copy on
// every round, issue 17).
func TestWorkerKeepsAnswersAcrossRounds(t *testing.T) {
	const failing = 4
	st, se := slowC(failing)
	if err := newWorker(st, se, &sleeps{}).Run(testCtx(t), "s"); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := len(se.calls("b")); n != 1 {
		t.Errorf("b sealed %d times, want 1: its answer of round 1 is kept", n)
	}
	if n, m := len(se.calls("a")), len(se.calls("c")); n != failing+1 || m != failing+1 {
		t.Errorf("a, c sealed %d, %d times, want %d each (unanswered, asked every round)", n, m, failing+1)
	}
	if len(st.applied) != 1 || st.applied[0].a.Owner != "c" || st.applied[0].start.RecordTail != 11 {
		t.Errorf("applied = %+v, want one commit promoting c at 11", st.applied)
	}
}

// TestWorkerResealsARestartedNode: a kept answer is dropped once its
// node's incarnation changed (the host restarted, maybe without its disk),
// and the node is sealed again; the decision rests on its new answer.
func TestWorkerResealsARestartedNode(t *testing.T) {
	pr := pending("majority_durable", "a", "b", "c")
	st := &fakeState{pr: &pr, version: 3}
	se := newSealer(map[string][2]uint64{"b": {12, 0}, "c": {10, 0}})
	se.act["a"] = noResponders
	var mu sync.Mutex
	incB := uint64(1)
	se.act["b"] = func(ctx context.Context, req wire.SealRequest, call int) (*wire.SealReply, error) {
		r := se.reply("b", req)
		if call > 1 {
			r.RecordTail = 0 // came back empty
		}
		return r, nil
	}
	se.act["c"] = func(ctx context.Context, req wire.SealRequest, call int) (*wire.SealReply, error) {
		if call == 1 {
			// b restarts while c is slow: the round waits for answers.
			mu.Lock()
			incB = 2
			mu.Unlock()
			return nil, errors.New("overloaded")
		}
		return se.reply("c", req), nil
	}
	w := newWorker(st, se, &sleeps{})
	w.Incarnation = func(node string) (uint64, bool) {
		mu.Lock()
		defer mu.Unlock()
		if node == "b" {
			return incB, true
		}
		return 7, true
	}
	if err := w.Run(testCtx(t), "s"); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := len(se.calls("b")); n != 2 {
		t.Errorf("b sealed %d times, want 2 (its kept answer dropped when it restarted)", n)
	}
	if len(st.applied) != 1 || st.applied[0].a.Owner != "c" {
		t.Errorf("applied = %+v, want one commit promoting c (b's new answer is empty)", st.applied)
	}
}

// TestKeptAnswersDropOnANewKey: kept answers hold for one stream id, fence
// and transition only.
func TestKeptAnswersDropOnANewKey(t *testing.T) {
	pr := pending("majority_durable", "a", "b", "c")
	log := slog.New(slog.DiscardHandler)
	for _, change := range []func(p *wire.PendingRecovery){
		func(p *wire.PendingRecovery) { p.Transition++ },
		func(p *wire.PendingRecovery) { p.Old.Epoch++ },
		func(p *wire.PendingRecovery) { p.Old.StreamID++ },
	} {
		rs := &runState{}
		rs.prune(log, pr, (&Worker{}).incarnation, nil)
		rs.keep(pr, []Answer{ans(pr, "b", 10, 0)}, time.Second)
		rs.prune(log, pr, (&Worker{}).incarnation, nil)
		if len(rs.kept) != 1 {
			t.Fatalf("kept %v, want b's answer", rs.kept)
		}
		next := pr
		change(&next)
		rs.prune(log, next, (&Worker{}).incarnation, nil)
		if len(rs.kept) != 0 {
			t.Errorf("kept %v after the key changed to %+v", rs.kept, keyOf(next))
		}
	}
}

func TestNextSealTimeout(t *testing.T) {
	s := time.Second
	for _, c := range []struct {
		cur                time.Duration
		answered, timedOut bool
		want               time.Duration
	}{
		{0, false, true, 2 * s},
		{s, false, true, 2 * s},
		{2 * s, false, true, 4 * s},
		{4 * s, false, true, 8 * s},
		{8 * s, false, true, 8 * s}, // capped at MaxSealTimeoutFactor
		{8 * s, true, false, s},     // an answer resets it
		{4 * s, false, false, 4 * s},
		{0, false, false, s},
	} {
		if got := NextSealTimeout(c.cur, s, c.answered, c.timedOut); got != c.want {
			t.Errorf("NextSealTimeout(%v, 1s, answered %v, timed out %v) = %v, want %v", c.cur, c.answered, c.timedOut, got, c.want)
		}
	}
}

// TestRunStateGrowsSealTimeouts: a node whose seal timed out gets twice the
// timeout in the next round, up to the cap; an answer resets it; other
// nodes keep the base.
func TestRunStateGrowsSealTimeouts(t *testing.T) {
	pr := pending("majority_durable", "a", "b", "c")
	base := 100 * time.Millisecond
	rs := &runState{}
	late := Answer{Node: "c", Err: fmt.Errorf("seal c: %w", context.DeadlineExceeded)}
	gone := Answer{Node: "a", Err: errors.New("no responders")}
	var got []time.Duration
	for range 5 {
		rs.keep(pr, []Answer{gone, late}, base)
		got = append(got, rs.timeout("c", base))
	}
	want := []time.Duration{2 * base, 4 * base, 8 * base, 8 * base, 8 * base}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("c's timeouts = %v, want %v", got, want)
	}
	if d := rs.timeout("a", base); d != base {
		t.Errorf("a's timeout = %v, want the base (its seals fail, they do not time out)", d)
	}
	rs.keep(pr, []Answer{ans(pr, "c", 1, 0)}, base)
	if d := rs.timeout("c", base); d != base {
		t.Errorf("c's timeout after an answer = %v, want the base", d)
	}
}

// TestWorkerSealsWithTheGrownTimeout: the worker gives the next round's
// seal of a node that timed out the grown timeout (the seal span's
// timeout_ms), and the base again once it answered.
func TestWorkerSealsWithTheGrownTimeout(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	pr := pending("majority_durable", "a", "b", "c")
	st := &fakeState{pr: &pr, version: 3}
	se := newSealer(map[string][2]uint64{"c": {11, 0}})
	se.act["a"] = noResponders
	se.act["b"] = func(ctx context.Context, req wire.SealRequest, call int) (*wire.SealReply, error) {
		if call <= 2 {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return se.reply("b", req), nil
	}
	se.act["c"] = func(ctx context.Context, req wire.SealRequest, call int) (*wire.SealReply, error) {
		return nil, errors.New("overloaded") // keeps the rounds going
	}
	w := newWorker(st, se, &sleeps{then: func(n int) error {
		if n == 3 {
			se.mu.Lock()
			se.act["c"] = nil // the fourth round promotes
			se.mu.Unlock()
		}
		return nil
	}})
	w.Tracer = tp.Tracer("t")
	if err := w.Run(testCtx(t), "s"); err != nil {
		t.Fatalf("Run: %v", err)
	}
	var b, a []int64
	for _, sp := range rec.Ended() {
		switch sp.Name() {
		case "seal b":
			b = append(b, attrs(sp)["timeout_ms"].AsInt64())
		case "seal a":
			a = append(a, attrs(sp)["timeout_ms"].AsInt64())
		}
	}
	// b: 50 ms, timed out, 100, timed out, 200, answered (then kept).
	if fmt.Sprint(b) != "[50 100 200]" {
		t.Errorf("b's seal timeouts = %v ms, want [50 100 200]", b)
	}
	if fmt.Sprint(a) != "[50 50 50 50]" {
		t.Errorf("a's seal timeouts = %v ms, want the base every round (it fails fast)", a)
	}
}

// TestWorkerSummarizesRepeatedWaits: with a WaitLog, a worker logs its
// first wait of each kind and its commit; the repeated waits go into the
// summary line.
func TestWorkerSummarizesRepeatedWaits(t *testing.T) {
	const failing = 6
	st, se := slowC(failing)
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	w := newWorker(st, se, &sleeps{})
	w.Logger = log
	w.Waits = &WaitLog{Logger: log}
	if err := w.Run(testCtx(t), "s"); err != nil {
		t.Fatalf("Run: %v", err)
	}
	w.Waits.Flush(now)
	out := buf.String()
	if n := strings.Count(out, `msg="recovery: waiting"`); n != 1 {
		t.Errorf("%d per-round wait lines, want 1 (the first):\n%s", n, out)
	}
	if !strings.Contains(out, "recovery: waiting (summary of repeated waits)") || !strings.Contains(out, "rounds_wait_answers=5") ||
		!strings.Contains(out, "streams=1") || !strings.Contains(out, "examples=[s]") {
		t.Errorf("no summary of the 5 repeated waits:\n%s", out)
	}
	if !strings.Contains(out, "recovery: committed") || !strings.Contains(out, "waited_rounds=6") {
		t.Errorf("no commit line with the rounds waited:\n%s", out)
	}
	// Without a WaitLog every round's wait is logged, as before.
	buf.Reset()
	st2, se2 := slowC(failing)
	w2 := newWorker(st2, se2, &sleeps{})
	w2.Logger = log
	if err := w2.Run(testCtx(t), "s"); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := strings.Count(buf.String(), `msg="recovery: waiting"`); n != failing {
		t.Errorf("%d wait lines without a WaitLog, want %d", n, failing)
	}
}

// TestWaitLogSummary: Flush logs nothing without waits, and counts by kind
// with a few example streams.
func TestWaitLogSummary(t *testing.T) {
	var buf bytes.Buffer
	l := &WaitLog{Logger: slog.New(slog.NewTextHandler(&buf, nil))}
	l.Flush(now)
	if buf.Len() != 0 {
		t.Fatalf("logged %q with no waits", buf.String())
	}
	for i := range 10 {
		l.Note(fmt.Sprintf("s%d", i), WaitAnswers)
		l.Note(fmt.Sprintf("s%d", i), WaitAnswers)
	}
	l.Note("s3", WaitPrefix)
	l.Flush(now.Add(time.Second))
	out := buf.String()
	for _, want := range []string{"streams=10", "examples=\"[s0 s1 s2]\"", "rounds_wait_answers=20", "rounds_wait_confirmed_prefix=1", "over=1s"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary %q lacks %s", out, want)
		}
	}
	buf.Reset()
	l.Flush(now.Add(2 * time.Second))
	if buf.Len() != 0 {
		t.Errorf("a second Flush logged %q", buf.String())
	}
}

// A seal the host answered timeout (a batch's timeout_ms passed while it
// ran) is a seal that timed out: the node's timeout grows as for one the
// coordinator gave up on. Final read of session 25: only the caller's own
// deadline counted, so on the batched path the timeout never grew.
func TestRunStateGrowsOnAHostTimeout(t *testing.T) {
	pr := pending("majority_durable", "a", "b", "c")
	base := 100 * time.Millisecond
	rs := &runState{}
	cut := Answer{Node: "c", Err: fmt.Errorf("seal c of s at epoch 2: %w", wire.Errorf(wire.CodeTimeout, "still running at the batch's timeout"))}
	rs.keep(pr, []Answer{cut}, base)
	if d := rs.timeout("c", base); d != 2*base {
		t.Fatalf("c's timeout after the host answered timeout = %v, want %v", d, 2*base)
	}
	over := Answer{Node: "b", Err: fmt.Errorf("seal b: %w", wire.Errorf(wire.CodeOverloaded, "busy"))}
	rs.keep(pr, []Answer{over}, base)
	if d := rs.timeout("b", base); d != base {
		t.Fatalf("b's timeout after overloaded = %v, want the base", d)
	}
}
