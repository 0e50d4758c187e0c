package client

import (
	"context"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/telemetry/tracecontext"
)

// injectTrace puts the trace context of ctx, if it has a recording or
// sampled span, into msg's traceparent header so the service's spans join
// the caller's trace. It does nothing without a span.
func injectTrace(ctx context.Context, msg *nats.Msg) { tracecontext.Inject(ctx, msg) }
