package tracecontext

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"
)

// sampledSpan returns a context with a local, sampled span context; no
// provider is needed to carry one.
func sampledSpan() (context.Context, trace.SpanContext) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0xa, 1},
		SpanID:     trace.SpanID{0xb, 2},
		TraceFlags: trace.FlagsSampled,
	})
	return trace.ContextWithSpanContext(context.Background(), sc), sc
}

func TestTraceparentCrossesNATSHeaders(t *testing.T) {
	ctx, sc := sampledSpan()
	msg := nats.NewMsg("brook.attention.list")
	Inject(ctx, msg)
	if msg.Header.Get("traceparent") == "" {
		t.Fatalf("no lower-case traceparent header: %v", msg.Header)
	}
	got := trace.SpanContextFromContext(Extract(context.Background(), msg))
	if got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() || !got.IsRemote() || !got.IsSampled() {
		t.Errorf("extracted %v, want remote %v", got, sc)
	}
	if sc := trace.SpanContextFromContext(Extract(context.Background(), nats.NewMsg("x"))); sc.IsValid() {
		t.Errorf("extracted a trace from a message without headers")
	}

	// Without a span nothing is written, but the headers exist for the
	// caller to add to.
	bare := nats.NewMsg("x")
	Inject(context.Background(), bare)
	if bare.Header == nil || len(bare.Header) != 0 {
		t.Errorf("headers after injecting no span: %v", bare.Header)
	}
}

func TestTraceParentString(t *testing.T) {
	ctx, sc := sampledSpan()
	tp := TraceParent(ctx)
	if want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"; tp != want {
		t.Fatalf("TraceParent %q, want %q", tp, want)
	}
	got := trace.SpanContextFromContext(WithTraceParent(context.Background(), tp))
	if got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() || !got.IsRemote() {
		t.Errorf("round trip %v, want %v", got, sc)
	}
	if TraceParent(context.Background()) != "" {
		t.Error("a traceparent from a context without a span")
	}
	for _, bad := range []string{"", "00-zz-yy-01"} {
		if sc := trace.SpanContextFromContext(WithTraceParent(context.Background(), bad)); sc.IsValid() {
			t.Errorf("WithTraceParent(%q) gave %v", bad, sc)
		}
	}
}
