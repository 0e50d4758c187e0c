package server

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/brook-streams/brook/pkg/connwatch"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/attention/judge"
	"github.com/brook-streams/brook/services/attention/telemetry"
	"github.com/brook-streams/brook/services/attention/watch"
)

// ListQueue is the queue group of brook.attention.list, so that one of
// several attention instances answers.
const ListQueue = "brook-attention"

// Options configure a Service.
type Options struct {
	Judge judge.Config
	// Refresh is the period of the coordinator pull and of judging, which
	// keeps since-when and follower tracks current when nobody asks.
	Refresh        time.Duration
	RequestTimeout time.Duration
	Logger         *slog.Logger
	// TracerProvider traces pulls and list requests; nil traces nothing.
	TracerProvider trace.TracerProvider
	// MeterProvider makes the service's metrics (metrics.go); nil records
	// nothing. MetricsHandler, when set, is served at GET /metrics by
	// Handler.
	MeterProvider  metric.MeterProvider
	MetricsHandler http.Handler
}

// Service judges and serves the attention list.
type Service struct {
	nc *nats.Conn
	w  *watch.Watcher
	// bus watches nc for Ready (/healthz) without waiting for the
	// connection's lock (connwatch); Run runs it.
	bus    *connwatch.Watch
	opts   Options
	log    *slog.Logger
	tracer trace.Tracer

	metrics *metrics

	mu     sync.Mutex // serialises judging: the memory is not concurrent
	mem    *judge.Memory
	listed map[string]wire.AttentionEntry // the last list, to log what appears and clears
}

// New returns a service on nc; Run starts it.
func New(nc *nats.Conn, opts Options) *Service {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.TracerProvider == nil {
		opts.TracerProvider = noop.NewTracerProvider()
	}
	if opts.Refresh <= 0 {
		opts.Refresh = time.Second
	}
	tracer := opts.TracerProvider.Tracer("github.com/brook-streams/brook/services/attention")
	met, err := newMetrics(opts.MeterProvider)
	if err != nil {
		// Only an invalid instrument name fails, which the tests catch.
		opts.Logger.Error("attention metrics not recorded", "err", err)
		met, _ = newMetrics(nil)
	}
	return &Service{
		nc:   nc,
		bus:  connwatch.New(nc, connwatch.Interval, connwatch.Stale),
		opts: opts,
		log:  opts.Logger,
		w: watch.New(nc, watch.Options{
			Refresh:        opts.Refresh,
			RequestTimeout: opts.RequestTimeout,
			Logger:         opts.Logger,
			Tracer:         tracer,
		}),
		tracer:  tracer,
		metrics: met,
		mem:     judge.NewMemory(),
		listed:  map[string]wire.AttentionEntry{},
	}
}

// List judges the list now. ok is false until the coordinator's state has
// been pulled once.
func (s *Service) List() (reply wire.AttentionListReply, st watch.Status, ok bool) {
	// Snapshot and judge under one lock, so judgings happen in the order of
	// their clocks and the memory never sees time go back.
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	v, hbs, st := s.w.Snapshot(now)
	if !st.Ready {
		return wire.AttentionListReply{Entries: []wire.AttentionEntry{}, AtMS: now.UnixMilli()}, st, false
	}
	entries := judge.Judge(s.opts.Judge, v, hbs, s.mem, now)
	s.logChanges(entries)
	s.metrics.record(entries)
	return wire.AttentionListReply{Entries: entries, Version: v.Version, AtMS: now.UnixMilli()}, st, true
}

// logDetailMax is the most entries appearing and clearing in one judging
// that are logged a line each; past it, logChanges logs a line per event
// and kind with the count and a few examples. A mass failover lists and
// clears thousands of entries in one judging, and a line each cost CPU on a
// machine whose coordinators were starved (issue 17: a cost in proportion
// to what changed, once, not per entry of it).
const logDetailMax = 16

// logExamples is how many entries a summary line names.
const logExamples = 3

// logChanges logs entries that appeared and cleared since the last judging.
func (s *Service) logChanges(entries []wire.AttentionEntry) {
	now := make(map[string]wire.AttentionEntry, len(entries))
	var appeared, cleared []wire.AttentionEntry
	for _, e := range entries {
		k := e.Kind + "/" + e.Stream + "/" + e.Node
		now[k] = e
		if _, had := s.listed[k]; !had {
			appeared = append(appeared, e)
		}
	}
	for k, e := range s.listed {
		if _, has := now[k]; !has {
			cleared = append(cleared, e)
		}
	}
	s.listed = now
	if len(appeared)+len(cleared) <= logDetailMax {
		for _, e := range appeared {
			s.log.Info("attention", "event", "listed", "kind", e.Kind, "severity", e.Severity,
				"stream", e.Stream, "node", e.Node, "headline", e.Headline)
		}
		for _, e := range cleared {
			s.log.Info("attention", "event", "cleared", "kind", e.Kind, "stream", e.Stream, "node", e.Node)
		}
		return
	}
	s.logSummary("listed", appeared, len(entries))
	s.logSummary("cleared", cleared, len(entries))
}

// logSummary logs, for each kind of es (the entries of one event), how many
// there were, the first few by stream and node, and the first one's
// headline; listed is the length of the list now.
func (s *Service) logSummary(event string, es []wire.AttentionEntry, listed int) {
	byKind := map[string][]wire.AttentionEntry{}
	for _, e := range es {
		byKind[e.Kind] = append(byKind[e.Kind], e)
	}
	for _, kind := range slices.Sorted(maps.Keys(byKind)) {
		group := byKind[kind]
		slices.SortFunc(group, func(a, b wire.AttentionEntry) int {
			return cmp.Or(cmp.Compare(a.Stream, b.Stream), cmp.Compare(a.Node, b.Node))
		})
		examples := make([]string, 0, logExamples)
		for _, e := range group[:min(len(group), logExamples)] {
			examples = append(examples, strings.Trim(e.Stream+"/"+e.Node, "/"))
		}
		args := []any{"event", event, "kind", kind, "count", len(group), "examples", examples, "listed_now", listed}
		if event == "listed" {
			args = append(args, "severity", group[0].Severity, "headline", group[0].Headline)
		}
		s.log.Info("attention", args...)
	}
}

// Ready reports whether the service can answer: the coordinator's state has
// been pulled and NATS is connected. It never waits for the NATS connection
// (connwatch).
func (s *Service) Ready() (bool, string) {
	if err := s.bus.Err(); err != nil {
		return false, err.Error()
	}
	if !s.w.Pulled() {
		return false, "the coordinators' state has not been pulled yet"
	}
	return true, "ok"
}

// Run answers brook.attention.list, follows the coordinator and heartbeats,
// and judges every Refresh, until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	sub, err := s.nc.QueueSubscribe(wire.AttentionList, ListQueue, s.onList)
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", wire.AttentionList, err)
	}
	defer func() {
		if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			s.log.Warn("unsubscribe", "subject", sub.Subject, "err", err)
		}
	}()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watchDone := make(chan error, 1)
	go func() { watchDone <- s.w.Run(ctx) }()
	busDone := make(chan struct{})
	go func() { defer close(busDone); s.bus.Run(ctx) }()
	lossesDone := make(chan struct{})
	go func() { defer close(lossesDone); connwatch.Losses(ctx, s.nc, s.bus.Lost) }()
	defer func() { <-lossesDone }()
	defer func() { cancel(); <-busDone }()

	tick := time.NewTicker(s.opts.Refresh)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return <-watchDone
		case err := <-watchDone:
			// Both channels are ready when ctx ends and the watch has
			// already returned; that is a clean stop, not a failure.
			if ctx.Err() != nil {
				return err
			}
			if err == nil {
				return errors.New("watch ended before its context")
			}
			return fmt.Errorf("watch: %w", err)
		case <-tick.C:
			s.List()
		}
	}
}

func (s *Service) onList(msg *nats.Msg) {
	ctx, span := s.tracer.Start(telemetry.Extract(context.Background(), msg), "attention.list",
		trace.WithSpanKind(trace.SpanKindServer))
	defer span.End()
	reply, _, ok := s.List()
	if !ok {
		s.respondError(msg, wire.Errorf(wire.CodeUnavailable, "attention has not pulled the coordinators' state yet"))
		return
	}
	span.SetAttributes(attribute.Int("brook.attention.entries", len(reply.Entries)))
	data, err := json.Marshal(reply)
	if err != nil {
		s.respondError(msg, wire.Errorf(wire.CodeInternal, "encode list: %v", err))
		return
	}
	if err := msg.Respond(data); err != nil {
		s.log.WarnContext(ctx, "answer attention list", "err", err)
	}
}

func (s *Service) respondError(msg *nats.Msg, e *wire.Error) {
	data, _ := json.Marshal(wire.ErrorReply{Error: e})
	out := nats.NewMsg(msg.Reply)
	out.Header.Set(watch.HeaderError, e.Code)
	out.Data = data
	if err := msg.RespondMsg(out); err != nil {
		s.log.Warn("answer attention list", "err", err)
	}
}
