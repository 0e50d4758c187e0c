package recovery

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/brook-streams/brook/pkg/telemetry/tracecontext"
	"github.com/brook-streams/brook/pkg/wire"
)

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

func children(all []sdktrace.ReadOnlySpan, parent trace.SpanContext) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range all {
		if s.Parent().SpanID() == parent.SpanID() && s.Parent().TraceID() == parent.TraceID() {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
	return out
}

func names(ss []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name())
	}
	return out
}

// TestTrace runs one failover of two rounds (the first waits for answers,
// the second commits) and checks the span tree under the failover's root
// span, whose traceparent came through the PendingRecovery.
func TestTrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tracer := tp.Tracer("recovery-test")

	// The controller's root span; it has ended by the time the worker runs.
	rootCtx, root := tracer.Start(context.Background(), "brook.failover")
	pr := pending("majority_durable", "a", "b", "c")
	pr.TraceParent = tracecontext.TraceParent(rootCtx)
	root.End()
	if pr.TraceParent == "" {
		t.Fatal("no traceparent for the root span")
	}

	st := &fakeState{pr: &pr, version: 8}
	se := newSealer(map[string][2]uint64{"b": {10, 2}, "c": {10, 1}})
	se.act["a"] = blockUntilDone
	se.act["c"] = func(ctx context.Context, req wire.SealRequest, call int) (*wire.SealReply, error) {
		if call == 1 {
			return nil, errors.New("no responders")
		}
		return se.reply("c", req), nil
	}
	w := newWorker(st, se, &sleeps{})
	w.Tracer = tracer
	// The worker's own context carries an unrelated span: the failover's
	// traceparent must win.
	ctx, other := tracer.Start(testCtx(t), "leader.loop")
	defer other.End()
	if err := w.Run(ctx, "s"); err != nil {
		t.Fatalf("Run: %v", err)
	}

	all := rec.Ended()
	rounds := children(all, root.SpanContext())
	if got := names(rounds); !slices.Equal(got, []string{"recovery.round", "recovery.round"}) {
		t.Fatalf("children of the root = %v, want two recovery.round", got)
	}
	for i, round := range rounds {
		kids := children(all, round.SpanContext())
		wantKids := []string{"seal.fanout", "choose", "wait"}
		if i == 1 {
			// b's kept answer is the furthest: b is sealed once more,
			// alone, before it is promoted (Worker.decideFresh).
			wantKids = []string{"seal.fanout", "seal b", "choose", "commit"}
		}
		if got := names(kids); !slices.Equal(got, wantKids) {
			t.Fatalf("round %d children = %v, want %v", i+1, got, wantKids)
		}
		seals := children(all, kids[0].SpanContext())
		slices.SortFunc(seals, func(a, b sdktrace.ReadOnlySpan) int { return strings.Compare(a.Name(), b.Name()) })
		// Round 2 does not seal b again: its answer of round 1 is kept.
		sealed := []string{"a", "b", "c"}
		if i == 1 {
			sealed = []string{"a", "c"}
			if k := attrs(kids[0])["kept"].AsInt64(); k != 1 {
				t.Errorf("round 2 seal.fanout kept = %d, want 1 (b's answer)", k)
			}
		}
		var want []string
		for _, n := range sealed {
			want = append(want, "seal "+n)
		}
		if got := names(seals); !slices.Equal(got, want) {
			t.Fatalf("round %d seals = %v, want %v", i+1, got, want)
		}
		sa, sc := attrs(seals[0]), attrs(seals[len(seals)-1])
		if sa["answered"].AsBool() || !sa["timed_out"].AsBool() || sa["error"].AsString() == "" {
			t.Errorf("round %d seal a attrs %v, want timed out with an error", i+1, sa)
		}
		if i == 0 {
			if sb := attrs(seals[1]); !sb["answered"].AsBool() || sb["timed_out"].AsBool() || sb["record_tail"].AsInt64() != 10 || sb["cursor_tail"].AsInt64() != 2 {
				t.Errorf("round %d seal b attrs %v, want answered 10/2", i+1, sb)
			}
		}
		if i == 0 && (sc["answered"].AsBool() || sc["timed_out"].AsBool() || !strings.Contains(sc["error"].AsString(), "no responders")) {
			t.Errorf("round 1 seal c attrs %v, want an error that is not a timeout", sc)
		}
		// Each seal request carried its own span's context.
		for j, n := range sealed {
			req := se.calls(n)[min(i, len(se.calls(n))-1)]
			if want := traceparentOf(seals[j].SpanContext()); req.TraceParent != want {
				t.Errorf("round %d seal %s traceparent %q, want %q", i+1, n, req.TraceParent, want)
			}
		}
		kid := func(name string) sdktrace.ReadOnlySpan {
			return kids[slices.IndexFunc(kids, func(s sdktrace.ReadOnlySpan) bool { return s.Name() == name })]
		}
		ch := attrs(kid("choose"))
		if ch["reason"].AsString() == "" || ch["r"].AsInt64() != 2 {
			t.Errorf("round %d choose attrs %v, want a reason and r=2", i+1, ch)
		}
		if i == 0 {
			wa := attrs(kid("wait"))
			if wa["kind"].AsString() != WaitAnswers || wa["reason"].AsString() == "" || ch["answers"].AsInt64() != 1 {
				t.Errorf("wait attrs %v choose %v, want kind %s, a reason, 1 answer", wa, ch, WaitAnswers)
			}
			continue
		}
		if ch["chosen"].AsString() != "b" || ch["answers"].AsInt64() != 2 || ch["kind"].AsString() != Promote {
			t.Errorf("choose attrs %v, want chosen b (cursor tie-break) with 2 answers", ch)
		}
		cm := attrs(kid("commit"))
		if cm["epoch"].AsInt64() != 5 || cm["owner"].AsString() != "b" || cm["version"].AsInt64() != 8 {
			t.Errorf("commit attrs %v, want epoch 5 owner b version 8", cm)
		}
		if got, want := st.applied[0].traceParent, traceparentOf(kid("commit").SpanContext()); got != want {
			t.Errorf("commit traceparent %q, want the commit span's %q", got, want)
		}
	}
	for _, s := range all {
		if s.Name() != "leader.loop" && s.Name() != "brook.failover" && s.SpanContext().TraceID() != root.SpanContext().TraceID() {
			t.Errorf("span %s is outside the failover trace", s.Name())
		}
	}
}

func traceparentOf(sc trace.SpanContext) string {
	return tracecontext.TraceParent(trace.ContextWithSpanContext(context.Background(), sc))
}
