// Package telemetry builds the OpenTelemetry tracer and meter providers of
// a brook process (metrics: metrics.go).
//
// Spans leave the process over OTLP/HTTP only when an OTLP endpoint variable
// is set (the exporter itself reads endpoint, headers and timeouts from the
// standard OTEL_EXPORTER_OTLP_* variables). Otherwise the provider records
// nothing (every span is dropped by the sampler) but still assigns ids, so
// trace ids reach logs, NATS headers and stream info without any collector
// and without the cost of recording spans that go nowhere: recording them
// took 13% of the leader coordinator's CPU in a 10,000-stream failover
// (docs/benchmarks.md, "Session 39"). A process that does not export sends
// its trace context unsampled, so a process downstream that exports (its
// default sampler follows the parent) records no spans of those traces
// either: turn exporting on in every brook process or in none. The
// provider is never installed globally: callers pass it to what needs it.
// W3C trace context helpers live in the tracecontext subpackage, which
// clients can import without the exporter.
package telemetry

import (
	"context"
	"fmt"
	"os"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// The standard variables that name an OTLP endpoint.
const (
	EndpointEnv       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	TracesEndpointEnv = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
)

// Options describe the tracer provider of one process.
type Options struct {
	// Service and Instance become the resource's service.name and
	// service.instance.id; an empty Instance is left out.
	Service, Instance string
	// SDKResource puts those attributes over the SDK's default resource
	// (telemetry.sdk.* and OTEL_RESOURCE_ATTRIBUTES) instead of alone.
	SDKResource bool
	// Sampler decides which spans are recorded while exporting; nil keeps
	// the SDK's default, which follows a remote parent's decision and
	// samples roots. Without exporting no span is recorded.
	Sampler sdktrace.Sampler
	// EndpointEnvs are the variables any of which, set and not empty,
	// turns exporting on; nil means EndpointEnv and TracesEndpointEnv.
	EndpointEnvs []string
	// MetricsEndpointEnvs are the same for NewMetrics's OTLP push; nil
	// means EndpointEnv and MetricsEndpointEnv.
	MetricsEndpointEnvs []string
}

// NewProvider returns the provider o describes. Its Shutdown flushes the
// spans not yet exported and stops it.
func NewProvider(ctx context.Context, o Options) (*sdktrace.TracerProvider, error) {
	attrs := []attribute.KeyValue{attribute.String("service.name", o.Service)}
	if o.Instance != "" {
		attrs = append(attrs, attribute.String("service.instance.id", o.Instance))
	}
	res := resource.NewSchemaless(attrs...)
	if o.SDKResource {
		merged, err := resource.Merge(resource.Default(), res)
		if err != nil {
			return nil, fmt.Errorf("tracing resource: %w", err)
		}
		res = merged
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	export := exporting(o.EndpointEnvs)
	switch {
	case !export:
		// Dropped spans still get their ids (a new root a new trace id,
		// a child its parent's).
		opts = append(opts, sdktrace.WithSampler(sdktrace.NeverSample()))
	case o.Sampler != nil:
		opts = append(opts, sdktrace.WithSampler(o.Sampler))
	}
	if export {
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("create OTLP/HTTP trace exporter: %w", err)
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	return sdktrace.NewTracerProvider(opts...), nil
}

// exporting reports whether any of envs (by default both endpoint
// variables) is set.
func exporting(envs []string) bool {
	if envs == nil {
		envs = []string{EndpointEnv, TracesEndpointEnv}
	}
	for _, name := range envs {
		if os.Getenv(name) != "" {
			return true
		}
	}
	return false
}
