package host

import (
	"context"
	"errors"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/brook-streams/brook/pkg/streamlog"
	"github.com/brook-streams/brook/pkg/telemetry"
	"github.com/brook-streams/brook/pkg/wire"
)

// MeterName is the instrumentation scope of the host's metrics.
const MeterName = "github.com/brook-streams/brook/services/streamhost/host"

// MaxStreamLagSeries caps the per-stream follower lag series
// (brook.host.stream.lag.*) one host reports per collection: the followers
// that lag most, by records. The per-follower maximum
// (brook.host.follower.lag.*) always covers every follower.
const MaxStreamLagSeries = 20

// Attribute keys of the host's metrics.
const (
	attrErrorType = attribute.Key("error.type")
	attrRole      = attribute.Key("brook.copy.role")
	attrFollower  = attribute.Key("brook.follower")
	attrStream    = attribute.Key("brook.stream")
	attrStage     = attribute.Key("brook.publish.stage")
	attrReplKind  = attribute.Key("brook.replication.kind")
	attrLinkSide  = attribute.Key("brook.link.side")
)

// The kinds of replication messages an owner host receives that
// brook.host.replication.received counts (issue 17: what follower copies
// cost their owner's host): a follower copy's request (a long poll, with
// a reply subject), its standalone ack (without), and a follower host's
// host wait for its copies asleep (idlewait.go).
const (
	replKindRequest  = "request"
	replKindAck      = "ack"
	replKindHostWait = "host_wait"
)

// The stages of a publish's way through the hosts that
// brook.host.publish.stage.duration times (issue 16: where a confirm's
// time goes). The owner's: intake (the publish or publish batch received
// until the appender takes it), append (the Append that writes it until
// its group commit is durable at the owner). A follower's: follower_poll
// (a replication request sent until its reply carrying records came) and
// follower_apply (those records handed to the store until durable there).
// The confirm itself is brook.host.publish.duration (from the append's
// start), so what a confirm waits for after the owner's own fsync is its
// mean less append's.
const (
	stageIntake        = "intake"
	stageAppend        = "append"
	stageFollowerPoll  = "follower_poll"
	stageFollowerApply = "follower_apply"
)

// metrics are the host's instruments. They are made once per host from
// Config.MeterProvider (a no-op provider when nil); the counters and
// histograms are recorded where things happen, the gauges are read by one
// callback at collection time (observe).
type metrics struct {
	confirmed   metric.Int64Counter
	refused     metric.Int64Counter
	confirmDur  metric.Float64Histogram
	appendRecs  metric.Int64Counter
	appendBytes metric.Int64Counter
	fsyncDur    metric.Float64Histogram
	groupSize   metric.Int64Histogram
	seals       metric.Int64Counter
	replRecv    metric.Int64Counter
	replKinds   map[string]metric.AddOption // by kind, built once
	stageDur    metric.Float64Histogram
	stages      map[string]metric.RecordOption // by stage, built once

	copies     metric.Int64ObservableGauge
	lagRecords metric.Int64ObservableGauge
	lagTime    metric.Float64ObservableGauge
	streamLagR metric.Int64ObservableGauge
	streamLagT metric.Float64ObservableGauge
	overflows  metric.Int64ObservableCounter
	links      metric.Int64ObservableGauge
	linkSides  [3]metric.ObserveOption // to owners' hosts, from followers' hosts, from clients
	reg        metric.Registration
	codes      telemetry.AttrOptions // by error code, built once per code
}

// newMetrics creates the instruments; instrument errors only come from
// invalid names, which tests catch, so they are joined and returned.
func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	mt := telemetry.Meter(mp, MeterName)
	m := &metrics{}
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	m.confirmed, err = mt.Int64Counter("brook.host.publish.confirmed", metric.WithUnit("{publish}"),
		metric.WithDescription("Publishes confirmed to their producer (W copies hold the record), repeats of a written record included."))
	add(err)
	m.refused, err = mt.Int64Counter("brook.host.publish.refused", metric.WithUnit("{publish}"),
		metric.WithDescription("Publishes answered with an error, by its code (error.type)."))
	add(err)
	m.confirmDur, err = mt.Float64Histogram("brook.host.publish.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from the append that wrote a publish to its confirm, once per reply (a publish batch's records share one)."),
		metric.WithExplicitBucketBoundaries(telemetry.LatencyBuckets...))
	add(err)
	m.appendRecs, err = mt.Int64Counter("brook.host.append.records", metric.WithUnit("{record}"),
		metric.WithDescription("Records appended by the owners on this host."))
	add(err)
	m.appendBytes, err = mt.Int64Counter("brook.host.append.payload", metric.WithUnit("By"),
		metric.WithDescription("Payload bytes of the records appended by the owners on this host."))
	add(err)
	m.fsyncDur, err = mt.Float64Histogram("brook.host.store.fsync.duration", metric.WithUnit("s"),
		metric.WithDescription("Time of one synced group commit of the store (write-ahead log write and fsync, including any wait behind the group applied before it)."),
		metric.WithExplicitBucketBoundaries(telemetry.LatencyBuckets...))
	add(err)
	m.groupSize, err = mt.Int64Histogram("brook.host.store.group_commit.size", metric.WithUnit("{write}"),
		metric.WithDescription("Writes (owner appends, follower applies, cursor syncs) sharing one synced group commit."),
		metric.WithExplicitBucketBoundaries(telemetry.CountBuckets...))
	add(err)
	m.seals, err = mt.Int64Counter("brook.host.seal.answered", metric.WithUnit("{seal}"),
		metric.WithDescription("Seal requests answered; error.type is set on refusals."))
	add(err)
	m.replRecv, err = mt.Int64Counter("brook.host.replication.received", metric.WithUnit("{message}"),
		metric.WithDescription("Replication messages received by the owners on this host, by kind (brook.replication.kind: request, ack, host_wait)."))
	add(err)
	m.replKinds = map[string]metric.AddOption{}
	for _, k := range []string{replKindRequest, replKindAck, replKindHostWait} {
		m.replKinds[k] = metric.WithAttributeSet(attribute.NewSet(attrReplKind.String(k)))
	}
	m.stageDur, err = mt.Float64Histogram("brook.host.publish.stage.duration", metric.WithUnit("s"),
		metric.WithDescription("Time of one stage of publishes on their way to a confirm (brook.publish.stage: intake, append, follower_poll, follower_apply)."),
		metric.WithExplicitBucketBoundaries(telemetry.LatencyBuckets...))
	add(err)
	m.stages = map[string]metric.RecordOption{}
	for _, st := range []string{stageIntake, stageAppend, stageFollowerPoll, stageFollowerApply} {
		m.stages[st] = metric.WithAttributeSet(attribute.NewSet(attrStage.String(st)))
	}
	m.copies, err = mt.Int64ObservableGauge("brook.host.copy.count", metric.WithUnit("{copy}"),
		metric.WithDescription("Copies held by this host, by the role they play (owner, follower, none)."))
	add(err)
	m.lagRecords, err = mt.Int64ObservableGauge("brook.host.follower.lag.records", metric.WithUnit("{record}"),
		metric.WithDescription("Per follower node, the most records it lacks behind an owner on this host, over the streams it follows."))
	add(err)
	m.lagTime, err = mt.Float64ObservableGauge("brook.host.follower.lag.time", metric.WithUnit("s"),
		metric.WithDescription("Per follower node, the age of the oldest record it lacks behind an owner on this host, over the streams it follows."))
	add(err)
	m.streamLagR, err = mt.Int64ObservableGauge("brook.host.stream.lag.records", metric.WithUnit("{record}"),
		metric.WithDescription("Records a follower lacks behind this host's owner of a stream; only the most lagging followers (at most 20 series)."))
	add(err)
	m.streamLagT, err = mt.Float64ObservableGauge("brook.host.stream.lag.time", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest record a follower lacks behind this host's owner of a stream; the same series as brook.host.stream.lag.records."))
	add(err)
	m.overflows, err = mt.Int64ObservableCounter("brook.host.idle.mark_overflows", metric.WithUnit("{change}"),
		metric.WithDescription("Store changes that found the idle sets' marking queue full; each made the next marking look at every copy watched by parked host waits."))
	add(err)
	m.links, err = mt.Int64ObservableGauge("brook.host.replication.links", metric.WithUnit("{connection}"),
		metric.WithDescription("Direct link connections up (--repl-listen), by side (brook.link.side): follower (this host's to owner hosts), owner (follower hosts' to this one), client (clients' client links to this host)."))
	add(err)
	m.linkSides[0] = metric.WithAttributeSet(attribute.NewSet(attrLinkSide.String("follower")))
	m.linkSides[1] = metric.WithAttributeSet(attribute.NewSet(attrLinkSide.String("owner")))
	m.linkSides[2] = metric.WithAttributeSet(attribute.NewSet(attrLinkSide.String("client")))
	return m, errors.Join(errs...)
}

// observe registers the callback of the host's gauges and observed
// counters.
func (m *metrics) observe(h *Host) error {
	reg, err := telemetry.Meter(h.cfg.MeterProvider, MeterName).RegisterCallback(
		func(ctx context.Context, o metric.Observer) error {
			h.observeCopies(o, m)
			h.observeLag(o, m, time.Now())
			o.ObserveInt64(m.overflows, h.parked.overflows.Load())
			if h.direct != nil {
				toOwners, fromFollowers := h.direct.connections()
				o.ObserveInt64(m.links, int64(toOwners), m.linkSides[0])
				o.ObserveInt64(m.links, int64(fromFollowers), m.linkSides[1])
				o.ObserveInt64(m.links, int64(h.direct.clientConnections()), m.linkSides[2])
			}
			return nil
		}, m.copies, m.lagRecords, m.lagTime, m.streamLagR, m.streamLagT, m.overflows, m.links)
	if err != nil {
		return err
	}
	m.reg = reg
	return nil
}

// unobserve drops the gauges' callback (the host is stopping).
func (m *metrics) unobserve() {
	if m.reg != nil {
		_ = m.reg.Unregister()
	}
}

// publishRefused counts n publishes answered with code.
func (m *metrics) publishRefused(code string, n int) {
	if n > 0 {
		m.refused.Add(context.Background(), int64(n), m.codes.Of(attrErrorType.String(code)))
	}
}

// sealAnswered counts a seal answered; e is its error, or nil.
func (m *metrics) sealAnswered(e *wire.Error) {
	if e == nil {
		m.seals.Add(context.Background(), 1)
		return
	}
	m.seals.Add(context.Background(), 1, m.codes.Of(attrErrorType.String(e.Code)))
}

// replReceived counts one replication message of kind (replKindRequest...)
// received.
func (m *metrics) replReceived(kind string) {
	m.replRecv.Add(context.Background(), 1, m.replKinds[kind])
}

// appended counts a successful append of records holding payload bytes.
func (m *metrics) appended(records, payload int) {
	ctx := context.Background()
	m.appendRecs.Add(ctx, int64(records))
	m.appendBytes.Add(ctx, int64(payload))
}

// stage records that one publish stage (stageIntake...) took d.
func (m *metrics) stage(name string, d time.Duration) {
	m.stageDur.Record(context.Background(), d.Seconds(), m.stages[name])
}

// groupCommit is the store's Options.OnGroupCommit.
func (m *metrics) groupCommit(writes int, took time.Duration) {
	ctx := context.Background()
	m.fsyncDur.Record(ctx, took.Seconds())
	m.groupSize.Record(ctx, int64(writes))
}

// sent counts the replies of one send: confirms (with their latency) and
// refusals.
func (m *metrics) sent(out []outgoing) {
	if len(out) == 0 {
		return
	}
	ctx := context.Background()
	var now time.Time
	confirmed := 0
	for i := range out {
		r := &out[i]
		if r.fail != nil {
			m.refused.Add(ctx, 1, m.codes.Of(attrErrorType.String(r.fail.Code)))
			continue
		}
		confirmed += r.confirms()
		if !r.start.IsZero() {
			if now.IsZero() {
				now = time.Now()
			}
			m.confirmDur.Record(ctx, now.Sub(r.start).Seconds())
		}
	}
	if confirmed > 0 {
		m.confirmed.Add(ctx, int64(confirmed))
	}
}

// observeCopies reports the copies this host holds by role, from the
// store's copy list and each replica's atomic status (no replica lock).
func (h *Host) observeCopies(o metric.Observer, m *metrics) {
	h.mu.Lock()
	roles := make(map[string]*roleStatus, len(h.replicas))
	for name, r := range h.replicas {
		roles[name] = r.status.Load()
	}
	h.mu.Unlock()
	counts := map[string]int64{wire.RoleOwner: 0, wire.RoleFollower: 0, wire.RoleNone: 0}
	for _, c := range h.store.Copies() {
		role := wire.RoleNone
		if st := roles[c.Stream()]; st != nil && st.role != wire.RoleNone && st.streamID == c.StreamID() {
			role = st.role
		}
		counts[role]++
	}
	for role, n := range counts {
		o.ObserveInt64(m.copies, n, metric.WithAttributes(attrRole.String(role)))
	}
}

// followerLag is one follower's lag behind one owner.
type followerLag struct {
	stream, follower string
	records          uint64
	seconds          float64
}

// observeLag reports each follower's lag behind the owners on this host:
// per follower node the worst over its streams, and per stream the
// MaxStreamLagSeries worst lagging followers. Each owner's tails are read
// under its lock; the age of the first record a follower lacks is read
// from the store after the lock is released.
func (h *Host) observeLag(o metric.Observer, m *metrics, now time.Time) {
	var lags []followerLag
	for _, own := range h.owners() {
		tail, followers, acked := own.lagTails()
		for i, node := range followers {
			l := followerLag{stream: own.stream, follower: node}
			if a := acked[i]; a < tail {
				l.records = tail - a
				l.seconds = recordAge(own.c, a, tail, now)
			}
			lags = append(lags, l)
		}
	}
	worst := map[string]followerLag{}
	for _, l := range lags {
		w, ok := worst[l.follower]
		if !ok || l.records > w.records {
			w.records = l.records
		}
		if !ok || l.seconds > w.seconds {
			w.seconds = l.seconds
		}
		worst[l.follower] = w
	}
	for node, w := range worst {
		attrs := metric.WithAttributes(attrFollower.String(node))
		o.ObserveInt64(m.lagRecords, int64(w.records), attrs)
		o.ObserveFloat64(m.lagTime, w.seconds, attrs)
	}
	lags = slices.DeleteFunc(lags, func(l followerLag) bool { return l.records == 0 })
	slices.SortFunc(lags, func(a, b followerLag) int {
		switch {
		case a.records != b.records:
			if a.records > b.records {
				return -1
			}
			return 1
		case a.stream != b.stream:
			if a.stream < b.stream {
				return -1
			}
			return 1
		case a.follower < b.follower:
			return -1
		case a.follower > b.follower:
			return 1
		}
		return 0
	})
	for _, l := range lags[:min(len(lags), MaxStreamLagSeries)] {
		attrs := metric.WithAttributes(attrStream.String(l.stream), attrFollower.String(l.follower))
		o.ObserveInt64(m.streamLagR, int64(l.records), attrs)
		o.ObserveFloat64(m.streamLagT, l.seconds, attrs)
	}
}

// recordAge is how long ago the owner appended the record at from (or,
// when retention removed it, the oldest one kept), in seconds; 0 when it
// cannot be read.
func recordAge(c *streamlog.Copy, from, tail uint64, now time.Time) float64 {
	if head := c.Tails().Head; from < head {
		from = head
	}
	if from >= tail {
		return 0
	}
	recs, err := c.Read(from, 1, 0, tail)
	if err != nil || len(recs) == 0 {
		return 0
	}
	return max(now.Sub(time.Unix(0, recs[0].TimeNS)).Seconds(), 0)
}
