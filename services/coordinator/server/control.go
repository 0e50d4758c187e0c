package server

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/brook-streams/brook/pkg/telemetry/tracecontext"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/controller"
	"github.com/brook-streams/brook/services/coordinator/liveness"
	"github.com/brook-streams/brook/services/coordinator/state"
)

// controlLoop runs on every replica but acts only while this replica leads:
// each round reads the state (linearizably), plans with
// controller.Plan, executes the actions as guarded proposals, keeps one
// recovery worker per pending recovery and announces assignment changes.
// Losing leadership cancels the leader context, which stops the workers.
func (s *Server) controlLoop(ctx context.Context) {
	defer close(s.loopDone)
	tick := time.NewTicker(s.opt.ControlInterval)
	defer tick.Stop()
	// lead holds the leader context; cancelling it stops the workers.
	var lead struct {
		ctx  context.Context
		stop context.CancelFunc
	}
	lead.stop = func() {}
	defer func() { lead.stop() }()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-s.kick:
		}
		s.flushWaits()
		leading := s.store.IsLeader()
		s.mu.Lock()
		was := s.leading
		s.leading = leading
		if leading && !was {
			s.leaderSince = s.opt.Now()
			s.noticed = 0
			s.settling = controller.Settling{} // a new term's balancer waits its quiet period afresh
		}
		s.mu.Unlock()
		switch {
		case leading && !was:
			lead.ctx, lead.stop = context.WithCancel(ctx)
			s.lastFullPlan = time.Time{} // a new leader's first round plans over everything
			s.log.Info("became raft leader: controller active; node expiry waits one ttl", "ttl", s.opt.TTL.String())
		case !leading && was:
			lead.stop()
			s.stopWorkers()
			s.forgetMovesSeen(nil) // a next term times its graces afresh
			s.log.Info("lost raft leadership: controller and recovery workers stopped")
		}
		if leading {
			if s.controlOnce(lead.ctx) {
				s.poke() // something changed: plan again on the new state
			}
		}
	}
}

// waitSummaryEvery is how often the recovery workers' repeated waits are
// summarized in one log line (recovery.WaitLog).
const waitSummaryEvery = 5 * time.Second

// flushWaits logs the summary of the workers' repeated waits once per
// waitSummaryEvery. Called by the control loop's goroutine only.
func (s *Server) flushWaits() {
	now := s.opt.Now()
	if now.Sub(s.waitsFlushed) >= waitSummaryEvery {
		s.waitsFlushed = now
		s.waits.Flush(now)
	}
}

// fullPlanEvery is how often the control loop plans over the whole state
// rather than over the streams concerned (see controller.Plan): a safety
// net that would catch, and log, a stream the state machine's index missed.
const fullPlanEvery = 10 * time.Second

// sealedEvery is how often the control loop looks at every copy the hosts
// reported, to find the sealed ones (controller.SealedReports): that is the
// one input of a plan that needs all of them (30,000 at 10,000 streams of
// three copies). It copies only the sealed ones (Tracker.ViewSealed); the
// rounds copy the hosts' liveness and the reported copies of the streams
// they plan, nothing more, and only the full round copies everything.
const sealedEvery = time.Second

// controlOnce runs one planning round and reports whether it changed the
// state.
func (s *Server) controlOnce(ctx context.Context) bool {
	now := s.opt.Now()
	s.mu.Lock()
	since := s.leaderSince
	s.mu.Unlock()
	heard, deaf := s.hearing.view(s.nc)
	full := now.Sub(s.lastFullPlan) >= fullPlanEvery
	var nodes map[string]liveness.Seen
	if full {
		nodes = s.live.View()
		s.sealed = controller.SealedReports(controller.Liveness{Nodes: nodes})
		s.lastSealedScan = now
	} else {
		nodes = s.live.ViewStream("") // every host's liveness, no copies (no stream is named "")
		if now.Sub(s.lastSealedScan) >= sealedEvery {
			s.sealed = controller.SealedReports(controller.Liveness{Nodes: s.live.ViewSealed()})
			s.lastSealedScan = now
		}
	}
	live := controller.Liveness{LeaderSince: since, HeardSince: heard, Deaf: deaf, Nodes: nodes, Probing: s.probingNodes(),
		Grace: s.advisoryGrace(now)}
	losing := func(st *state.State) []string { return controller.Losing(st, live, now, s.params) }
	sealed := s.sealed
	var q state.Query = state.QueryControl{Losing: losing, Extra: sealed}
	if full {
		q = state.QueryAll{}
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	v, err := s.store.Read(rctx, q)
	cancel()
	if err != nil {
		// Log the first failure of a run, not every tick of an outage.
		if ctx.Err() == nil && !s.readFailing {
			s.log.Warn("controller: read state failed; retrying every tick", "err", err)
		}
		s.readFailing = true
		return false
	}
	if s.readFailing {
		s.log.Info("controller: state readable again")
		s.readFailing = false
	}
	st := v.(*state.State)
	if !full {
		s.addCopies(nodes, st)
	}
	acts := controller.Plan(st, live, now, s.params)
	if full {
		s.lastFullPlan = now
		s.checkConcerned(st, acts, losing(st), sealed)
	}
	changed := s.executeAll(ctx, st, acts, now)
	if ctx.Err() != nil {
		return false
	}
	pending := st.Pending()
	s.forgetMovesSeen(pending)
	for _, name := range pending {
		if pr := st.Streams[name].Recovery; !s.moverRuns(pr, now) {
			s.startWorker(ctx, name, pr.Transition)
		}
	}
	s.announce(st)
	// The balancer reads its own view (from the state's indexes), once
	// per --balance-interval, not after actions that changed the state.
	if !deaf && !changed {
		s.balance(ctx) // admin_move.go
	}
	return changed
}

// addCopies adds to nodes (a view without copies) what each host reported
// of the streams in st, the streams a round plans over.
func (s *Server) addCopies(nodes map[string]liveness.Seen, st *state.State) {
	for id, seen := range s.live.ViewStreams(maps.Keys(st.Streams)) {
		if n, known := nodes[id]; known && seen.Copies != nil {
			n.Copies = seen.Copies
			nodes[id] = n
		}
	}
}

// checkConcerned logs the streams a full round planned for that a round
// over the streams concerned would have left out: it would be a bug of the
// state machine's index, and the full round has just made up for it.
func (s *Server) checkConcerned(st *state.State, acts []controller.Action, losing, sealed []string) {
	concerned := map[string]bool{}
	for _, name := range st.Concerned(losing, sealed) {
		concerned[name] = true
	}
	for _, a := range acts {
		if a.Stream != "" && !concerned[a.Stream] {
			s.log.Error("controller: the full round planned for a stream the incremental rounds leave out", "stream", a.Stream,
				"action", a.Kind, "reason", a.Reason)
		}
	}
}

// maxConcurrentActions bounds the stream actions of one round in flight
// at once. A host's expiry at 10,000 streams plans about 2,500 recovery
// recordings in one round, and their pace sets when the last workers
// start: at 64 in flight the last was recorded 2.2-3.3 s after the kill
// on a fast machine, at 256 1.3-2.6 s, and the owned streams' p99 was
// lower in 9 of 12 alternated runs (docs/benchmarks.md, session 51).
// Dragonboat takes up to 2,048 proposals queued (its
// IncomingProposalQueueLength), which this leaves room for beside the
// workers' own commits.
const maxConcurrentActions = 256

// executeAll carries out a round's actions and reports whether any changed
// the state. Node actions go first and in order: the stream actions were
// planned against the state they leave (an expiry fails the node's streams
// over). A TTL expiry is not proposed here but handed to a liveness probe
// (startProbe), which proposes it or withdraws it on its own; the stream
// actions of the streams with a copy on that node are left out, as they
// rest on an expiry not made yet (once it is, the next round plans them). Stream actions are independent guarded writes, each on its own
// stream's version, so they run concurrently: a host that owned hundreds
// of streams has them all recorded for recovery in about one Raft round
// trip (Dragonboat batches concurrent proposals), not one after another.
func (s *Server) executeAll(ctx context.Context, st *state.State, acts []controller.Action, now time.Time) bool {
	changed := false
	i := 0
	var probed map[string]bool
	for ; i < len(acts) && acts[i].Stream == ""; i++ {
		if ctx.Err() != nil {
			return changed
		}
		if a := acts[i]; a.Kind == controller.ActExpire && a.Reason == controller.DetectTTL {
			s.startProbe(ctx, a, now)
			if probed == nil {
				probed = map[string]bool{}
			}
			probed[a.Node] = true
			continue
		}
		if s.execute(ctx, st, acts[i], now) {
			changed = true
		}
	}
	if probed != nil {
		acts = slices.DeleteFunc(slices.Clone(acts[i:]), func(a controller.Action) bool { return restsOn(st, a, probed) })
		i = 0
	}
	// The plan makes at most one action per stream (and were there two,
	// the second would read a version the first moved, and be refused).
	var wg sync.WaitGroup
	var streamChanged atomic.Bool
	sem := make(chan struct{}, maxConcurrentActions)
	for _, a := range acts[i:] {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if s.execute(ctx, st, a, now) {
				streamChanged.Store(true)
			}
		}()
	}
	wg.Wait()
	return changed || streamChanged.Load()
}

// restsOn reports whether stream action a involves one of nodes: it names
// it (the lost owner of a recovery) or the stream has a copy there.
func restsOn(st *state.State, a controller.Action, nodes map[string]bool) bool {
	if nodes[a.Node] {
		return true
	}
	if cur := st.Streams[a.Stream]; cur != nil {
		for n := range nodes {
			if cur.Assignment.Includes(n) {
				return true
			}
		}
	}
	return false
}

// heardSincePlan reports whether node expiry a, planned at now, is to be
// withdrawn because seen, the node's liveness read just before the
// proposal, was heard after now (same incarnation). A round plans on a
// liveness view taken before its linearizable read of the state, which
// took over a second on a loaded machine: half the false expiries of a
// 10,000-stream run were of hosts heard again 0.1 to 1.9 s after the
// round's now, before its expiry was even proposed (issue 17). A host heard
// is alive; the next round judges it again from its new silence.
func heardSincePlan(seen liveness.Seen, a controller.Action, now time.Time) bool {
	return a.Kind == controller.ActExpire && seen.Incarnation == a.Incarnation && seen.LastSeen.After(now)
}

// execute carries out one action; it reports whether the state changed.
func (s *Server) execute(ctx context.Context, st *state.State, a controller.Action, now time.Time) bool {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	log := s.log.With("action", a.Kind)
	switch a.Kind {
	case controller.ActRegister, controller.ActLeave, controller.ActExpire:
		if a.Kind == controller.ActExpire {
			if seen, ok := s.live.ViewStream("")[a.Node]; ok && heardSincePlan(seen, a, now) {
				log.Info("controller: expiry withdrawn: the node was heard after the round planned it", "node", a.Node,
					"heard_after_ms", seen.LastSeen.Sub(now).Milliseconds())
				return false
			}
		}
		r, err := s.store.Propose(pctx, a.Command(now))
		if err != nil {
			log.Warn("controller: node change failed", "node", a.Node, "err", err)
			return false
		}
		if r.Err() != nil || !r.Changed {
			log.Debug("controller: node change refused", "node", a.Node, "code", r.Code, "msg", r.Message)
			return false
		}
		switch a.Kind {
		case controller.ActRegister:
			log.Info("node live", "node", a.Node, "incarnation", a.Incarnation, "version", r.Version)
		case controller.ActLeave:
			log.Info("node left: failing its streams over", "node", a.Node, "version", r.Version)
		default:
			// How long it had been silent here (by the time of the
			// proposal's commit: negative when a beat came meanwhile),
			// how long the last decoded beat took from its building on
			// the host to its arrival here, and how far decoding lags
			// behind arrivals: a late send, a late delivery and a late
			// read look alike from the TTL alone.
			seen := s.live.ViewStream("")[a.Node]
			log.Warn("node expired", "node", a.Node, "how", a.Reason, "version", r.Version,
				"silent", now.Sub(seen.LastSeen).Round(time.Millisecond).String(),
				"last_decoded_transit_ms", seen.LastDecoded.UnixMilli()-seen.LastAtMS,
				"decode_lag", seen.LastSeen.Sub(seen.LastDecoded).Round(time.Millisecond).String())
		}
		return true
	case controller.ActUpdate:
		r, err := s.store.Propose(pctx, state.AssignUpdate(a.Stream, a.Version, a.Assignment, now.UnixMilli()))
		if err != nil {
			log.Warn("controller: assignment update failed", "stream", a.Stream, "err", err)
			return false
		}
		if r.Err() != nil {
			log.Debug("controller: assignment update refused", "stream", a.Stream, "code", r.Code, "msg", r.Message)
			return false
		}
		log.Info("followers added without recovery", "stream", a.Stream, "why", a.Reason, "owner", a.Assignment.Owner,
			"followers", a.Assignment.Followers, "epoch", a.Assignment.Epoch, "policy", a.Assignment.Policy, "version", r.Version)
		s.notify(a.Assignment.Copies(), r.Version)
		return true
	case controller.ActRecover:
		return s.beginRecovery(ctx, st, a, now)
	}
	return false
}

// beginRecovery records a pending recovery under a new "brook.failover"
// trace: a "detect" span (how and when the owner was lost) and a
// "pending_recovery.commit" span around the guarded write. The root span's
// traceparent is stored in the pending recovery, so the worker, on this or
// a later leader, continues the same trace.
func (s *Server) beginRecovery(ctx context.Context, st *state.State, a controller.Action, now time.Time) bool {
	started := now
	if a.LostSinceMS > 0 && a.LostSinceMS <= now.UnixMilli() {
		started = time.UnixMilli(a.LostSinceMS)
	}
	old := st.Streams[a.Stream].Assignment
	rootCtx, root := s.tracer.Start(context.WithoutCancel(ctx), "brook.failover", trace.WithNewRoot(), trace.WithTimestamp(started),
		trace.WithAttributes(
			attribute.String("stream", a.Stream),
			attribute.String("reason", a.Reason),
			attribute.String("old_owner", old.Owner),
			attribute.Int64("old_epoch", int64(old.Epoch)),
			attribute.String("proposed_owner", a.Assignment.Owner),
		))
	defer root.End()
	_, det := s.tracer.Start(rootCtx, "detect", trace.WithTimestamp(started), trace.WithAttributes(
		attribute.String("node", a.Node),
		attribute.String("reason", a.Reason),
		attribute.String("how", a.Detected),
	))
	det.End(trace.WithTimestamp(now))
	traceID := root.SpanContext().TraceID().String()
	traceParent := tracecontext.TraceParent(rootCtx)

	pctx, pc := s.tracer.Start(rootCtx, "pending_recovery.commit", trace.WithAttributes(attribute.Int64("version", int64(a.Version))))
	pctx, cancel := context.WithTimeout(pctx, 5*time.Second)
	defer cancel()
	r, err := s.store.Propose(pctx, state.RecoveryBegin(a.Stream, a.Version, a.Assignment, a.Reason, traceID, traceParent, now.UnixMilli()))
	if err == nil {
		err = r.Err()
	}
	if err != nil {
		pc.RecordError(err)
		pc.SetStatus(codes.Error, "not recorded")
		pc.End()
		root.SetStatus(codes.Error, "pending recovery not recorded")
		s.log.Debug("controller: pending recovery not recorded", "stream", a.Stream, "err", err)
		return false
	}
	pc.SetAttributes(attribute.Int64("transition", int64(r.Transition)))
	pc.End()
	s.metrics.failoverStarted(a.Reason)
	s.log.Warn("recovery recorded", "stream", a.Stream, "transition", r.Transition, "reason", a.Reason,
		"how", a.Detected, "old_owner", old.Owner, "old_epoch", old.Epoch, "proposed_owner", a.Assignment.Owner,
		"trace_id", traceID, "version", r.Version)
	s.startWorker(ctx, a.Stream, r.Transition)
	return true
}

// startWorker runs a recovery worker for transition of stream unless one
// runs already. A worker for an older transition is stopped (it would stop
// itself on its next read anyway).
func (s *Server) startWorker(leaderCtx context.Context, stream string, transition uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.leading || leaderCtx.Err() != nil || s.isMoving(stream) {
		return // a planned move on this replica runs its own worker
	}
	if w := s.workers[stream]; w != nil {
		if w.transition == transition {
			return
		}
		w.cancel()
	}
	wctx, cancel := context.WithCancel(leaderCtx)
	run := &workerRun{transition: transition, cancel: cancel}
	s.workers[stream] = run
	worker := s.newWorker()
	s.workerWG.Add(1)
	go func() {
		defer s.workerWG.Done()
		defer cancel()
		err := worker.Run(wctx, stream)
		if err != nil && wctx.Err() == nil {
			s.log.Error("recovery worker stopped", "stream", stream, "transition", transition, "err", err)
		}
		s.mu.Lock()
		if s.workers[stream] == run {
			delete(s.workers, stream)
		}
		s.mu.Unlock()
		s.poke()
	}()
}

// nodeGone reports whether the state (as this replica last applied it)
// counts node as expired or left, for the recovery worker: once R copies
// answered a seal round it does not wait for copies on such nodes.
func (s *Server) nodeGone(node string) bool {
	ns, err := s.store.LocalNodeState(node)
	return err == nil && (ns == wire.NodeExpired || ns == wire.NodeLeft)
}

// stopWorkers cancels every running worker.
func (s *Server) stopWorkers() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, w := range s.workers {
		w.cancel()
		delete(s.workers, name)
	}
}

// announce publishes an assignment notice to every known node when the
// assignments changed since this leader last announced (commits by other
// replicas' admin handlers, by the worker, or before it led).
func (s *Server) announce(st *state.State) {
	s.mu.Lock()
	due := st.AssignVersion > s.noticed
	if due {
		s.noticed = st.AssignVersion
	}
	s.mu.Unlock()
	if due {
		s.notify(st.SortedNodes(), st.Version)
	}
}

// notifyAll publishes AssignNotice{version} to every node this replica
// knows, or to fallback if it cannot read them. It reads the node list
// only: a copy of the whole state per write, under the state machine's
// lock, delayed the other commits and their notices when hundreds of
// streams failed over at once.
func (s *Server) notifyAll(version uint64, fallback []string) {
	s.notifyAllOf(wire.AssignNotice{Version: version}, fallback)
}

// notifyAllOf is notifyAll of notice n.
func (s *Server) notifyAllOf(n wire.AssignNotice, fallback []string) {
	nodes, err := s.store.LocalNodes()
	if err != nil {
		nodes = fallback
	}
	s.notifyOf(nodes, n)
}

// notify publishes AssignNotice{version} to each node.
func (s *Server) notify(nodes []string, version uint64) {
	s.notifyOf(nodes, wire.AssignNotice{Version: version})
}

// notifyOf publishes notice n to each node.
func (s *Server) notifyOf(nodes []string, n wire.AssignNotice) {
	data, err := json.Marshal(n)
	if err != nil {
		return
	}
	for _, n := range nodes {
		if err := s.nc.Publish(wire.AssignNoticeSubject(n), data); err != nil {
			s.log.Warn("assignment notice not sent", "node", n, "err", err)
		}
	}
}
