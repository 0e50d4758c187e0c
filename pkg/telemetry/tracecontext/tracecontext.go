// Package tracecontext carries W3C trace context (the traceparent header)
// across NATS messages and the JSON fields that store a traceparent, so
// that a span on one process can have its parent on another. It uses the
// W3C propagator directly rather than a global one, which brook never
// installs.
package tracecontext

import (
	"context"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
)

// traceParentKey is the W3C header and carrier key.
const traceParentKey = "traceparent"

// HeaderCarrier adapts NATS message headers to the propagator. NATS header
// names are case-sensitive and every brook process reads "traceparent" as
// written, so keys are kept exactly (http.Header would canonicalise them to
// "Traceparent").
type HeaderCarrier nats.Header

// Get returns the first value of key, or "".
func (h HeaderCarrier) Get(key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set replaces the values of key.
func (h HeaderCarrier) Set(key, value string) { h[key] = []string{value} }

// Keys lists the header names.
func (h HeaderCarrier) Keys() []string {
	out := make([]string, 0, len(h))
	for k := range h {
		out = append(out, k)
	}
	return out
}

// Inject writes the trace context of ctx into msg's headers, creating them
// if need be; without a valid span in ctx it writes nothing.
func Inject(ctx context.Context, msg *nats.Msg) {
	if msg.Header == nil {
		msg.Header = nats.Header{}
	}
	propagation.TraceContext{}.Inject(ctx, HeaderCarrier(msg.Header))
}

// Extract returns ctx with the remote span context of msg's headers, or
// ctx unchanged when they carry none.
func Extract(ctx context.Context, msg *nats.Msg) context.Context {
	if msg.Header == nil {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, HeaderCarrier(msg.Header))
}

// TraceParent renders the span context of ctx as a W3C traceparent, or ""
// when ctx carries no valid span.
func TraceParent(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c[traceParentKey]
}

// WithTraceParent returns ctx with the remote span named by traceparent as
// its parent, or ctx unchanged when traceparent is empty or malformed.
func WithTraceParent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{traceParentKey: traceparent})
}
