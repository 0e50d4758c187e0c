package client

import (
	"context"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
)

// headerCarrier lets the W3C propagator write into NATS headers. NATS
// header keys are case-sensitive, and the services read "traceparent" as
// written, so the carrier keeps keys exactly (http.Header would
// canonicalise them to "Traceparent").
type headerCarrier nats.Header

func (h headerCarrier) Get(key string) string { return nats.Header(h).Get(key) }
func (h headerCarrier) Set(key, value string) { nats.Header(h).Set(key, value) }
func (h headerCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}

// injectTrace puts the trace context of ctx, if it has a recording or
// sampled span, into msg's traceparent header so the service's spans join
// the caller's trace. It does nothing without a span.
func injectTrace(ctx context.Context, msg *nats.Msg) {
	if msg.Header == nil {
		msg.Header = nats.Header{}
	}
	propagation.TraceContext{}.Inject(ctx, headerCarrier(msg.Header))
}
