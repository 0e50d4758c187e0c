package server

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/brook-streams/brook/pkg/telemetry"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/recovery"
)

// MeterName is the instrumentation scope of the coordinator's metrics.
const MeterName = "github.com/brook-streams/brook/services/coordinator"

// Attribute keys of the coordinator's metrics.
const (
	attrReason      = attribute.Key("brook.failover.reason")
	attrWait        = attribute.Key("brook.failover.wait")
	attrStatus      = attribute.Key("brook.stream.status")
	attrNodeState   = attribute.Key("brook.node.state")
	attrCommand     = attribute.Key("brook.raft.command")
	attrErrorType   = attribute.Key("error.type")
	attrMoveBy      = attribute.Key("brook.move.by")
	attrMoveOutcome = attribute.Key("brook.move.outcome")
	attrProbeResult = attribute.Key("brook.probe.outcome")
	attrProbeExpire = attribute.Key("brook.probe.expired")
	proposeFailure  = "unavailable"
)

// metrics are the coordinator's instruments, made once per process from
// Options.MeterProvider (a no-op provider when nil). Failovers started and
// completed, and the failover duration, are recorded by the replica that
// leads when they happen; the gauges are read at collection time from this
// replica's applied state (every replica reports the same numbers, up to
// its lag; take one, or the max).
type metrics struct {
	started   metric.Int64Counter
	completed metric.Int64Counter
	moves     metric.Int64Counter
	probes    metric.Int64Counter
	duration  metric.Float64Histogram
	proposal  metric.Float64Histogram

	pending  metric.Int64ObservableGauge
	waiting  metric.Int64ObservableGauge
	streams  metric.Int64ObservableGauge
	underRep metric.Int64ObservableGauge
	atRisk   metric.Int64ObservableGauge
	nodes    metric.Int64ObservableGauge
	leader   metric.Int64ObservableGauge
	reg      metric.Registration

	opts telemetry.AttrOptions // by reason or command, built once
}

func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	mt := telemetry.Meter(mp, MeterName)
	m := &metrics{}
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	m.started, err = mt.Int64Counter("brook.coordinator.failover.started", metric.WithUnit("{failover}"),
		metric.WithDescription("Failovers (pending recoveries) recorded by this coordinator while it led, by reason."))
	add(err)
	m.completed, err = mt.Int64Counter("brook.coordinator.failover.completed", metric.WithUnit("{failover}"),
		metric.WithDescription("Failovers committed by this coordinator's recovery workers, by reason."))
	add(err)
	m.moves, err = mt.Int64Counter("brook.coordinator.move.count", metric.WithUnit("{move}"),
		metric.WithDescription("Planned owner moves run by this coordinator, by who asked (admin, drain, balance) and outcome (started, completed, aborted)."))
	add(err)
	m.probes, err = mt.Int64Counter("brook.coordinator.node.probe", metric.WithUnit("{probe}"),
		metric.WithDescription("Liveness probes this leader sent before a TTL expiry, by outcome (no_responders, answered, timeout, aborted) and whether the host was expired (false: the expiry was withdrawn, or the probe aborted)."))
	add(err)
	m.duration, err = mt.Float64Histogram("brook.coordinator.failover.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from a failover's detection (its pending recovery's since) to its commit, by reason."),
		metric.WithExplicitBucketBoundaries(telemetry.FailoverBuckets...))
	add(err)
	m.proposal, err = mt.Float64Histogram("brook.coordinator.raft.proposal.duration", metric.WithUnit("s"),
		metric.WithDescription("Time of a Raft proposal from this coordinator until it is applied (retries included), by command; error.type is set when it failed."),
		metric.WithExplicitBucketBoundaries(telemetry.LatencyBuckets...))
	add(err)
	m.pending, err = mt.Int64ObservableGauge("brook.coordinator.failover.pending", metric.WithUnit("{failover}"),
		metric.WithDescription("Pending recoveries in the state, by reason."))
	add(err)
	m.waiting, err = mt.Int64ObservableGauge("brook.coordinator.failover.waiting", metric.WithUnit("{failover}"),
		metric.WithDescription("Pending recoveries whose worker recorded a wait, by what it waits for (answers, confirmed_prefix)."))
	add(err)
	m.streams, err = mt.Int64ObservableGauge("brook.coordinator.stream.count", metric.WithUnit("{stream}"),
		metric.WithDescription("Streams by status (serving, recovering, waiting)."))
	add(err)
	m.underRep, err = mt.Int64ObservableGauge("brook.coordinator.stream.under_replicated", metric.WithUnit("{stream}"),
		metric.WithDescription("Streams whose assignment holds fewer copies than the stream's E."))
	add(err)
	m.atRisk, err = mt.Int64ObservableGauge("brook.coordinator.stream.under_replicated_at_risk", metric.WithUnit("{stream}"),
		metric.WithDescription("Under-replicated streams where one more loss would lose confirmed records: W of their assignment is now 1."))
	add(err)
	m.nodes, err = mt.Int64ObservableGauge("brook.coordinator.node.count", metric.WithUnit("{node}"),
		metric.WithDescription("Stream hosts by liveness state (live, expired, draining, left)."))
	add(err)
	m.leader, err = mt.Int64ObservableGauge("brook.coordinator.raft.leader",
		metric.WithDescription("1 while this coordinator leads the Raft shard (and runs the controller), 0 otherwise."))
	add(err)
	return m, errors.Join(errs...)
}

// failoverStarted counts a pending recovery this leader recorded.
func (m *metrics) failoverStarted(reason string) {
	if m == nil {
		return
	}
	m.started.Add(context.Background(), 1, m.opts.Of(attrReason.String(reason)))
}

// failoverCommitted is recovery.Worker.Committed: it counts the failover
// and records its duration from the pending recovery's since.
func (m *metrics) failoverCommitted(pr wire.PendingRecovery, at time.Time) {
	if m == nil {
		return
	}
	ctx := context.Background()
	opt := m.opts.Of(attrReason.String(pr.Reason))
	m.completed.Add(ctx, 1, opt)
	if pr.Since > 0 {
		m.duration.Record(ctx, max(at.Sub(time.UnixMilli(pr.Since)).Seconds(), 0), opt)
	}
}

// probed counts a liveness probe before a TTL expiry by its outcome and
// whether the host was expired after it.
func (m *metrics) probed(outcome string, expired bool) {
	if m == nil {
		return
	}
	m.probes.Add(context.Background(), 1, metric.WithAttributes(attrProbeResult.String(outcome), attrProbeExpire.Bool(expired)))
}

// proposed is raftstore.Config.OnPropose.
// moveStarted and moveEnded count planned moves by who asked and outcome.
func (m *metrics) moveStarted(why string) { m.move(why, "started") }

func (m *metrics) moveEnded(why string, ok bool) {
	if ok {
		m.move(why, "completed")
	} else {
		m.move(why, "aborted")
	}
}

func (m *metrics) move(why, outcome string) {
	if m == nil {
		return
	}
	m.moves.Add(context.Background(), 1, metric.WithAttributes(attrMoveBy.String(why), attrMoveOutcome.String(outcome)))
}

func (m *metrics) proposed(op string, took time.Duration, err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.proposal.Record(context.Background(), took.Seconds(), metric.WithAttributes(attrCommand.String(op), attrErrorType.String(proposeFailure)))
		return
	}
	m.proposal.Record(context.Background(), took.Seconds(), m.opts.Of(attrCommand.String(op)))
}

// observe registers the callback of the gauges: one stale read of the
// counts (under the state machine's read lock, no copy of the state) and
// the leadership flag.
func (m *metrics) observe(s *Server) error {
	reg, err := telemetry.Meter(s.opt.MeterProvider, MeterName).RegisterCallback(
		func(_ context.Context, o metric.Observer) error {
			if s.closed.Load() {
				return nil
			}
			leader := int64(0)
			if s.store.IsLeader() {
				leader = 1
			}
			o.ObserveInt64(m.leader, leader)
			c, err := s.store.LocalCounts()
			if err != nil {
				return nil // no state yet: the gauges are left out
			}
			for status, n := range c.StreamsByStatus {
				o.ObserveInt64(m.streams, int64(n), metric.WithAttributes(attrStatus.String(status)))
			}
			for state, n := range c.NodesByState {
				o.ObserveInt64(m.nodes, int64(n), metric.WithAttributes(attrNodeState.String(state)))
			}
			o.ObserveInt64(m.underRep, int64(c.UnderReplicated))
			o.ObserveInt64(m.atRisk, int64(c.UnderReplicatedAtRisk))
			// The usual reasons and waits are reported at 0 too, so that
			// their series exist before the first failover.
			for _, r := range []string{"expired", "left", "drain"} {
				c.PendingByReason[r] += 0
			}
			for _, k := range []string{recovery.WaitKindAnswers, recovery.WaitKindPrefix} {
				c.WaitingByKind[k] += 0
			}
			for reason, n := range c.PendingByReason {
				o.ObserveInt64(m.pending, int64(n), metric.WithAttributes(attrReason.String(reason)))
			}
			for kind, n := range c.WaitingByKind {
				o.ObserveInt64(m.waiting, int64(n), metric.WithAttributes(attrWait.String(kind)))
			}
			return nil
		}, m.pending, m.waiting, m.streams, m.underRep, m.atRisk, m.nodes, m.leader)
	if err != nil {
		return err
	}
	m.reg = reg
	return nil
}
