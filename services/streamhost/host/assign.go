package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/streamlog"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/streamhost/telemetry"
)

const pullTimeout = 2 * time.Second

// fullPullInterval is the longest a host goes without a full pull: pulls
// of changes are exact, and this is only a safety net, cheap at one full
// pull a minute.
const fullPullInterval = time.Minute

// pullState is the pull loop's own state; only its goroutine uses it.
type pullState struct {
	// lastFull is when the last full pull was applied.
	lastFull time.Time
	// noDelta is set once the coordinators refused a pull of changes
	// (an older coordinator): every pull is full from then on.
	noDelta bool
	// retry are the streams whose last apply failed: the next pull
	// applies them again, changed or not.
	retry map[string]struct{}
}

// onNotice asks for a pull when a notice names a version newer than the
// one applied, and for a full report in the next heartbeat when it asks
// for one.
func (h *Host) onNotice(m *nats.Msg) {
	var n wire.AssignNotice
	if err := json.Unmarshal(m.Data, &n); err != nil {
		h.log.Warn("bad assignment notice", "err", err)
		h.requestNoticePull()
		return
	}
	if n.FullReport {
		// A reader lacks a base for the deltas: the next heartbeat is a
		// full report (at most one per wire.MinAskedFullReportGap).
		h.fullAsked.Store(true)
		h.requestBeat()
	}
	h.mu.Lock()
	newer := n.Version > h.applied || !h.ready.Load()
	h.mu.Unlock()
	switch {
	case newer && n.Recovery:
		if n.Assigned != nil {
			as := n.Assigned
			h.reqs.Go(func() { h.applyNoticed(h.bgCtx, n.Version, as) })
		}
		h.requestPullNow()
	case newer:
		if n.Assigned != nil {
			select {
			case h.created <- createdNotice{version: n.Version, as: n.Assigned}:
			default: // the pull applies it
			}
		}
		h.requestNoticePull()
	}
}

// maxCreatedNotices bounds the create notices waiting for the pull loop;
// one more is left to the pull.
const maxCreatedNotices = 4096

// createdNotice is the assignment a create's notice carried, and the
// notice's version.
type createdNotice struct {
	version uint64
	as      *wire.AssignedStream
}

// applyCreated applies the assignment of create notice first and of the
// others waiting (h.created) that name a version the host has not applied
// yet: the new stream's copy is created and takes its role without the
// notice's pull (the gap, the pull's round trip), which was most of a
// create's time to its owner serving (issue 17). It runs in the pull loop,
// so it never overlaps a pull's apply, and a pull that applied the version
// (or a later one) before it ran makes it skip the notice. The pull that
// the notice also asked for follows and finds the copy in line. A notice
// does not advance the version applied: changes of other streams up to it
// are still to pull.
func (h *Host) applyCreated(ctx context.Context, first createdNotice) {
	batch := []createdNotice{first}
	for len(batch) < maxCreatedNotices {
		select {
		case n := <-h.created:
			batch = append(batch, n)
			continue
		default:
		}
		break
	}
	h.mu.Lock()
	applied := h.applied
	h.mu.Unlock()
	if !h.ready.Load() || h.leaving.Load() {
		return
	}
	run := applies{pool: h.pool}
	for _, n := range batch {
		a := n.as.Assignment
		if n.version <= applied || !a.Includes(h.cfg.Node) || n.as.Starts == nil || wire.ValidName("stream", a.Stream) != nil {
			continue
		}
		run.Go(func() {
			if err := h.applyCreatedOne(ctx, n); err != nil {
				h.log.Warn("apply the assignment a create's notice carried; the pull applies it", "stream", a.Stream, "epoch", a.Epoch, "err", err)
			}
		})
	}
	run.Wait()
}

// applies runs applies of streams side by side, at most
// maxConcurrentApplies at once. The zero value is ready to use.
type applies struct {
	sem  chan struct{}
	wg   sync.WaitGroup
	pool *pool // runs the applies; nil: one goroutine each
}

// Go runs f once fewer than maxConcurrentApplies run.
func (p *applies) Go(f func()) {
	if p.sem == nil {
		p.sem = make(chan struct{}, maxConcurrentApplies)
	}
	p.sem <- struct{}{}
	p.wg.Add(1)
	p.pool.Go(func() {
		defer p.wg.Done()
		defer func() { <-p.sem }()
		f()
	})
}

// Wait waits for every f run.
func (p *applies) Wait() { p.wg.Wait() }

// applyCreatedOne applies one create notice's assignment unless the copy
// is already this stream's or a later notice was applied to it.
func (h *Host) applyCreatedOne(ctx context.Context, n createdNotice) error {
	a := n.as.Assignment
	r := h.replica(a.Stream)
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := h.store.Get(a.Stream); (c != nil && c.StreamID() == a.StreamID) || n.version < r.noticed {
		return nil
	}
	if err := h.applyLocked(ctx, r, n.as); err != nil {
		return err
	}
	r.noticed = max(r.noticed, n.version)
	h.mu.Lock()
	if n.version > h.applied {
		h.known[a.Stream] = n.as
	}
	h.mu.Unlock()
	return nil
}

// pullLoop pulls the snapshot on start (retrying until it has one), on a
// request (notice, follower trouble) and every PullInterval. A recovery's
// notice (requestPullNow) is not held by the gap: the stream it moved
// waits for this pull to be served again.
func (h *Host) pullLoop(ctx context.Context) {
	t := time.NewTicker(h.cfg.PullInterval)
	defer t.Stop()
	gap := time.NewTimer(0)
	defer gap.Stop()
	retry := 50 * time.Millisecond
	recheck := true
	for {
		// Config.PullGap: a burst of creates sends a notice per create;
		// notices that arrive meanwhile share the next pull (of the
		// changes since the last one).
		gap.Reset(h.cfg.PullGap)
		all := recheck || h.recheck.Swap(false)
		err := h.pullAndApply(ctx, all)
		if err != nil && ctx.Err() == nil {
			h.log.Warn("pull assignment snapshot", "err", err)
		}
		if err != nil && all {
			// The re-apply asked for did not happen: the next pull does it
			// (a pull of changes alone would skip the roles in trouble).
			h.recheck.Store(true)
		}
		wait := t.C
		var again <-chan time.Time
		if err != nil && (!h.ready.Load() || all) {
			// Nothing is served before the first snapshot, and a role
			// in trouble waits for the re-apply it asked for: retry soon.
			again = time.After(retry)
			retry = min(retry*2, time.Second)
		}
		recheck = false
		// Create notices are applied while the loop waits (applyCreated).
		// A notice's pull waits for the gap (gapC, set once one asks).
		pullNow := h.pullNow
		var gapC <-chan time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case n := <-h.created:
				h.applyCreated(ctx, n)
				continue
			case <-pullNow:
				pullNow, gapC = nil, gap.C
				continue
			case <-wait:
				// The periodic pull is of the changes, like a notice's: it
				// applies what changed and what failed last time, not every
				// known assignment (work in proportion to the streams held,
				// every PullInterval; issue 17). A role in trouble asks for
				// a re-apply of everything (requestPull), and the full pull
				// at least every fullPullInterval re-applies it all.
			case <-again:
			case <-h.pullUrgent:
			case <-gapC:
			}
			break
		}
	}
}

// maxPullPages bounds the pages of one pull (wire.MaxAssignmentPage
// streams each): a coordinator that kept answering with a next page would
// otherwise hold the pull loop for ever.
const maxPullPages = 1 << 16

// deltaSince is the version to pull the changes since, or 0 for a full
// pull: before the first snapshot, while leaving (which tracks what the
// host still owns from full pulls, as before), once the coordinators
// refused a pull of changes, and at least every fullPullInterval.
func (h *Host) deltaSince() uint64 {
	h.mu.Lock()
	applied := h.applied
	h.mu.Unlock()
	if !h.ready.Load() || h.leaving.Load() || h.pull.noDelta || time.Since(h.pull.lastFull) >= fullPullInterval {
		return 0
	}
	return applied
}

// pullAndApply pulls this node's snapshot (in full, or what changed since
// the version applied), page by page, and applies it unless it is older
// than the one applied: in full, or with recheck, every assignment known;
// otherwise the changed ones and those whose last apply failed.
func (h *Host) pullAndApply(ctx context.Context, recheck bool) error {
	// The pull's round trip runs beside the loop, which meanwhile applies
	// the create notices that come (applyCreated): under load a pull took
	// about as long as a create's notice took to be applied before it.
	// Applies stay in this goroutine, so they never overlap.
	since := h.deltaSince()
	type pulled struct {
		snap wire.AssignmentSnapshot
		err  error
	}
	done := make(chan pulled, 1)
	go func() {
		snap, err := h.pullSnapshot(ctx, since)
		done <- pulled{snap, err}
	}()
	var p pulled
	for waiting := true; waiting; {
		select {
		case p = <-done:
			waiting = false
		case n := <-h.created:
			h.applyCreated(ctx, n)
		}
	}
	snap, err := p.snap, p.err
	if err != nil {
		var we *wire.Error
		if errors.As(err, &we) && we.Code == wire.CodeBadRequest && !h.pull.noDelta {
			h.pull.noDelta = true
			h.log.Warn("the coordinators refused a pull of changes; pulling in full from now on", "err", err)
		}
		return err
	}
	full := snap.Since == 0
	h.mu.Lock()
	// The same version again is applied: applying is idempotent and a
	// copy already in line is skipped cheaply, and it retries whatever
	// failed last time.
	applied := h.applied
	stale := h.ready.Load() && snap.Version < applied
	var todo []*wire.AssignedStream
	if !stale {
		todo = h.mergeKnown(&snap, full || recheck)
	}
	h.mu.Unlock()
	if stale {
		h.log.Debug("ignoring an older snapshot", "version", snap.Version, "applied", applied)
		return nil
	}
	if h.leaving.Load() {
		// A leaving host takes no new roles; it only tracks which
		// streams it still owns (known).
		return nil
	}
	if full {
		h.pull.lastFull = time.Now()
	} else {
		for name := range h.pull.retry {
			if as := h.knownAssignment(name); as != nil && !slices.Contains(todo, as) {
				todo = append(todo, as)
			}
		}
	}
	h.apply(ctx, &snap, todo)
	return nil
}

// mergeKnown records snap's assignments in h.known (a full snapshot
// replaces it; one of changes updates the streams it names) and returns
// those to apply: every known one when all, else those snap holds. Call
// with h.mu held.
func (h *Host) mergeKnown(snap *wire.AssignmentSnapshot, all bool) []*wire.AssignedStream {
	if snap.Since == 0 {
		clear(h.known)
	} else {
		for name := range snap.Streams {
			delete(h.known, name)
		}
		for _, name := range snap.Deleted {
			delete(h.known, name)
		}
	}
	todo := make([]*wire.AssignedStream, 0, len(snap.Assignments))
	for i := range snap.Assignments {
		as := &snap.Assignments[i]
		if as.Assignment.Includes(h.cfg.Node) {
			h.known[as.Assignment.Stream] = as
			todo = append(todo, as)
		}
	}
	if all {
		todo = slices.AppendSeq(todo[:0], maps.Values(h.known))
	}
	return todo
}

// knownAssignment returns the known assignment of stream, or nil.
func (h *Host) knownAssignment(stream string) *wire.AssignedStream {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.known[stream]
}

// pullSnapshot pulls every page of this node's snapshot (each reply holds
// at most one page of streams, so no message grows with the cluster) and
// returns them as one: the assignments of every page, the ids of the
// streams this host holds a copy of, and the version of the first page.
// Later pages may be read from later versions; every stream's assignment
// is applied under its own epoch guards, and a change after the first
// page's version is pulled again at the next notice of it, so the first
// page's version is the one the host can say it has applied.
//
// With since set it pulls the changes since that version instead, page
// after page until none follow, and returns them as one (Since set): the
// version is the last page's, since the pages together cover every change
// up to it. A coordinator that cannot answer from since answers with the
// first page of a full pull, which then goes on in full.
func (h *Host) pullSnapshot(ctx context.Context, since uint64) (wire.AssignmentSnapshot, error) {
	var snap wire.AssignmentSnapshot
	req := wire.AssignmentPull{Node: h.cfg.Node, Limit: h.cfg.PullPage, Since: since}
	for page := 0; ; page++ {
		if page == maxPullPages {
			return snap, fmt.Errorf("pull: more than %d pages", maxPullPages)
		}
		p, err := h.pullPage(ctx, req)
		if err != nil {
			return snap, err
		}
		if req.Since != 0 && p.Since == 0 {
			// Answered in full: start over as a full pull.
			req.Since, page = 0, 0
		}
		if page == 0 {
			snap = wire.AssignmentSnapshot{Version: p.Version, Node: p.Node, Since: p.Since, Assignments: []wire.AssignedStream{}, Streams: map[string]uint64{}}
		}
		if req.Since != 0 {
			addChangesPage(&snap, p)
			if p.NextSince == 0 {
				return snap, nil
			}
			if p.NextSince <= req.Since {
				return snap, fmt.Errorf("pull: page of changes since %d names %d as next", req.Since, p.NextSince)
			}
			req.Since = p.NextSince
			continue
		}
		snap.Assignments = append(snap.Assignments, p.Assignments...)
		for name, id := range p.Streams {
			// Only leaveOut reads the ids, for copies this host holds.
			if h.store.Get(name) != nil {
				snap.Streams[name] = id
			}
		}
		if p.Next == "" {
			return snap, nil
		}
		if p.Next <= req.After {
			return snap, fmt.Errorf("pull: page after %q names %q as next", req.After, p.Next)
		}
		req.After = p.Next
	}
}

// addChangesPage adds page p of one pull of changes to snap. A stream
// that changed again between two pages is named by both; the later page's
// word on it (its assignment here, none, or deleted) replaces the
// earlier's, so each stream is applied once, as it is now, and one moved
// off this host or deleted meanwhile is not kept (found by review: an
// earlier page's owner role survived a move or a delete until the next
// full pull).
func addChangesPage(snap *wire.AssignmentSnapshot, p wire.AssignmentSnapshot) {
	deleted := make(map[string]struct{}, len(p.Deleted))
	for _, name := range p.Deleted {
		deleted[name] = struct{}{}
	}
	named := func(name string) bool {
		_, there := p.Streams[name]
		_, gone := deleted[name]
		return there || gone
	}
	snap.Assignments = slices.DeleteFunc(snap.Assignments, func(as wire.AssignedStream) bool { return named(as.Assignment.Stream) })
	snap.Deleted = slices.DeleteFunc(snap.Deleted, named)
	for name := range deleted {
		delete(snap.Streams, name)
	}
	snap.Assignments = append(snap.Assignments, p.Assignments...)
	snap.Deleted = append(snap.Deleted, p.Deleted...)
	for name, id := range p.Streams {
		snap.Streams[name] = id
	}
	snap.Version = p.Version
}

// pullPage requests one page of the snapshot.
func (h *Host) pullPage(ctx context.Context, req wire.AssignmentPull) (wire.AssignmentSnapshot, error) {
	var snap wire.AssignmentSnapshot
	body, _ := json.Marshal(req)
	rctx, cancel := context.WithTimeout(ctx, pullTimeout)
	defer cancel()
	resp, err := h.nc.RequestWithContext(rctx, wire.AssignPull, body)
	if err != nil {
		return snap, fmt.Errorf("request %s: %w", wire.AssignPull, err)
	}
	if e := wire.DecodeErrorReply(resp.Header.Get(frame.HeaderError), resp.Data); e != nil {
		return snap, fmt.Errorf("coordinator refused the pull: %w", e)
	}
	if err := json.Unmarshal(resp.Data, &snap); err != nil {
		return snap, fmt.Errorf("decode snapshot: %w", err)
	}
	if snap.Node != "" && snap.Node != h.cfg.Node {
		return snap, fmt.Errorf("snapshot is for node %q, not %q", snap.Node, h.cfg.Node)
	}
	return snap, nil
}

// maxConcurrentApplies bounds the streams one apply brings in line at
// once. A follower's seal release is a synced write, and concurrent synced
// writes share Pebble's WAL syncs: a pull that re-follows a thousand
// copies after a failover waits for about copies/maxConcurrentApplies
// fsyncs one after another (it was 16: some 75 fsyncs for 1,200 copies;
// BenchmarkHostFailover).
const maxConcurrentApplies = 256

// apply brings the copies in line with snap: it applies todo (the
// assignments to bring in line, see pullAndApply) and leaves out the copies
// no assignment includes: of a full snap every copy held that it does not
// assign here, of a snap of changes those of the streams it names. It runs
// only in the pull loop, so applies never overlap; seals may run beside
// it, serialized per stream. Streams are independent (each applyOne holds
// its replica's lock), so they are applied concurrently: a host taking
// over many streams of a dead one promotes them side by side, its synced
// metadata writes sharing Pebble's WAL syncs, instead of one fsync after
// another.
func (h *Host) apply(ctx context.Context, snap *wire.AssignmentSnapshot, todo []*wire.AssignedStream) {
	run := applies{pool: h.pool}
	var failedMu sync.Mutex
	failed := map[string]struct{}{}
	for _, as := range todo {
		a := as.Assignment
		if err := wire.ValidName("stream", a.Stream); err != nil {
			h.log.Error("assignment with an invalid stream name", "stream", a.Stream, "err", err)
			continue
		}
		if as.Starts == nil {
			// Without its history starts the copy cannot be cut onto
			// the owner's history: the assignment is withheld.
			h.log.Error("assignment without a readable list of history starts; not applied", "stream", a.Stream, "epoch", a.Epoch)
			continue
		}
		run.Go(func() {
			if err := h.applyOne(ctx, as, snap.Version); err != nil {
				h.log.Error("apply assignment", "stream", a.Stream, "epoch", a.Epoch, "err", err)
				failedMu.Lock()
				failed[a.Stream] = struct{}{}
				failedMu.Unlock()
			}
		})
	}
	run.Wait()
	h.pull.retry = failed
	if snap.Since == 0 {
		for _, c := range h.store.Copies() {
			if name := c.Stream(); h.knownAssignment(name) == nil {
				h.leaveOut(name, snap)
			}
		}
	} else {
		left := slices.AppendSeq(slices.Clone(snap.Deleted), maps.Keys(snap.Streams))
		for _, name := range left {
			if h.store.Get(name) != nil && h.knownAssignment(name) == nil {
				h.leaveOut(name, snap)
			}
		}
	}
	h.mu.Lock()
	if snap.Version >= h.applied {
		h.applied = snap.Version
	}
	h.mu.Unlock()
	if !h.ready.Swap(true) {
		h.log.Info("first assignment snapshot applied", "version", snap.Version, "assignments", len(snap.Assignments))
	}
	h.requestBeat()
}

// leaveOut handles a copy that no assignment of snap includes: it stops
// any role; if its stream still exists it stays as it is (a sealed copy
// stays sealed), otherwise the copy is deleted. A snap older than a notice
// applied to the copy is not applied to it.
func (h *Host) leaveOut(stream string, snap *wire.AssignmentSnapshot) {
	streams := snap.Streams
	r := h.replica(stream)
	r.mu.Lock()
	defer r.mu.Unlock()
	c := h.store.Get(stream)
	if c == nil || snap.Version < r.noticed {
		return
	}
	if r.own != nil || r.fol != nil {
		h.log.Info("copy left out of every assignment", "stream", stream)
		r.stopRole(wire.CodeNotOwner)
	}
	if id, ok := streams[stream]; ok && id == c.StreamID() {
		return
	}
	if err := h.store.Delete(stream); err != nil {
		h.log.Error("delete copy of a removed stream", "stream", stream, "stream_id", c.StreamID(), "err", err)
		return
	}
	h.log.Info("deleted copy of a removed stream", "stream", stream, "stream_id", c.StreamID())
}

// applyOne applies one assignment that includes this node, from the
// snapshot of version; it skips one older than a notice applied to the copy
// (a pull that read before the notice's commit and passed its staleness
// check before the notice came). A known assignment that a pull applies
// again is as of the pull's version (the pulls of changes since cover
// every change up to it), so it is skipped or applied alike.
func (h *Host) applyOne(ctx context.Context, as *wire.AssignedStream, version uint64) error {
	r := h.replica(as.Assignment.Stream)
	r.mu.Lock()
	defer r.mu.Unlock()
	if version < r.noticed {
		h.log.Debug("not applying an assignment older than the notice applied", "stream", as.Assignment.Stream,
			"epoch", as.Assignment.Epoch, "version", version, "noticed", r.noticed)
		return nil
	}
	return h.applyLocked(ctx, r, as)
}

// applyNoticed applies the assignment a recovery's notice carried
// (AssignNotice.Assigned) when it includes this node and its epoch is
// past the copy's: the new owner of a failover or a planned move takes its
// role without waiting for its pull (which still follows, and applies
// everything else). Anything else (no copy, another stream id, an epoch
// this copy has reached, a notice overtaken by a later change) is left to
// the pull: a notice may arrive late, and only a newer epoch is safe to
// apply out of the pull's order. Once applied, an assignment of this
// stream from a snapshot older than the notice (a pull answered before the
// commit, even one already applying) is not applied (replica.noticed): it
// would end the role just taken. Other streams are not held back.
func (h *Host) applyNoticed(ctx context.Context, version uint64, as *wire.AssignedStream) {
	a := as.Assignment
	if !a.Includes(h.cfg.Node) || as.Starts == nil || wire.ValidName("stream", a.Stream) != nil || h.leaving.Load() || !h.ready.Load() {
		return
	}
	r := h.replica(a.Stream)
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := h.store.Get(a.Stream); c == nil || c.StreamID() != a.StreamID || a.Epoch <= c.Epoch() {
		return
	}
	if err := h.applyLocked(ctx, r, as); err != nil {
		h.log.Warn("apply the assignment a recovery's notice carried; the pull applies it", "stream", a.Stream, "epoch", a.Epoch, "err", err)
		return
	}
	r.noticed = max(r.noticed, version)
}

// applyLocked is applyOne with r.mu held.
func (h *Host) applyLocked(ctx context.Context, r *replica, as *wire.AssignedStream) (err error) {
	a := as.Assignment
	if h.unchanged(r, as) {
		return nil
	}

	remote := telemetry.RemoteContext(ctx, as.TraceParent)
	opts := []trace.SpanStartOption{trace.WithAttributes(
		attribute.String("brook.stream", a.Stream),
		attribute.Int64("brook.epoch", int64(a.Epoch)),
		attribute.String("brook.node", h.cfg.Node),
		attribute.String("brook.owner", a.Owner),
	)}
	if sc := trace.SpanContextFromContext(remote); sc.IsValid() {
		// A child of the failover's commit, so that the failover trace
		// shows the apply, and linked to it for viewers that follow links.
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	ctx, span := h.tracer.Start(remote, "host.apply", opts...)
	defer func() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}()

	log := h.log.With("stream", a.Stream, "epoch", a.Epoch, "owner", a.Owner)

	c := h.store.Get(a.Stream)
	if c != nil && c.StreamID() != a.StreamID {
		r.stopRole(wire.CodeStreamUnknown)
		if err := h.store.Delete(a.Stream); err != nil {
			return fmt.Errorf("delete copy with stream id %d: %w", c.StreamID(), err)
		}
		log.Info("deleted copy of an earlier stream of the same name", "old_stream_id", c.StreamID(), "stream_id", a.StreamID)
		c = nil
	}
	if c == nil {
		if c, err = h.store.Create(a.Stream, a.StreamID, as.Retention); err != nil {
			return fmt.Errorf("create copy: %w", err)
		}
		log.Info("created copy", "stream_id", a.StreamID)
	}
	if cur := r.status.Load().retention; cur != as.Retention {
		if err := c.SetRetention(as.Retention); err != nil {
			return fmt.Errorf("set retention: %w", err)
		}
	}

	seal, sealed := c.SealInfo()
	if sealed && seal.FenceEpoch > a.Epoch {
		// Sealed for a recovery past this assignment: stay sealed until
		// the assignment of the fence epoch (or later) includes the copy.
		r.stopRole(wire.CodeSealed)
		r.publishStatus(as.Retention)
		log.Info("copy stays sealed", "fence", seal.FenceEpoch)
		return nil
	}
	if !sealed && a.Epoch < c.Epoch() {
		r.stopRole(wire.CodeNotOwner)
		r.publishStatus(as.Retention)
		return fmt.Errorf("assignment epoch %d is older than the copy's epoch %d; not applied", a.Epoch, c.Epoch())
	}
	if a.Epoch > c.Epoch() || sealed {
		// A role at an older epoch ends before the copy changes history.
		if s := r.status.Load(); s.role != wire.RoleNone && s.epoch < a.Epoch {
			r.stopRole(wire.CodeNotOwner)
		}
		if err := h.cut(ctx, log, c, a.Epoch, as.Starts); err != nil {
			r.publishStatus(as.Retention)
			return err
		}
		if err := h.release(ctx, log, r, c, a.Epoch, sealed, seal, a.Owner == h.cfg.Node); err != nil {
			r.publishStatus(as.Retention)
			return err
		}
	}

	if a.Owner == h.cfg.Node {
		if r.own != nil && r.own.epoch == a.Epoch && r.own.c == c {
			r.own.update(a, as.MinCopies)
		} else {
			r.stopRole(wire.CodeNotOwner)
			if h.store.UncleanStart() && len(a.Followers) > 0 && c.Epoch() == a.Epoch && r.begun != (begunEpoch{c: c, epoch: a.Epoch}) {
				return h.fenceEarlierOwner(log, r, c, a, as.Retention)
			}
			if err := h.promote(ctx, log, r, c, a, as.MinCopies, historyFloor(as.Starts, a.Epoch)); err != nil {
				r.publishStatus(as.Retention)
				return err
			}
		}
	} else if r.fol == nil || r.fol.ended() || r.fol.epoch != a.Epoch || r.fol.owner != a.Owner || r.fol.c != c {
		if r.fol != nil && r.fol.ended() {
			log.Warn("follower worker had ended; starting it again")
		}
		r.stopRole(wire.CodeNotOwner)
		_, span := h.tracer.Start(ctx, "follow")
		r.win = r.win.forCopy(c, r.pre)
		r.pre = nil
		r.fol = startFollower(h, c, a, r.win, r.arrivals)
		t := c.Tails()
		log.Info("following", "owner", a.Owner, "record_tail", t.Record, "cursor_tail", t.CursorDurable)
		span.SetAttributes(attribute.Int64("brook.record_tail", int64(t.Record)))
		span.End()
		h.requestBeat()
	}
	r.publishStatus(as.Retention)
	return nil
}

// unchanged reports whether the copy already plays the role as assigns it,
// at its epoch, so that re-applying it is skipped without a span or a log
// line (an owner still takes a changed follower set, policy or floor).
// Call with r.mu held.
func (h *Host) unchanged(r *replica, as *wire.AssignedStream) bool {
	a := as.Assignment
	c := h.store.Get(a.Stream)
	if c == nil || c.StreamID() != a.StreamID || r.status.Load().retention != as.Retention {
		return false
	}
	if c.Epoch() != a.Epoch {
		// A sealed copy's epoch stays at the history its seal replaced.
		if seal, sealed := c.SealInfo(); !sealed || seal.FenceEpoch <= a.Epoch || r.own != nil || r.fol != nil {
			return false
		}
		return true
	}
	if seal, sealed := c.SealInfo(); sealed {
		// Still sealed past this assignment and already without a role:
		// nothing to do until a newer assignment comes.
		return seal.FenceEpoch > a.Epoch && r.own == nil && r.fol == nil
	}
	switch {
	case a.Owner == h.cfg.Node && r.own != nil && r.own.epoch == a.Epoch && r.own.c == c:
		r.own.update(a, as.MinCopies)
		return true
	case a.Owner != h.cfg.Node && r.fol != nil && r.fol.epoch == a.Epoch && r.fol.owner == a.Owner && r.fol.c == c && !r.fol.ended():
		// A follower whose worker ended is not in line: applyOne starts
		// it again.
		return true
	}
	return false
}

// cut brings the copy onto the history of epoch (a no-op for a copy that
// is already on it).
func (h *Host) cut(ctx context.Context, log *slog.Logger, c *streamlog.Copy, epoch uint64, starts []wire.HistoryStart) error {
	_, span := h.tracer.Start(ctx, "cut")
	defer span.End()
	res, err := c.CutToHistory(epoch, starts)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return fmt.Errorf("cut to the history of epoch %d: %w", epoch, err)
	}
	span.SetAttributes(
		attribute.Bool("brook.cut", res.Cut),
		attribute.Int64("brook.record_tail", int64(res.RecordTail)),
		attribute.Int64("brook.cursor_tail", int64(res.CursorTail)),
		attribute.Int64("brook.removed", int64(res.Removed)),
	)
	// Only a cut that removed something is news at info: in a mass
	// failover nearly every copy is on the new history already, and a
	// line per copy told nothing (debug keeps it).
	level := slog.LevelDebug
	if res.Cut {
		level = slog.LevelInfo
	}
	log.Log(ctx, level, "history cut", "cut", res.Cut, "record_tail", res.RecordTail, "cursor_tail", res.CursorTail, "removed", res.Removed)
	return nil
}

// release begins the epoch on the copy, which releases a seal at or below
// it. A copy about to be promoted (owning) begins it without waiting for
// the write to be durable: the owner role starts meanwhile and serves its
// followers nothing until it is (owner.begun; docs/failover.md, "The new
// owner's epoch begins before it is durable").
func (h *Host) release(ctx context.Context, log *slog.Logger, r *replica, c *streamlog.Copy, epoch uint64, sealed bool, seal streamlog.Seal, owning bool) error {
	_, span := h.tracer.Start(ctx, "release")
	defer span.End()
	var err error
	if owning {
		_, err = c.BeginEpochAsync(epoch)
	} else {
		err = c.BeginEpoch(epoch)
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		if errors.Is(err, streamlog.ErrStaleFence) {
			return fmt.Errorf("begin epoch %d: sealed at a later fence: %w", epoch, err)
		}
		return fmt.Errorf("begin epoch %d: %w", epoch, err)
	}
	r.begun = begunEpoch{c: c, epoch: epoch}
	span.SetAttributes(attribute.Bool("brook.released_seal", sealed))
	if sealed {
		log.Info("seal released", "fence", seal.FenceEpoch, "transition", seal.Transition)
	} else {
		log.Info("epoch begun")
	}
	return nil
}

// fenceEarlierOwner seals, at the next epoch, a copy this host owns at an
// epoch an earlier process of the host durably began, when that process
// did not close the store (it crashed, or its store failed), instead of
// serving it again. (A begin the crash lost leaves the copy at its earlier
// epoch, so it is not fenced here: that process served its followers
// nothing of the epoch, owner.begun, and the copy begins it again.) That process replicated records as soon as it had written them,
// before its own fsync (owner.go): a follower may hold records this copy
// lost in the crash. (A process that closed the store synced everything
// it wrote, so its successor serves on.) Were this copy to write again at
// the same epoch, it would write other records at those offsets, confirm
// them with the other followers, and leave two copies of one epoch that
// differ at the same offset; a later recovery, which ranks copies by their
// tails, could then promote the one without a confirmed record. Sealed,
// the copy confirms nothing more at this epoch, its heartbeat reports the
// seal, and the coordinator recovers the stream as for any copy sealed
// past its assignment (DetectSealedCopy): it seals the survivors at the
// next epoch and promotes the furthest. Transition 0 is below every
// recovery's, so the recovery's seal at the same fence takes it over.
func (h *Host) fenceEarlierOwner(log *slog.Logger, r *replica, c *streamlog.Copy, a wire.Assignment, ret wire.Retention) error {
	defer r.publishStatus(ret)
	if _, err := c.Seal(a.Epoch+1, 0); err != nil {
		return fmt.Errorf("fence the copy an earlier process owned at epoch %d: %w", a.Epoch, err)
	}
	log.Warn("owner at an epoch an earlier process of this host began: copy sealed at the next epoch for the coordinator to recover the stream, not served again (followers may hold records the crash lost here)",
		"epoch", a.Epoch, "fence", a.Epoch+1, "record_tail", c.Tails().Record)
	h.requestBeat()
	return nil
}

// historyFloor is the record tail of the latest history start at or below
// epoch (starts only grow, so the highest): every record below it is on
// every copy a later recovery can promote (docs/failover.md, "The confirmed
// prefix").
func historyFloor(starts []wire.HistoryStart, epoch uint64) uint64 {
	var floor uint64
	for _, s := range starts {
		if s.Epoch <= epoch {
			floor = max(floor, s.RecordTail)
		}
	}
	return floor
}

// promote starts the owner role at the copy's own tails; minCopies is the
// stream's floor of copies, floor the record tail of its history start
// (historyFloor).
func (h *Host) promote(ctx context.Context, log *slog.Logger, r *replica, c *streamlog.Copy, a wire.Assignment, minCopies int, floor uint64) error {
	_, span := h.tracer.Start(ctx, "promote")
	defer span.End()
	// A role of this copy stopped while a write's group commit still ran
	// (its window was dropped: owner.window) leaves records written and
	// not yet durable. The new role starts at the durable tail and builds
	// its duplicate window from the durable log, so it waits for them
	// first: else a producer's retry of such a record would be written
	// again (a duplicate), and the record would end up in the log anyway.
	// Bounded by the confirm timeout: a stuck group commit fails the
	// promotion, and the next pull applies the assignment again.
	wctx, cancel := context.WithTimeout(ctx, h.cfg.ConfirmTimeout)
	err := waitWrittenDurable(wctx, c)
	cancel()
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return fmt.Errorf("promote: %w", err)
	}
	pre := r.pre
	r.pre = nil
	if p := r.win.asPrebuilt(c); p != nil {
		pre = p // the copy's own window still describes its log
		log.Info("duplicate window kept from the copy's earlier roles", "record_tail", p.tail)
	}
	// The window is handed to the owner, not shared: it gives it back when
	// it stops (owner.window), and a start that fails after the owner
	// wrote into it leaves the copy none rather than one whose tail and
	// digest no longer say what it holds.
	r.win = nil
	// The epoch's begin (release) may not be durable yet: a no-op that
	// returns its pending sync, or a closed channel for a begin that is.
	begun, err := c.BeginEpochAsync(a.Epoch)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return fmt.Errorf("promote: %w", err)
	}
	o, err := startOwner(h, c, a, minCopies, floor, pre, begun)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return fmt.Errorf("promote: %w", err)
	}
	r.own = o
	t := c.Tails()
	span.SetAttributes(attribute.Int64("brook.record_tail", int64(t.Record)), attribute.Int64("brook.cursor_tail", int64(t.CursorDurable)))
	log.Info("promoted to owner", "record_tail", t.Record, "cursor_tail", t.CursorDurable, "followers", a.Followers, "policy", a.Policy)
	h.requestBeat()
	return nil
}

// waitWrittenDurable waits until every record written into c is durable
// (Tails().Record == RecordWritten), or ctx ends.
func waitWrittenDurable(ctx context.Context, c *streamlog.Copy) error {
	for {
		ch := c.Changed()
		t := c.Tails()
		if t.Record >= t.RecordWritten {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("stream %s: %d records written and not yet durable: %w", c.Stream(), t.RecordWritten-t.Record, ctx.Err())
		}
	}
}
