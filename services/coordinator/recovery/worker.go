package recovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/brook-streams/brook/pkg/telemetry/tracecontext"
	"github.com/brook-streams/brook/pkg/wire"
)

// Backoff between rounds: from minBackoff doubling up to maxBackoff.
const (
	minBackoff = 50 * time.Millisecond
	maxBackoff = 2 * time.Second
)

// DefaultSealTimeout is how long a seal is given from when it is sent,
// unless configured: the one default of the coordinator's --seal-timeout,
// of server.Options.SealTimeout and of a Worker without SealTimeout.
const DefaultSealTimeout = 2 * time.Second

// SealQueueAllowance is how long, at most, a seal may wait in its
// Sealer's queue before it is sent, as a multiple of its timeout: a seal
// call is bounded by (1 + SealQueueAllowance) times its timeout, the
// timeout itself counting from when the seal is sent (Sealer.Seal's
// budget). Under a mass failover a node's seals queue behind the batches
// in flight to it; a bound counted from the call left the seals queued
// longest a few milliseconds at the host, and they timed out although
// the hosts answered (issue 17). At 10,000 streams about 1,900 seals wait
// for each surviving host at once and go 8 batches of 64 at a time, so
// the last are sent three or four batch rounds after they were asked:
// with an allowance of one timeout most of the first round's seals ended
// in the queue, and their rounds waited and sealed again at its back
// (docs/benchmarks.md, session 27). The cost: a round that waits for a
// live host that never answers lasts up to five seal timeouts, not two.
const SealQueueAllowance = 4

func (w *Worker) logger() *slog.Logger {
	if w.Logger != nil {
		return w.Logger
	}
	return slog.New(slog.DiscardHandler)
}

func (w *Worker) tracer() trace.Tracer {
	if w.Tracer != nil {
		return w.Tracer
	}
	return noop.NewTracerProvider().Tracer("")
}

func (w *Worker) now() time.Time {
	if w.Now != nil {
		return w.Now()
	}
	return time.Now()
}

// incarnation is w.Incarnation's answer for node, or unknown without one.
func (w *Worker) incarnation(node string) (uint64, bool) {
	if w.Incarnation == nil {
		return 0, false
	}
	return w.Incarnation(node)
}

func (w *Worker) sealTimeout() time.Duration {
	if w.SealTimeout > 0 {
		return w.SealTimeout
	}
	return DefaultSealTimeout
}

// pause waits d or until ctx ends. Tests replace it through w.sleep.
func (w *Worker) pause(ctx context.Context, d time.Duration) error {
	if w.sleep != nil {
		return w.sleep(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Run drives the pending recovery of stream to its commit. Each round reads
// the state afresh, seals every copy of the old assignment at Old.Epoch+1 in
// parallel (each given SealTimeout from when it is sent), decides, and either commits with
// one guarded write or records why it waits and tries again after a backoff
// (50ms doubling to 2s; none after a round whose missing answers timed out,
// which waited longer already). It returns nil when the recovery is committed, or
// when a read shows it gone or replaced by another transition (whoever
// replaced it runs its own worker); it returns ctx's error when ctx ends,
// which is how a leader that loses leadership stops it. A commit that loses
// to a concurrent change is never retried blindly: the next round re-reads,
// so a recovery is committed at most once.
func (w *Worker) Run(ctx context.Context, stream string) error {
	log := w.logger().With("stream", stream)
	var (
		transition uint64
		started    bool // transition is set; 0 may be a real transition
	)
	backoff := minBackoff
	rs := &runState{}
	for round := 1; ; round++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		pr, starts, leaving, version, err := w.State.Read(ctx, stream)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			log.Warn("recovery: read state failed; retrying", "round", round, "err", err)
			if err := w.pause(ctx, backoff); err != nil {
				return err
			}
			backoff = min(backoff*2, maxBackoff)
			continue
		}
		if pr == nil {
			log.Info("recovery: no pending recovery; stopping", "transition", transition)
			return nil
		}
		p := *pr
		if p.Stream == "" {
			p.Stream = stream
		}
		pr = &p
		if !started {
			transition, started = pr.Transition, true
		} else if pr.Transition != transition {
			log.Info("recovery: replaced by another transition; stopping", "transition", transition, "now", pr.Transition)
			return nil
		}

		done, waited, err := w.round(ctx, log, round, *pr, starts, leaving, version, backoff, rs)
		if done {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			log.Warn("recovery: round failed; retrying", "round", round, "transition", transition, "err", err)
		}
		if !waited {
			if err := w.pause(ctx, backoff); err != nil {
				return err
			}
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// round runs one attempt under a "recovery.round" span that continues the
// failover's trace. It reports done when the commit succeeded, and waited
// when it already paused for the backoff inside its "wait" span (so the
// round's span covers the wait).
func (w *Worker) round(ctx context.Context, log *slog.Logger, n int, pr wire.PendingRecovery, starts []wire.HistoryStart, leaving map[string]bool, version uint64, backoff time.Duration, rs *runState) (done, waited bool, err error) {
	tr := w.tracer()
	ctx, span := tr.Start(tracecontext.WithTraceParent(ctx, pr.TraceParent), "recovery.round", trace.WithAttributes(
		attribute.String("stream", pr.Stream),
		attribute.Int64("transition", int64(pr.Transition)),
		attribute.Int("round", n),
		attribute.Int64("old_epoch", int64(pr.Old.Epoch)),
		attribute.String("old_owner", pr.Old.Owner),
		attribute.Int64("version", int64(version)),
	))
	defer span.End()
	log = log.With("transition", pr.Transition, "round", n)

	// A round may stop waiting for copies on gone nodes once the answers
	// in hand already promote (see sealAll).
	promotes := func(got []Answer) bool {
		return Decide(pr, starts, got, leaving, w.now()).Kind == Promote
	}
	rs.prune(log, pr, w.incarnation, w.Gone)
	answers := w.sealAll(ctx, pr, rs, promotes)
	if err := ctx.Err(); err != nil {
		// Leadership lost mid-round: the answers say nothing about the copies.
		return false, false, err
	}
	// A node may have restarted or gone while the round sealed the others:
	// decide only on kept answers that still hold (this round's new
	// answers are checked at the next round's start).
	rs.prune(log, pr, w.incarnation, w.Gone)
	rs.current(answers)
	rs.keep(pr, answers, w.sealTimeout())

	d, err := w.decideFresh(ctx, tr, log, pr, starts, answers, leaving, rs)
	if err != nil {
		return false, false, err
	}
	answered := 0
	for _, a := range answers {
		if a.Reply != nil && a.Err == nil {
			answered++
		}
	}
	_, choose := tr.Start(ctx, "choose")
	choose.SetAttributes(
		attribute.String("kind", d.Kind),
		attribute.String("reason", d.Reason),
		attribute.Int("r", sealThreshold(pr.Old)),
		attribute.Int("answers", answered),
	)
	if d.Kind == Promote {
		choose.SetAttributes(attribute.String("chosen", d.Assignment.Owner))
	} else if d.Wait != nil && d.Wait.BestNode != "" {
		choose.SetAttributes(attribute.String("best", d.Wait.BestNode))
	}
	choose.End()
	span.SetAttributes(attribute.String("decision", d.Kind))

	if d.Kind != Promote {
		_, ws := tr.Start(ctx, "wait", trace.WithAttributes(
			attribute.String("kind", d.Kind),
			attribute.String("reason", d.Reason),
			attribute.Int64("backoff_ms", backoff.Milliseconds()),
		))
		defer ws.End()
		rs.waits++
		// A wait of another kind than the last logged is logged; a repeat goes to the
		// summary of Waits when there is one (logs in proportion to change).
		if w.Waits == nil || d.Kind != rs.logged {
			log.Info("recovery: waiting", "kind", d.Kind, "reason", d.Reason, "backoff", backoff)
			rs.logged = d.Kind
		} else {
			w.Waits.Note(pr.Stream, d.Kind)
		}
		// Store the wait only when it says something new, so a long wait
		// does not write to the replicated state on every round.
		if d.Wait != nil && !sameWait(pr.Wait, d.Wait) {
			if err := w.State.RecordWait(ctx, pr.Stream, pr.Transition, *d.Wait); err != nil {
				ws.RecordError(err)
				log.Warn("recovery: record wait failed", "err", err)
			}
		}
		// A round whose missing answers timed out has already waited at
		// least a seal timeout (longer than the backoff): the backoff
		// guards against refusals (overloaded, no responders) that end a
		// round at once, not against seals queued behind a mass
		// failover's, which a pause would only send later still (issue 17).
		if w.onlyTimedOut(answers) {
			ws.SetAttributes(attribute.Bool("pause_skipped", true))
			return false, true, nil
		}
		return false, true, w.pause(ctx, backoff)
	}

	cctx, cs := tr.Start(ctx, "commit", trace.WithAttributes(
		attribute.Int64("epoch", int64(d.Assignment.Epoch)),
		attribute.String("owner", d.Assignment.Owner),
		attribute.StringSlice("followers", d.Assignment.Followers),
		attribute.Int64("version", int64(version)),
		attribute.Int64("start.record_tail", int64(d.Start.RecordTail)),
		attribute.Int64("start.cursor_tail", int64(d.Start.CursorTail)),
	))
	defer cs.End()
	err = w.State.Commit(cctx, pr.Stream, pr.Transition, version, d.Assignment, d.Start, tracecontext.TraceParent(cctx))
	if err != nil {
		cs.RecordError(err)
		cs.SetStatus(codes.Error, "commit failed")
		if errors.Is(err, ErrConflict) {
			cs.SetAttributes(attribute.Bool("conflict", true))
			log.Info("recovery: commit lost to a concurrent change; re-reading", "version", version, "err", err)
			return false, false, nil
		}
		return false, false, fmt.Errorf("commit recovery of %s at epoch %d: %w", pr.Stream, d.Assignment.Epoch, err)
	}
	if w.Committed != nil {
		w.Committed(pr, w.now())
	}
	log.Info("recovery: committed", "epoch", d.Assignment.Epoch, "owner", d.Assignment.Owner,
		"followers", d.Assignment.Followers, "start_record_tail", d.Start.RecordTail,
		"start_cursor_tail", d.Start.CursorTail, "reason", d.Reason, "waited_rounds", rs.waits)
	return true, false, nil
}

// decideFresh decides on answers and, while the decision would promote a
// copy whose answer was kept from an earlier round and whose node was not
// heard since that answer within a seal timeout (heardSince), seals that
// copy again and decides anew: a kept answer counts toward R and toward
// the furthest tails, but the promoted owner has answered in this round
// (or was heard since its answer), as every answer did before answers
// were kept. Its node may have died since its answer without being gone
// yet (not silent for a TTL); promoting it would make its tails the latest
// history start, which only it (and the copies the recovery left behind)
// might hold, so a second failover after it
// would wait for it to come back (docs/failover.md, "Seal answers kept
// across rounds"). A re-seal at the same fence is cheap (the host answers
// from its fenced copy's metadata); one that fails leaves the copy
// unanswered, and the loop ends within the copies' count, each re-sealed
// at most once.
func (w *Worker) decideFresh(ctx context.Context, tr trace.Tracer, log *slog.Logger, pr wire.PendingRecovery, starts []wire.HistoryStart, answers []Answer, leaving map[string]bool, rs *runState) (Decision, error) {
	for {
		d := Decide(pr, starts, answers, leaving, w.now())
		if d.Kind != Promote {
			return d, nil
		}
		owner := d.Assignment.Owner
		i := slices.IndexFunc(answers, func(a Answer) bool { return a.Node == owner && a.kept })
		if i < 0 || w.heardSince(answers[i]) {
			return d, nil
		}
		log.Info("recovery: sealing the chosen copy again before promoting it (its answer is from an earlier round)", "node", owner)
		inc, known := w.incarnation(owner)
		a := w.sealOne(ctx, tr, pr, owner, rs.timeout(owner, w.sealTimeout()))
		if err := ctx.Err(); err != nil {
			return Decision{}, err
		}
		a.incarnation, a.incKnown = inc, known
		answers[i] = a
		delete(rs.kept, owner)
		rs.keep(pr, []Answer{a}, w.sealTimeout())
	}
}

// onlyTimedOut reports whether a round's answers miss some copy because
// its seal timed out, and none because it was refused: every copy that
// did not answer, other than those on gone nodes (a refusal there is no
// load to back off from), timed out.
func (w *Worker) onlyTimedOut(answers []Answer) bool {
	timedOut := false
	for _, a := range answers {
		switch {
		case a.Err == nil:
		case sealTimedOut(a):
			timedOut = true
		case w.Gone == nil || !w.Gone(a.Node):
			return false
		}
	}
	return timedOut
}

// heardSince reports whether a's node was heard (LastHeard) after a's
// arrival, within one seal timeout of now, at the incarnation that
// answered: alive since its answer, as recently as a re-seal sent now
// would show (a round waits at least that long for one), and not a
// restarted process that may have lost the copy it answered for. Without
// LastHeard or a's arrival time, it reports false.
func (w *Worker) heardSince(a Answer) bool {
	if w.LastHeard == nil || a.at.IsZero() {
		return false
	}
	heard, inc, ok := w.LastHeard(a.Node)
	return ok && heard.After(a.at) && w.now().Sub(heard) <= w.sealTimeout() &&
		a.incKnown && inc == a.incarnation
}

// sameWait compares two waits ignoring when they were seen.
func sameWait(a, b *wire.RecoveryWait) bool {
	if a == nil || b == nil {
		return a == b
	}
	x, y := *a, *b
	x.AtMS, y.AtMS = 0, 0
	if (x.Start == nil) != (y.Start == nil) || (x.Start != nil && *x.Start != *y.Start) {
		return false
	}
	x.Start, y.Start = nil, nil
	return slices.Equal(x.Unanswered, y.Unanswered) && x.Kind == y.Kind && x.Answered == y.Answered &&
		x.Needed == y.Needed && x.BestTail == y.BestTail && x.BestNode == y.BestNode
}

// sealAll seals every copy of the old assignment at once under a
// "seal.fanout" span and returns one answer per copy, in copy order. Each
// seal has its own SealTimeout; a Sealer that ignores its context still
// cannot hold the round past it, because the answer is taken from whichever
// of the reply or the deadline comes first.
//
// The round ends early once the answers in hand already promote (at least
// R of them, and the furthest at or past the latest history start, as
// promotes tells) and every copy still outstanding is on a node that Gone
// reports gone (expired or left). Such a node has not been heard for a TTL,
// so waiting the whole SealTimeout for it only delays the recovery, and it
// can be held up by anything subscribed to the dead node's seal subject (a
// debugging "nats sub"). R answers are what safety needs; copies left out
// are left out as copies that time out are. A copy on a live node is always
// waited for, so a slow but live copy still becomes a follower; and while
// the answers wait for the confirmed prefix, a gone node's copy (often the
// one holding it) is waited for too.
func (w *Worker) sealAll(ctx context.Context, pr wire.PendingRecovery, rs *runState, promotes func([]Answer) bool) []Answer {
	tr := w.tracer()
	ctx, fan := tr.Start(ctx, "seal.fanout", trace.WithAttributes(
		attribute.Int64("fence_epoch", int64(pr.Old.Epoch+1)),
	))
	defer fan.End()
	// cancel ends the seals the round stops waiting for.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	nodes := copyNodes(pr.Old)
	type result struct {
		i int
		a Answer
	}
	results := make(chan result, len(nodes)) // buffered: abandoned seals never block
	answers := make([]Answer, len(nodes))
	outstanding := make(map[int]bool, len(nodes))
	var got []Answer // the answers in: kept ones first, then in arrival order
	n, reused := 0, 0
	for i, node := range nodes {
		if k, ok := rs.kept[node]; ok {
			k.kept = true
			answers[i] = k
			got = append(got, k)
			n++
			reused++
			continue
		}
		outstanding[i] = true
		inc, known := w.incarnation(node)
		timeout := rs.timeout(node, w.sealTimeout())
		go func() {
			a := w.sealOne(sctx, tr, pr, node, timeout)
			a.incarnation, a.incKnown = inc, known
			results <- result{i, a}
		}()
	}
	for len(outstanding) > 0 {
		res := <-results
		answers[res.i] = res.a
		delete(outstanding, res.i)
		got = append(got, res.a)
		if res.a.Err == nil {
			n++
		}
		// Checked on every arrival: a live copy failing fast can leave
		// only gone ones outstanding.
		if len(outstanding) > 0 && w.Gone != nil && promotes(got) && w.allGone(nodes, outstanding) {
			break
		}
	}
	var skipped []string
	for i := range outstanding {
		skipped = append(skipped, nodes[i])
		answers[i] = Answer{Node: nodes[i], Err: fmt.Errorf("seal %s: %w", nodes[i], errGoneNotWaited)}
	}
	slices.Sort(skipped)
	fan.SetAttributes(attribute.Int("copies", len(nodes)), attribute.Int("answered", n), attribute.Int("kept", reused))
	if len(skipped) > 0 {
		fan.SetAttributes(attribute.StringSlice("not_waited_for", skipped))
		w.logger().Info("recovery: seal round ends without copies on gone nodes", "stream", pr.Stream,
			"transition", pr.Transition, "answered", n, "not_waited_for", skipped)
	}
	return answers
}

// errGoneNotWaited is the answer of a copy the round stopped waiting for.
var errGoneNotWaited = errors.New("not waited for: its node is gone and the answers in already promote")

// allGone reports whether every outstanding copy is on a node Gone reports
// gone; with no Gone, none is.
func (w *Worker) allGone(nodes []string, outstanding map[int]bool) bool {
	if w.Gone == nil {
		return false
	}
	for i := range outstanding {
		if !w.Gone(nodes[i]) {
			return false
		}
	}
	return true
}

func (w *Worker) sealOne(ctx context.Context, tr trace.Tracer, pr wire.PendingRecovery, node string, timeout time.Duration) Answer {
	ctx, span := tr.Start(ctx, "seal "+node, trace.WithAttributes(attribute.String("node", node), attribute.Int64("timeout_ms", timeout.Milliseconds())))
	defer span.End()
	// timeout counts from when the seal is sent (the Sealer keeps it);
	// this bounds the call, queue included, for a Sealer that does not.
	ctx, cancel := context.WithTimeout(ctx, (1+SealQueueAllowance)*timeout)
	defer cancel()
	req := wire.SealRequest{
		Stream:      pr.Stream,
		StreamID:    pr.Old.StreamID,
		FenceEpoch:  pr.Old.Epoch + 1,
		Transition:  pr.Transition,
		TraceParent: tracecontext.TraceParent(ctx),
	}
	type result struct {
		reply *wire.SealReply
		err   error
	}
	ch := make(chan result, 1) // buffered: a late reply must not block its goroutine
	began := time.Now()
	go func() {
		r, err := w.Sealer.Seal(ctx, node, req, timeout)
		ch <- result{r, err}
	}()
	a := Answer{Node: node}
	select {
	case r := <-ch:
		a.Reply, a.Err = r.reply, r.err
		if a.Err == nil && a.Reply == nil {
			a.Err = errors.New("empty seal reply")
		}
	case <-ctx.Done():
		a.Err = fmt.Errorf("seal %s: %w", node, ctx.Err())
	}
	a.Took = time.Since(began)
	a.at = w.now()
	if a.Err == nil {
		if err := validAnswer(a, req.FenceEpoch, req.Transition); err != nil {
			a.Reply, a.Err = nil, fmt.Errorf("seal %s: %w", node, err)
		}
	}
	timedOut := errors.Is(a.Err, context.DeadlineExceeded)
	span.SetAttributes(
		attribute.Bool("answered", a.Err == nil),
		attribute.Bool("timed_out", timedOut),
		attribute.Int64("took_ms", a.Took.Milliseconds()),
	)
	if a.Err != nil {
		span.SetAttributes(attribute.String("error", a.Err.Error()))
		span.SetStatus(codes.Error, "no answer")
	} else {
		span.SetAttributes(
			attribute.Int64("record_tail", int64(a.Reply.RecordTail)),
			attribute.Int64("cursor_tail", int64(a.Reply.CursorTail)),
		)
		if a.Reply.Confirmed > 0 {
			span.SetAttributes(attribute.Int64("confirmed", int64(a.Reply.Confirmed)))
		}
	}
	return a
}
