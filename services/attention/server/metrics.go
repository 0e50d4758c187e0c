package server

import (
	"context"
	"net/http"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/brook-streams/brook/pkg/telemetry"
	"github.com/brook-streams/brook/pkg/wire"
)

// MeterName is the instrumentation scope of the attention service's
// metrics.
const MeterName = "github.com/brook-streams/brook/services/attention"

// knownKinds are reported at 0 while nothing of the kind is listed, so
// that their series exist.
var knownKinds = []string{
	wire.AttentionWaitPrefix, wire.AttentionWaitAnswers, wire.AttentionBelowPolicy,
	wire.AttentionSealedLeft, wire.AttentionAcceptedLoss, wire.AttentionNodeHolds,
	wire.AttentionFollowerLag, wire.AttentionOwnerOnly, wire.AttentionStoreFailed,
	wire.AttentionUnderRepl, wire.AttentionDrainStuck,
}

// metrics hold the entries of the latest judging by kind, read by the
// gauge's callback; judging (every Refresh, and on each list request)
// replaces them.
type metrics struct {
	entries metric.Int64ObservableGauge
	reg     metric.Registration

	mu     sync.Mutex
	byKind map[string]int
	judged bool
}

// newMetrics creates the gauge from mp (a no-op provider when nil).
func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	mt := telemetry.Meter(mp, MeterName)
	m := &metrics{}
	var err error
	m.entries, err = mt.Int64ObservableGauge("brook.attention.entry.count", metric.WithUnit("{entry}"),
		metric.WithDescription("Entries of the attention list, by kind, as of the latest judging."))
	if err != nil {
		return nil, err
	}
	m.reg, err = mt.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		if !m.judged {
			return nil // nothing judged yet: no numbers rather than zeros
		}
		for kind, n := range m.byKind {
			o.ObserveInt64(m.entries, int64(n), metric.WithAttributes(attribute.String("brook.attention.kind", kind)))
		}
		return nil
	}, m.entries)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// judged records the entries of a judging.
func (m *metrics) record(entries []wire.AttentionEntry) {
	byKind := make(map[string]int, len(knownKinds))
	for _, k := range knownKinds {
		byKind[k] = 0
	}
	for _, e := range entries {
		byKind[e.Kind]++
	}
	m.mu.Lock()
	m.byKind, m.judged = byKind, true
	m.mu.Unlock()
}

// mountMetrics serves h at GET /metrics on mux when it is set.
func mountMetrics(mux *http.ServeMux, h http.Handler) {
	if h != nil {
		mux.Handle("GET "+telemetry.MetricsPath, h)
	}
}
