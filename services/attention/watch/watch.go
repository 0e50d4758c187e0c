// Package watch follows, over NATS, everything the attention judge needs:
// the coordinator's stream list and cluster info (pulled at start, on every
// change notice newer than what it holds, and periodically) and the latest
// heartbeat of every stream host. It keeps all of it in memory only; a new
// Watcher rebuilds the whole view from one pull and one round of heartbeats.
package watch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/brook-streams/brook/pkg/heartbeat"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/attention/judge"
	"github.com/brook-streams/brook/services/attention/telemetry"
)

// HeaderError is the header an error reply carries with its code.
const HeaderError = "Brook-Error"

// assignWildcard matches every node's change notices (and, harmlessly, the
// hosts' pull requests on brook.assign.pull, which are skipped).
const assignWildcard = "brook.assign.*"

// lowerVersionsToFollow is how many consecutive replies with an older state
// version it takes before the watcher follows them: one stale replica must
// not roll the view back, but a coordinator cluster that was rebuilt from
// scratch must not freeze it either.
const lowerVersionsToFollow = 3

// listPage is how many streams one stream.list request asks for.
const listPage = 500

// listMaxAge is how long the watcher goes without a full listing: in
// between it lists only the streams changed after the version it holds
// (pullChanges), and none at all while the cluster info reports that
// version still. The judge reads its copies' tails from its own
// heartbeats; from the list it needs the coordinators' state, which moves
// only with the version, so the full listing only refreshes the list's
// few heartbeat-derived figures (and would mend a list a bug left wrong).
const listMaxAge = 10 * time.Second

// minPullGap is the least time between the starts of two pulls. A pull
// that takes longer (a large cluster, loaded coordinators) is followed by
// a pause of pullSpacing times its own duration (pullGap), so notices
// arriving at the rate of creates or of a mass failover's commits keep
// the watcher pulling at most a quarter of the time. Without the pause
// such notices had it pull back to back: at 10,000 streams the pulls of
// the whole list (20 pages each) were 2.9% of the whole machine's CPU in
// a failover, and the coordinators' answers 1.1% more (issue 17), for a
// list fresher by the length of a pull or so.
//
// The pause is at most maxPullPause: a pull that ran into its requests'
// timeouts (loaded coordinators) must not push the next one out by
// several times them, leaving the view stale when it matters most.
const (
	minPullGap   = 200 * time.Millisecond
	pullSpacing  = 3
	maxPullPause = 2 * time.Second
)

// pullGap is the least time from the start of a pull that took took to
// the start of the next.
func pullGap(took time.Duration) time.Duration {
	return max(minPullGap, took+min(pullSpacing*took, maxPullPause))
}

// Options configure a Watcher.
type Options struct {
	// Refresh is the period of the pull; a notice pulls at once.
	Refresh time.Duration
	// RequestTimeout bounds each request to the coordinators.
	RequestTimeout time.Duration
	Logger         *slog.Logger
	// Tracer traces each pull; nil traces nothing.
	Tracer trace.Tracer
}

// Status says how current the watcher's view is.
type Status struct {
	// Ready is set once both the stream list and the cluster info have been
	// pulled at least once.
	Ready     bool
	Connected bool
	// PulledAt is when the older of the two was last pulled successfully.
	PulledAt   time.Time
	Version    uint64
	NodesHeard int
}

// Watcher follows the coordinator's state and the heartbeats.
type Watcher struct {
	nc      *nats.Conn
	opts    Options
	log     *slog.Logger
	tracer  trace.Tracer
	pullNow chan struct{}
	// now stamps each heartbeat's arrival (time.Now; tests replay
	// arrivals on a clock of their own).
	now func() time.Time

	mu             sync.Mutex
	streams        *wire.StreamList
	streamsAt      time.Time // when the list was last known current
	listedAt       time.Time // when the list was last listed in full
	lowerStreams   int
	cluster        *wire.ClusterInfo
	clusterAt      time.Time
	lowerCluster   int
	noticed        uint64 // highest notice version that asked for a pull
	hbs            map[string]judge.HeartbeatSeen
	listDue        map[string]bool              // nodes whose hbs copies are to be listed from reports; guarded by mu
	parts          *heartbeat.Assembler         // guarded by mu
	reports        map[string]*heartbeat.Copies // each node's copies from its reports; guarded by mu
	hbDec          *heartbeat.Decoder           // guarded by mu
	listeningSince time.Time
	reconnects     uint64
}

// New returns a Watcher on nc. Call Run to start it.
func New(nc *nats.Conn, opts Options) *Watcher {
	if opts.Refresh <= 0 {
		opts.Refresh = time.Second
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 2 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Tracer == nil {
		opts.Tracer = noop.NewTracerProvider().Tracer("")
	}
	return &Watcher{
		nc:      nc,
		opts:    opts,
		log:     opts.Logger,
		tracer:  opts.Tracer,
		pullNow: make(chan struct{}, 1),
		now:     time.Now,
		hbs:     map[string]judge.HeartbeatSeen{},
		listDue: map[string]bool{},
		parts:   heartbeat.NewAssembler(),
		reports: map[string]*heartbeat.Copies{},
		hbDec:   heartbeat.NewDecoder(),
	}
}

// Run subscribes to heartbeats and change notices, pulls the coordinator's
// state at once and then on every notice and every Refresh, until ctx ends.
func (w *Watcher) Run(ctx context.Context) error {
	hbSub, err := w.nc.Subscribe(wire.HeartbeatWildcard, w.onHeartbeat)
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", wire.HeartbeatWildcard, err)
	}
	defer w.unsubscribe(hbSub)
	noticeSub, err := w.nc.Subscribe(assignWildcard, w.onNotice)
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", assignWildcard, err)
	}
	defer w.unsubscribe(noticeSub)
	// Make sure the server has the subscriptions before listening counts
	// as begun. Without a connection yet (the client retries), Snapshot
	// keeps moving the start forward until it connects.
	fctx, cancel := context.WithTimeout(ctx, w.opts.RequestTimeout)
	if err := w.nc.FlushWithContext(fctx); err != nil {
		w.log.Warn("heartbeat subscription not confirmed yet", "err", err)
	}
	cancel()
	reconnects := w.nc.Stats().Reconnects // the connection's lock, not under w.mu
	w.mu.Lock()
	w.listeningSince = time.Now()
	w.reconnects = reconnects
	w.mu.Unlock()

	tick := time.NewTicker(w.opts.Refresh)
	defer tick.Stop()
	for {
		began := time.Now()
		w.pull(ctx)
		gap := pullGap(time.Since(began))
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-w.pullNow:
		}
		// Notices merge while the next pull waits for its gap.
		if wait := gap - time.Since(began); wait > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
		}
	}
}

// unsubscribe drops sub as Run ends. A failure is only logged: a
// subscription left behind ends with its connection.
func (w *Watcher) unsubscribe(sub *nats.Subscription) {
	if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		w.log.Warn("unsubscribe", "subject", sub.Subject, "err", err)
	}
}

// PullNow asks for a pull soon; requests made while one is pending merge.
func (w *Watcher) PullNow() {
	select {
	case w.pullNow <- struct{}{}:
	default:
	}
}

func (w *Watcher) onHeartbeat(msg *nats.Msg) {
	at := w.now()
	w.mu.Lock()
	hb, err := w.hbDec.Decode(msg.Subject, msg.Data)
	w.mu.Unlock()
	if err != nil {
		w.log.Warn("undecodable heartbeat", "subject", msg.Subject, "err", err)
		return
	}
	token := strings.TrimPrefix(msg.Subject, "brook.hb.")
	if hb.Node == "" {
		hb.Node = token
	}
	if hb.Node != token {
		w.log.Warn("heartbeat names another node than its subject", "subject", msg.Subject, "node", hb.Node)
		return
	}
	if err := wire.ValidName("node", hb.Node); err != nil {
		// Node names bound what the watcher keeps per node; a forged
		// subject must not add entries at will.
		w.log.Warn("heartbeat with an invalid node name", "subject", msg.Subject, "err", err)
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if seen, had := w.hbs[hb.Node]; had && heartbeat.Superseded(hb.Incarnation, seen.Heartbeat.Incarnation, at.Sub(seen.At)) {
		return // a beat its killed predecessor built, delivered late
	}
	whole, ok := w.parts.Add(hb)
	rep := w.reports[hb.Node]
	if rep == nil {
		rep = &heartbeat.Copies{}
		w.reports[hb.Node] = rep
	}
	if !ok || !rep.Apply(whole) {
		// One part of a beat split into several, a liveness beat, or a
		// delta after a missed report: proof of life, but the copies
		// stay as they were until a report completes that can be applied
		// (package heartbeat).
		seen, had := w.hbs[hb.Node]
		if !had || seen.Heartbeat.Incarnation != hb.Incarnation {
			// Heard, but its copies not known yet (a watcher started
			// between two of the node's full reports, which are seconds
			// apart): the node is live and the judge stays quiet about
			// its copies until a report says what they are. Without
			// this it took a running node for "never heard" until then.
			head := hb
			head.Copies, head.Delta, head.Since, head.Live = []wire.CopyStatus{}, false, 0, false
			w.hbs[hb.Node] = judge.HeartbeatSeen{Heartbeat: head, At: at}
			delete(w.listDue, hb.Node)
			return
		}
		seen.At = at
		seen.Heartbeat.Leaving = hb.Leaving
		w.hbs[hb.Node] = seen
		return
	}
	// The node's copies are listed when a judging asks for them
	// (heartbeatsLocked), not here: a host's beats come twice a second,
	// and in a mass failover each of them changes hundreds of its
	// thousands of copies. rep keeps its sorted list across deltas, so a
	// list costs a copy of it and the changes' merge, and nothing when
	// nothing changed (issue 17).
	whole.Copies = nil
	whole.Delta, whole.Since = false, 0
	w.hbs[hb.Node] = judge.HeartbeatSeen{Heartbeat: whole, At: at}
	w.listDue[hb.Node] = true
}

// heartbeatsLocked returns a copy of the heartbeats seen, each node's
// copies listed from its reports as of the last one applied. Call with
// w.mu held.
func (w *Watcher) heartbeatsLocked() map[string]judge.HeartbeatSeen {
	for node := range w.listDue {
		hs := w.hbs[node]
		hs.Heartbeat.Copies = w.reports[node].List()
		w.hbs[node] = hs
		delete(w.listDue, node)
	}
	return maps.Clone(w.hbs)
}

func (w *Watcher) onNotice(msg *nats.Msg) {
	if msg.Subject == wire.AssignPull {
		return // a host's pull request, answered by the coordinators
	}
	var n wire.AssignNotice
	if err := json.Unmarshal(msg.Data, &n); err != nil {
		w.log.Debug("undecodable change notice", "subject", msg.Subject, "err", err)
		return
	}
	w.mu.Lock()
	have := w.noticed
	if w.streams != nil {
		have = max(have, w.streams.Version)
	}
	newer := n.Version > have
	if newer {
		w.noticed = n.Version
	}
	w.mu.Unlock()
	if newer {
		w.log.Debug("change notice", "version", n.Version, "have", have)
		w.PullNow()
	}
}

// pull fetches the cluster info and, when it says the coordinators' state
// moved past the stream list held, the streams changed since (or, when
// the list was listed in full over listMaxAge ago or the coordinators
// cannot say what changed, the whole stream list in pages). The list is
// the costly part: at ten thousand streams a coordinator renders every
// stream's copies for it, so an unchanged state is not listed again on
// every Refresh, and a changed one lists only its changes. A failure
// keeps the previous view of that part; the next pull tries again.
func (w *Watcher) pull(ctx context.Context) {
	ctx, span := w.tracer.Start(ctx, "attention.pull")
	defer span.End()
	var ci wire.ClusterInfo
	clusterOK := false
	if err := w.request(ctx, wire.VerbClusterInfo, wire.Empty{}, &ci); err != nil {
		w.log.Warn("pull cluster info", "err", err)
		span.RecordError(err)
		span.SetStatus(codes.Error, "cluster info")
	} else {
		clusterOK = !ci.Local // a local reply's version says nothing of the list
		w.applyCluster(ci, time.Now())
	}
	if clusterOK && w.listCurrent(ci.Version, time.Now()) {
		span.SetAttributes(attribute.Int64("brook.version", int64(ci.Version)), attribute.Bool("brook.list_skipped", true))
		return
	}
	var first *wire.StreamList // a full listing's first page, already in
	if base, ok := w.changesDue(time.Now(), ci.Version); clusterOK && ok {
		changes, err := w.pullChanges(ctx, base.Version)
		switch {
		case err != nil && wire.CodeOf(err) != wire.CodeBadRequest:
			w.log.Warn("pull the stream list's changes", "err", err)
			span.RecordError(err)
			span.SetStatus(codes.Error, "stream list changes")
			return
		case err != nil:
			// A coordinator of a release without since refuses it: the
			// full listing below answers.
			w.log.Debug("pull the stream list's changes", "err", err)
		case changes.full != nil:
			w.log.Debug("the coordinators cannot list the changes since the list held; listing it in full", "since", base.Version)
			first = changes.full
		default:
			n := w.applyChanges(base, changes, time.Now())
			span.SetAttributes(attribute.Int64("brook.version", int64(changes.version)), attribute.Int("brook.streams", n),
				attribute.Int("brook.changed", len(changes.streams)), attribute.Int("brook.pages", changes.pages))
			return
		}
	}
	sl, pages, err := w.pullStreams(ctx, first)
	if err != nil {
		w.log.Warn("pull stream list", "err", err)
		span.RecordError(err)
		span.SetStatus(codes.Error, "stream list")
		return
	}
	w.applyStreams(sl, time.Now())
	span.SetAttributes(attribute.Int64("brook.version", int64(sl.Version)), attribute.Int("brook.streams", len(sl.Streams)), attribute.Int("brook.pages", pages))
}

// listCurrent reports whether the stream list held is the state at
// version (nothing changed since it was pulled) and was listed in full
// less than listMaxAge ago; if so it counts as pulled now.
func (w *Watcher) listCurrent(version uint64, now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.streams == nil || w.streams.Version != version || now.Sub(w.listedAt) >= listMaxAge {
		return false
	}
	w.streamsAt = now
	return true
}

// changesDue returns the list held when the pull, whose cluster info
// reported the state at version, is to list only its changes: there is
// one, it was listed in full less than listMaxAge ago, and the state is
// not behind it. A state behind the list held is another history (the
// coordinators restored from a backup, say), whose changes after the
// list's version are no changes of the list held: a full listing then
// goes through applyStreams, which follows a lower version only once it
// persists.
func (w *Watcher) changesDue(now time.Time, version uint64) (*wire.StreamList, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.streams, w.streams != nil && now.Sub(w.listedAt) < listMaxAge && version >= w.streams.Version
}

// listChanges is what changed in the stream list after a version: each
// stream changed as listed, nil for one deleted, in the order of the
// pages (a later page's answer about a stream is the newer).
type listChanges struct {
	streams map[string]*wire.StreamInfo
	version uint64 // the last page's: the list with the changes applied is the state at it
	pages   int
	// full is set when the coordinators could not say what changed: their
	// answer is the first page of a full listing.
	full *wire.StreamList
}

// pullChanges reads, in pages of listPage, what changed in the stream
// list after version since. A page answered at version v lists every
// change up to v after its since, each stream as it is at v; a later
// change comes in a later page, whose since is the page's next_since. So
// once the last page is in, the list at since with every page's answers
// applied is the state at the last page's version, whichever replica
// answered each page.
func (w *Watcher) pullChanges(ctx context.Context, since uint64) (listChanges, error) {
	out := listChanges{streams: map[string]*wire.StreamInfo{}}
	req := wire.StreamListRequest{Since: since, Limit: listPage}
	for {
		var page wire.StreamList
		out.pages++
		if err := w.request(ctx, wire.VerbStreamList, req, &page); err != nil {
			return listChanges{}, err
		}
		if page.Since != req.Since {
			if out.pages > 1 {
				// A later page from a replica whose log starts later:
				// list in full from the start.
				return listChanges{full: &wire.StreamList{}}, nil
			}
			return listChanges{full: &page}, nil
		}
		for i := range page.Streams {
			out.streams[page.Streams[i].Stream] = &page.Streams[i]
		}
		for _, name := range page.Deleted {
			out.streams[name] = nil
		}
		out.version = page.Version
		if page.NextSince == 0 {
			return out, nil
		}
		if page.NextSince <= req.Since {
			return listChanges{}, fmt.Errorf("stream list: changes' page since %d does not move past %d", page.NextSince, req.Since)
		}
		req.Since = page.NextSince
	}
}

// applyChanges makes the list base, the one held, with changes applied
// (it consumes changes.streams) the list held, and returns how many
// streams it holds. Only the pulls (Run's goroutine) replace the list, so
// base is still the one held. The list held is shared with the judge's
// views (Snapshot), so it is copied, not changed in place; it stays in
// name order.
func (w *Watcher) applyChanges(base *wire.StreamList, changes listChanges, at time.Time) int {
	out := wire.StreamList{Version: changes.version, Streams: make([]wire.StreamInfo, 0, len(base.Streams)+len(changes.streams))}
	left := changes.streams
	for _, s := range base.Streams {
		c, changed := left[s.Stream]
		switch {
		case !changed:
			out.Streams = append(out.Streams, s)
		case c != nil:
			out.Streams = append(out.Streams, *c)
		}
		delete(left, s.Stream)
	}
	added := false
	for _, c := range left {
		if c != nil {
			out.Streams, added = append(out.Streams, *c), true
		}
	}
	if added {
		slices.SortFunc(out.Streams, func(a, b wire.StreamInfo) int { return strings.Compare(a.Stream, b.Stream) })
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lowerStreams = 0
	w.streams, w.streamsAt = &out, at
	return len(out.Streams)
}

// pullStreams reads the whole stream list in pages of listPage streams,
// so no reply grows with the cluster, starting with first when it is the
// first page already in (Version set). Its version is the lowest of its
// pages' (a change between two pages is then still newer than the list,
// and its notice pulls again).
func (w *Watcher) pullStreams(ctx context.Context, first *wire.StreamList) (wire.StreamList, int, error) {
	var out wire.StreamList
	req := wire.StreamListRequest{Limit: listPage}
	for pages := 1; ; pages++ {
		var page wire.StreamList
		if pages == 1 && first != nil && first.Version != 0 {
			page = *first
		} else if err := w.request(ctx, wire.VerbStreamList, req, &page); err != nil {
			return wire.StreamList{}, pages, err
		}
		if pages == 1 || page.Version < out.Version {
			out.Version = page.Version
		}
		out.Streams = append(out.Streams, page.Streams...)
		if page.Next == "" {
			return out, pages, nil
		}
		if page.Next <= req.Cursor {
			return wire.StreamList{}, pages, fmt.Errorf("stream list: page cursor %q does not move past %q", page.Next, req.Cursor)
		}
		req.Cursor = page.Next
	}
}

// request sends an admin verb with body and decodes the reply into out,
// turning an error reply into a *wire.Error.
func (w *Watcher) request(ctx context.Context, verb string, body, out any) error {
	subject := wire.AdminSubject(verb)
	msg := nats.NewMsg(subject)
	data, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("encode %s: %w", subject, err)
	}
	msg.Data = data
	telemetry.Inject(ctx, msg)
	rctx, cancel := context.WithTimeout(ctx, w.opts.RequestTimeout)
	defer cancel()
	reply, err := w.nc.RequestMsgWithContext(rctx, msg)
	if err != nil {
		return fmt.Errorf("request %s: %w", subject, err)
	}
	if e := wire.DecodeErrorReply(reply.Header.Get(HeaderError), reply.Data); e != nil {
		return fmt.Errorf("request %s: %w", subject, e)
	}
	if err := json.Unmarshal(reply.Data, out); err != nil {
		return fmt.Errorf("decode %s reply: %w", subject, err)
	}
	return nil
}

func (w *Watcher) applyStreams(sl wire.StreamList, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.streams != nil && sl.Version < w.streams.Version {
		w.lowerStreams++
		if w.lowerStreams < lowerVersionsToFollow {
			w.log.Debug("stale stream list ignored", "version", sl.Version, "have", w.streams.Version)
			return
		}
		w.log.Warn("coordinator state version went back; following it", "version", sl.Version, "had", w.streams.Version)
		w.noticed = 0
	}
	w.lowerStreams = 0
	w.streams, w.streamsAt, w.listedAt = &sl, at, at
}

func (w *Watcher) applyCluster(ci wire.ClusterInfo, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ci.Local {
		// A replica's own state read without a quorum may be behind:
		// never followed, nor counted toward following a lower version.
		w.log.Debug("cluster info from a replica's local state ignored", "version", ci.Version, "answered_by", ci.AnsweredBy)
		return
	}
	if w.cluster != nil && ci.Version < w.cluster.Version {
		w.lowerCluster++
		if w.lowerCluster < lowerVersionsToFollow {
			w.log.Debug("stale cluster info ignored", "version", ci.Version, "have", w.cluster.Version)
			return
		}
		w.log.Warn("cluster info version went back; following it", "version", ci.Version, "had", w.cluster.Version)
	}
	w.lowerCluster = 0
	w.cluster, w.clusterAt = &ci, at
}

// Pulled reports whether both the stream list and the cluster info have
// been pulled once (Status.Ready). Unlike Snapshot it does not ask the NATS
// connection.
func (w *Watcher) Pulled() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.streams != nil && w.cluster != nil
}

// Snapshot returns the judge's inputs as of now. The view's slices are
// shared and must not be modified; the heartbeat map is a copy.
//
// Before Run has subscribed, while the connection is down, and right after
// it came back, heartbeats were (or may have been) missed: listening starts
// again, so the judge does not take the silence for nodes being down.
func (w *Watcher) Snapshot(now time.Time) (judge.View, map[string]judge.HeartbeatSeen, Status) {
	connected := w.nc.IsConnected()
	reconnects := w.nc.Stats().Reconnects
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.listeningSince.IsZero() || !connected || reconnects != w.reconnects {
		w.listeningSince, w.reconnects = now, reconnects
	}
	v := judge.View{ListeningSince: w.listeningSince}
	st := Status{Connected: connected, NodesHeard: len(w.hbs)}
	if w.streams != nil {
		v.Streams, v.Version = w.streams.Streams, w.streams.Version
		st.Version = w.streams.Version
	}
	if w.cluster != nil {
		v.Nodes = w.cluster.Nodes
	}
	if w.streams != nil && w.cluster != nil {
		st.Ready = true
		st.PulledAt = w.streamsAt
		if w.clusterAt.Before(st.PulledAt) {
			st.PulledAt = w.clusterAt
		}
	}
	return v, w.heartbeatsLocked(), st
}
