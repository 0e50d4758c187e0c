package telemetry

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"
)

func TestExportsOnlyWithEndpoint(t *testing.T) {
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/traces" {
			posts.Add(1)
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()

	run := func() {
		ctx := context.Background()
		tp, shutdown, err := Setup(ctx, "brook-attention")
		if err != nil {
			t.Fatal(err)
		}
		_, span := tp.Tracer("test").Start(ctx, "work")
		span.End()
		if err := shutdown(ctx); err != nil {
			t.Fatalf("shutdown: %v", err)
		}
	}
	t.Setenv(EndpointEnv, "")
	run()
	if n := posts.Load(); n != 0 {
		t.Fatalf("exported %d batches without an endpoint", n)
	}
	t.Setenv(EndpointEnv, srv.URL)
	run()
	if n := posts.Load(); n == 0 {
		t.Fatal("no batch exported with an endpoint set")
	}
}

func TestTraceparentCrossesNATSHeaders(t *testing.T) {
	tp, shutdown, err := Setup(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(context.Background())
	ctx, span := tp.Tracer("test").Start(context.Background(), "request")
	defer span.End()

	msg := nats.NewMsg("brook.attention.list")
	Inject(ctx, msg)
	if msg.Header.Get("traceparent") == "" {
		t.Fatalf("no lower-case traceparent header: %v", msg.Header)
	}
	got := trace.SpanContextFromContext(Extract(context.Background(), msg))
	if got.TraceID() != span.SpanContext().TraceID() || !got.IsRemote() {
		t.Errorf("extracted %v, want trace %v", got.TraceID(), span.SpanContext().TraceID())
	}
	if sc := trace.SpanContextFromContext(Extract(context.Background(), nats.NewMsg("x"))); sc.IsValid() {
		t.Errorf("extracted a trace from a message without headers")
	}
}
