package telemetry

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestExportsOnlyWithEndpoint ends one span per case against a stand-in
// OTLP/HTTP collector and counts the batches it receives after Shutdown's
// flush.
func TestExportsOnlyWithEndpoint(t *testing.T) {
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/traces" {
			posts.Add(1)
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()

	for _, tc := range []struct {
		name             string
		endpoint, traces string   // the two variables
		envs             []string // Options.EndpointEnvs
		export           bool
	}{
		{name: "no endpoint"},
		{name: "endpoint", endpoint: srv.URL, export: true},
		{name: "traces endpoint", traces: srv.URL + "/v1/traces", export: true},
		{name: "traces endpoint not listened to", traces: srv.URL + "/v1/traces", envs: []string{EndpointEnv}},
		{name: "endpoint listened to", endpoint: srv.URL, envs: []string{EndpointEnv}, export: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(EndpointEnv, tc.endpoint)
			t.Setenv(TracesEndpointEnv, tc.traces)
			before := posts.Load()
			ctx := context.Background()
			tp, err := NewProvider(ctx, Options{Service: "test", EndpointEnvs: tc.envs})
			if err != nil {
				t.Fatal(err)
			}
			_, span := tp.Tracer("test").Start(ctx, "work")
			span.End()
			if err := tp.Shutdown(ctx); err != nil {
				t.Fatalf("shutdown: %v", err)
			}
			if got := posts.Load() - before; (got > 0) != tc.export {
				t.Errorf("%d batches exported, want export %v", got, tc.export)
			}
		})
	}
}

// collector is a stand-in OTLP/HTTP collector that takes every post.
func collector(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestResourceAndSampler records the spans of exporting providers built
// with each option, including one whose remote parent was not sampled: the
// SDK's default sampler follows that parent, AlwaysSample does not.
func TestResourceAndSampler(t *testing.T) {
	t.Setenv(EndpointEnv, collector(t))
	t.Setenv(TracesEndpointEnv, "")
	unsampledParent := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, Remote: true,
	}))
	for _, tc := range []struct {
		name        string
		opts        Options
		attrs       map[attribute.Key]string // "" means absent
		followsRoot bool                     // the child of the unsampled parent is recorded
	}{
		{
			name:  "defaults",
			opts:  Options{Service: "brook-x"},
			attrs: map[attribute.Key]string{"service.name": "brook-x", "service.instance.id": "", "telemetry.sdk.language": ""},
		},
		{
			name:        "instance and always sample",
			opts:        Options{Service: "brook-x", Instance: "x-1", Sampler: sdktrace.AlwaysSample()},
			attrs:       map[attribute.Key]string{"service.name": "brook-x", "service.instance.id": "x-1"},
			followsRoot: true,
		},
		{
			name:  "sdk resource",
			opts:  Options{Service: "brook-x", SDKResource: true},
			attrs: map[attribute.Key]string{"service.name": "brook-x", "telemetry.sdk.language": "go"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp, err := NewProvider(context.Background(), tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := tp.Shutdown(context.Background()); err != nil {
					t.Error(err)
				}
			})
			rec := tracetest.NewSpanRecorder()
			tp.RegisterSpanProcessor(rec)
			_, root := tp.Tracer("test").Start(context.Background(), "root")
			root.End()
			_, child := tp.Tracer("test").Start(unsampledParent, "child")
			child.End()

			spans := rec.Ended()
			if want := map[bool]int{false: 1, true: 2}[tc.followsRoot]; len(spans) != want {
				t.Fatalf("%d spans recorded, want %d", len(spans), want)
			}
			got := map[attribute.Key]string{}
			for _, kv := range spans[0].Resource().Attributes() {
				got[kv.Key] = kv.Value.String()
			}
			for k, v := range tc.attrs {
				if got[k] != v {
					t.Errorf("resource %s = %q, want %q (all: %v)", k, got[k], v, got)
				}
			}
		})
	}
}

// TestNothingRecordedWithoutExport: with no endpoint the provider records
// no span, not even under AlwaysSample, yet a new root still gets a trace
// id and a child its parent's, for logs and stream info.
func TestNothingRecordedWithoutExport(t *testing.T) {
	t.Setenv(EndpointEnv, "")
	t.Setenv(TracesEndpointEnv, "")
	for _, sampler := range []sdktrace.Sampler{nil, sdktrace.AlwaysSample()} {
		tp, err := NewProvider(context.Background(), Options{Service: "brook-x", Sampler: sampler})
		if err != nil {
			t.Fatal(err)
		}
		rec := tracetest.NewSpanRecorder()
		tp.RegisterSpanProcessor(rec)
		ctx, root := tp.Tracer("test").Start(context.Background(), "root", trace.WithNewRoot())
		_, child := tp.Tracer("test").Start(ctx, "child")
		if root.IsRecording() || child.IsRecording() {
			t.Errorf("sampler %v: spans record without an exporter", sampler)
		}
		child.End()
		root.End()
		if n := len(rec.Ended()); n != 0 {
			t.Errorf("sampler %v: %d spans recorded without an exporter", sampler, n)
		}
		if !root.SpanContext().TraceID().IsValid() || child.SpanContext().TraceID() != root.SpanContext().TraceID() {
			t.Errorf("sampler %v: trace ids root %s child %s, want one valid id", sampler, root.SpanContext().TraceID(), child.SpanContext().TraceID())
		}
		if err := tp.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}
