package host

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/heartbeat"
	"github.com/brook-streams/brook/pkg/wire"
)

// fixture runs one Host in this process against an embedded nats-server,
// with the test answering assignment pulls.
type fixture struct {
	t    *testing.T
	nc   *nats.Conn
	host *Host
	rec  *tracetest.SpanRecorder
	done chan error

	mu    sync.Mutex
	snap  wire.AssignmentSnapshot
	hb    wire.Heartbeat
	hbCh  chan struct{}
	pages int // assignment pull pages answered
	// deltas counts the pulls of changes answered as such; served holds
	// the snapshot served at each version, which a pull of changes since
	// that version is answered against (fullPulls forces full answers).
	deltas    int
	served    map[uint64]wire.AssignmentSnapshot
	fullPulls bool
	// failPulls is how many of the next pulls are answered unavailable;
	// pullFailed is signalled after each such answer.
	failPulls  int
	pullFailed chan struct{}
}

func newFixture(t *testing.T) *fixture { return newFixtureWith(t, fixtureOptions{}) }

// fixtureOptions change the fixture's server and host for one test.
type fixtureOptions struct {
	maxPayload int32  // the server's payload limit; 0 for its default
	dataDir    string // the host's data dir; "" for a new empty one
	// streams are the streams that exist (name to id) in the first
	// snapshot the host pulls; copies of others are deleted.
	streams map[string]uint64
	// replWait and replIdleWait are the host's (0: its defaults).
	replWait, replIdleWait time.Duration
	// fullReport is the host's FullReportInterval (0: its default).
	fullReport time.Duration
	// pullPage is the host's PullPage (0: its default).
	pullPage int
	// pullGap and pullInterval are the host's (0: its defaults).
	pullGap, pullInterval time.Duration
}

// startNATS starts an embedded nats-server on a free local port with opts
// (their host, port, logging and signals set here), stopped at the end of
// the test.
func startNATS(t testing.TB, opts server.Options) *server.Server {
	t.Helper()
	opts.Host, opts.Port, opts.NoLog, opts.NoSigs = "127.0.0.1", -1, true, true
	ns, err := server.NewServer(&opts)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(ns.Shutdown)
	return ns
}

// connectNATS starts an embedded nats-server (startNATS) and connects to
// it; the connection is closed at the end of the test.
func connectNATS(t testing.TB) *nats.Conn {
	t.Helper()
	ns := startNATS(t, server.Options{})
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func newFixtureWith(t *testing.T, opts fixtureOptions) *fixture {
	t.Helper()
	ns := startNATS(t, server.Options{MaxPayload: opts.maxPayload})
	f := &fixture{t: t, rec: tracetest.NewSpanRecorder(), done: make(chan error, 1), hbCh: make(chan struct{}),
		served: map[uint64]wire.AssignmentSnapshot{}, pullFailed: make(chan struct{}, 16)}
	f.snap = wire.AssignmentSnapshot{Node: "n1", Streams: map[string]uint64{}}
	for name, id := range opts.streams {
		f.snap.Streams[name] = id
	}
	var err error
	if f.nc, err = nats.Connect(ns.ClientURL()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.nc.Close)
	if _, err := f.nc.Subscribe(wire.AssignPull, func(m *nats.Msg) {
		var req wire.AssignmentPull
		if err := json.Unmarshal(m.Data, &req); err != nil {
			t.Error(err)
		}
		f.mu.Lock()
		if f.failPulls > 0 {
			f.failPulls--
			f.mu.Unlock()
			data, _ := json.Marshal(wire.ErrorReply{Error: &wire.Error{Code: wire.CodeUnavailable, Message: "test: pull refused"}})
			_ = m.Respond(data)
			f.pullFailed <- struct{}{}
			return
		}
		reply := f.delta(req)
		if reply.Since == 0 {
			reply = page(f.snap, wire.AssignmentPull{Node: req.Node, After: req.After, Limit: req.Limit})
		} else {
			f.deltas++
		}
		f.served[f.snap.Version] = f.snap
		data, _ := json.Marshal(reply)
		f.pages++
		f.mu.Unlock()
		_ = m.Respond(nullStarts(t, data))
	}); err != nil {
		t.Fatal(err)
	}
	// f.hb is the latest heartbeat with the copies the reports so far
	// add up to (a full report and the deltas since).
	asm, reports := heartbeat.NewAssembler(), &heartbeat.Copies{}
	if _, err := f.nc.Subscribe(wire.HeartbeatSubject("n1"), func(m *nats.Msg) {
		var hb wire.Heartbeat
		if json.Unmarshal(m.Data, &hb) != nil {
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if whole, ok := asm.Add(hb); ok && reports.Apply(whole) { // liveness beats report no copies
			hb = whole
			hb.Copies, hb.Delta, hb.Since = reports.List(), false, 0
			f.hb = hb
			close(f.hbCh)
			f.hbCh = make(chan struct{})
		}
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.nc.Subscribe(wire.HostLeaveWildcard, func(m *nats.Msg) { _ = m.Respond([]byte(`{"ok":true}`)) }); err != nil {
		t.Fatal(err)
	}
	_ = f.nc.Flush()

	hostNC, err := nats.Connect(ns.ClientURL(), nats.Name("brook-streamhost:n1"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hostNC.Close)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(f.rec))
	if opts.dataDir == "" {
		opts.dataDir = t.TempDir()
	}
	f.host, err = New(Config{
		Node:               "n1",
		DataDir:            opts.dataDir,
		HeartbeatInterval:  50 * time.Millisecond,
		FullReportInterval: opts.fullReport,
		PullPage:           opts.pullPage,
		PullGap:            opts.pullGap,
		PullInterval:       opts.pullInterval,
		AckWait:            50 * time.Millisecond,
		SealLinger:         200 * time.Millisecond,
		ReplWait:           opts.replWait,
		ReplIdleWait:       opts.replIdleWait,
		Logger:             slog.New(slog.NewTextHandler(io.Discard, nil)),
		TracerProvider:     tp,
	}, hostNC)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { f.done <- f.host.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-f.done; err != nil {
			t.Errorf("host run: %v", err)
		}
	})
	return f
}

// page is the page of snap a coordinator answers req with: the streams
// after req.After, at most req.Limit (wire.MaxAssignmentPage when 0).
func page(snap wire.AssignmentSnapshot, req wire.AssignmentPull) wire.AssignmentSnapshot {
	limit := req.Limit
	if limit <= 0 || limit > wire.MaxAssignmentPage {
		limit = wire.MaxAssignmentPage
	}
	names := map[string]bool{}
	for name := range snap.Streams {
		names[name] = true
	}
	for _, as := range snap.Assignments {
		names[as.Assignment.Stream] = true
	}
	var in []string
	for _, name := range slices.Sorted(maps.Keys(names)) {
		if name > req.After {
			in = append(in, name)
		}
	}
	out := wire.AssignmentSnapshot{Version: snap.Version, Node: snap.Node, Assignments: []wire.AssignedStream{}, Streams: map[string]uint64{}}
	if len(in) > limit {
		in = in[:limit]
		out.Next = in[len(in)-1]
	}
	for _, name := range in {
		if id, ok := snap.Streams[name]; ok {
			out.Streams[name] = id
		}
	}
	for _, as := range snap.Assignments {
		if slices.Contains(in, as.Assignment.Stream) {
			out.Assignments = append(out.Assignments, as)
		}
	}
	return out
}

// delta answers a pull of changes as a coordinator does, from the
// difference between the snapshot served at req.Since and the current
// one: the streams whose id or assignment differ (existing ones in
// Streams, their assignments, the others in Deleted), all in one page. It
// returns a reply with Since 0 when the pull is not one of changes or
// cannot be answered as one (no snapshot served at that version, or the
// version is ahead of the current one). Call with f.mu held.
func (f *fixture) delta(req wire.AssignmentPull) wire.AssignmentSnapshot {
	old, ok := f.served[req.Since]
	if req.Since == 0 || !ok || req.Since > f.snap.Version || f.fullPulls {
		return wire.AssignmentSnapshot{}
	}
	cur := f.snap
	out := wire.AssignmentSnapshot{Version: cur.Version, Node: cur.Node, Since: req.Since, Assignments: []wire.AssignedStream{}, Streams: map[string]uint64{}}
	type entry struct {
		id uint64
		as *wire.AssignedStream
	}
	view := func(snap wire.AssignmentSnapshot) map[string]entry {
		m := map[string]entry{}
		for name, id := range snap.Streams {
			m[name] = entry{id: id}
		}
		for i := range snap.Assignments {
			as := &snap.Assignments[i]
			m[as.Assignment.Stream] = entry{id: as.Assignment.StreamID, as: as}
		}
		return m
	}
	was, now := view(old), view(cur)
	for name, e := range now {
		if w, ok := was[name]; ok && w.id == e.id && (w.as == nil) == (e.as == nil) && (w.as == nil || reflect.DeepEqual(*w.as, *e.as)) {
			continue
		}
		out.Streams[name] = e.id
		if e.as != nil {
			out.Assignments = append(out.Assignments, *e.as)
		}
	}
	for name := range was {
		if _, ok := now[name]; !ok {
			out.Deleted = append(out.Deleted, name)
		}
	}
	return out
}

// nullStarts rewrites a snapshot so that assignments whose stream name
// begins with "nostarts" carry "starts": null, as an unreadable list would
// arrive (wire's encoder always sends a list).
func nullStarts(t *testing.T, data []byte) []byte {
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Error(err)
		return data
	}
	list, _ := doc["assignments"].([]any)
	for _, a := range list {
		as := a.(map[string]any)
		if name, _ := as["assignment"].(map[string]any)["stream"].(string); len(name) >= 8 && name[:8] == "nostarts" {
			as["starts"] = nil
		}
	}
	out, err := json.Marshal(doc)
	if err != nil {
		t.Error(err)
		return data
	}
	return out
}

// set replaces the snapshot and notifies the host.
func (f *fixture) set(version uint64, streams map[string]uint64, as ...wire.AssignedStream) {
	f.mu.Lock()
	f.snap = wire.AssignmentSnapshot{Version: version, Node: "n1", Assignments: as, Streams: streams}
	// Another content at a version already served: no pull of changes
	// can start from that version any more.
	delete(f.served, version)
	f.mu.Unlock()
	data, _ := json.Marshal(wire.AssignNotice{Version: version})
	_ = f.nc.Publish(wire.AssignNoticeSubject("n1"), data)
	_ = f.nc.Flush()
}

// waitHB waits for a heartbeat that cond accepts.
func (f *fixture) waitHB(what string, cond func(wire.Heartbeat) bool) wire.Heartbeat {
	f.t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		f.mu.Lock()
		hb, ch := f.hb, f.hbCh
		f.mu.Unlock()
		if cond(hb) {
			return hb
		}
		select {
		case <-ch:
		case <-deadline:
			f.t.Fatalf("timed out waiting for %s; last heartbeat %+v", what, hb)
		}
	}
}

func find(hb wire.Heartbeat, stream string) (wire.CopyStatus, bool) {
	for _, cs := range hb.Copies {
		if cs.Stream == stream {
			return cs, true
		}
	}
	return wire.CopyStatus{}, false
}

func one(stream string, id, epoch uint64, starts []wire.HistoryStart, tp string) wire.AssignedStream {
	return wire.AssignedStream{
		Assignment:  wire.Assignment{Stream: stream, StreamID: id, Epoch: epoch, Owner: "n1", Policy: "majority_durable"},
		Starts:      starts,
		TraceParent: tp,
	}
}

// TestApplySpans: an apply is traced as "host.apply" in the trace of the
// assignment's traceparent, with "cut", "release" and "promote" children.
func TestApplySpans(t *testing.T) {
	f := newFixture(t)
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	f.set(1, map[string]uint64{"s": 1}, one("s", 1, 1, []wire.HistoryStart{}, "00-"+traceID+"-"+parentID+"-01"))
	f.waitHB("owner of s", func(hb wire.Heartbeat) bool {
		cs, ok := find(hb, "s")
		return ok && cs.Role == wire.RoleOwner && cs.Epoch == 1
	})
	var apply sdktrace.ReadOnlySpan
	children := map[string]bool{}
	for _, s := range f.rec.Ended() {
		if s.Name() == "host.apply" {
			apply = s
		}
	}
	if apply == nil {
		t.Fatal("no host.apply span")
	}
	if got := apply.SpanContext().TraceID().String(); got != traceID {
		t.Fatalf("host.apply in trace %s, want %s", got, traceID)
	}
	if got := apply.Parent().SpanID().String(); got != parentID {
		t.Fatalf("host.apply parent %s, want %s", got, parentID)
	}
	if len(apply.Links()) != 1 || apply.Links()[0].SpanContext.SpanID().String() != parentID {
		t.Fatalf("host.apply links %+v, want one to %s", apply.Links(), parentID)
	}
	for _, s := range f.rec.Ended() {
		if s.Parent().SpanID() == apply.SpanContext().SpanID() {
			children[s.Name()] = true
		}
	}
	for _, want := range []string{"cut", "release", "promote"} {
		if !children[want] {
			t.Errorf("host.apply has no %q child (children %v)", want, children)
		}
	}
}

// TestApplyCopyLifecycle: an assignment without readable starts is
// withheld, a copy left out of a live stream stays, a copy of a deleted
// stream is dropped, a new stream id replaces the copy, and an older
// snapshot is never applied.
func TestApplyCopyLifecycle(t *testing.T) {
	f := newFixture(t)
	f.set(1, map[string]uint64{"a": 1, "nostarts": 2}, one("a", 1, 1, []wire.HistoryStart{}, ""), one("nostarts", 2, 1, nil, ""))
	hb := f.waitHB("owner of a, host ready", func(hb wire.Heartbeat) bool {
		cs, ok := find(hb, "a")
		return ok && cs.Role == wire.RoleOwner && f.host.Ready()
	})
	if _, ok := find(hb, "nostarts"); ok {
		t.Fatalf("an assignment without starts was applied: %+v", hb)
	}

	// a is left out but still exists: the copy stays, without a role.
	f.set(2, map[string]uint64{"a": 1}, one("c", 3, 1, []wire.HistoryStart{}, ""))
	f.waitHB("a kept without role, c owned", func(hb wire.Heartbeat) bool {
		a, okA := find(hb, "a")
		c, okC := find(hb, "c")
		return okA && a.Role == wire.RoleNone && okC && c.Role == wire.RoleOwner
	})

	// An older snapshot is ignored, even when pulled.
	f.set(1, map[string]uint64{"a": 1}, one("a", 1, 1, []wire.HistoryStart{}, ""))
	if err := f.host.pullAndApply(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	f.host.mu.Lock()
	applied := f.host.applied
	f.host.mu.Unlock()
	if applied != 2 {
		t.Fatalf("applied version %d after pulling an older snapshot, want 2", applied)
	}
	if cs, _ := find(f.host.Heartbeat(false), "a"); cs.Role != wire.RoleNone {
		t.Fatalf("copy a has role %q after an older snapshot was pulled", cs.Role)
	}
	// a deleted; c recreated under another id.
	f.set(3, map[string]uint64{"c": 4}, one("c", 4, 1, []wire.HistoryStart{}, ""))
	f.waitHB("a deleted, c recreated", func(hb wire.Heartbeat) bool {
		_, okA := find(hb, "a")
		c, okC := find(hb, "c")
		return !okA && okC && c.StreamID == 4 && c.Role == wire.RoleOwner
	})
}

// TestPublishNamesItsStream: a confirm says which stream (id) the record
// went to, and a publish that names a stream id lands only in that stream:
// an owner of an older stream of the name answers not_owner (the client
// retries until the new owner answers), one of a newer stream not_found.
func TestPublishNamesItsStream(t *testing.T) {
	f := newFixture(t)
	f.set(1, map[string]uint64{"p": 5}, one("p", 5, 1, []wire.HistoryStart{}, ""))
	f.waitHB("owner of p", func(hb wire.Heartbeat) bool {
		cs, ok := find(hb, "p")
		return ok && cs.Role == wire.RoleOwner && f.host.Ready()
	})
	publish := func(header string) (wire.PublishConfirm, *wire.Error) {
		t.Helper()
		resp, werr := requestNamingStream(t, f.nc, wire.PublishSubject("p"), []byte("rec"), header)
		if werr != nil {
			return wire.PublishConfirm{}, werr
		}
		var pc wire.PublishConfirm
		if err := json.Unmarshal(resp.Data, &pc); err != nil {
			t.Fatal(err)
		}
		return pc, nil
	}
	for i, h := range []string{"", "5"} {
		pc, werr := publish(h)
		if werr != nil || pc.StreamID != 5 || pc.Offset != uint64(i) {
			t.Fatalf("publish with stream id %q: %+v %v", h, pc, werr)
		}
	}
	for h, code := range map[string]string{"4": wire.CodeNotFound, "6": wire.CodeNotOwner, "five": wire.CodeBadRequest} {
		start := time.Now()
		if _, werr := publish(h); werr == nil || werr.Code != code {
			t.Fatalf("publish with stream id %q: %v, want %s", h, werr, code)
		}
		// An owner of an older stream holds its refusal back, so that the
		// newer stream's owner, if it serves already, answers first.
		if took := time.Since(start); code == wire.CodeNotOwner && took < staleOwnerReplyDelay {
			t.Fatalf("not_owner for a newer stream id came after %v, want at least %v", took, staleOwnerReplyDelay)
		}
	}
	// The refused publishes wrote nothing.
	if pc, werr := publish("5"); werr != nil || pc.Offset != 2 {
		t.Fatalf("publish after refusals: %+v %v, want offset 2", pc, werr)
	}

	// Fetches and cursor commits follow the same rule.
	fetch := []byte(`{"start":"earliest"}`)
	commit := []byte(`{"cursor":"k","offset":2}`)
	for _, tc := range []struct{ h, code string }{
		{"4", wire.CodeNotFound}, {"6", wire.CodeNotOwner}, {"five", wire.CodeBadRequest}, {"5", ""},
	} {
		h, code := tc.h, tc.code
		resp, werr := requestNamingStream(t, f.nc, wire.FetchSubject("p"), fetch, h)
		if codeOf(werr) != code {
			t.Fatalf("fetch with stream id %q: %v, want %q", h, werr, code)
		}
		if code == "" {
			if b, err := frame.DecodeBatch(resp.Data); err != nil || len(b.Records) != 3 {
				t.Fatalf("fetch with stream id %q: %+v %v, want 3 records", h, b, err)
			}
		}
		if _, werr := requestNamingStream(t, f.nc, wire.CommitSubject("p"), commit, h); codeOf(werr) != code {
			t.Fatalf("cursor commit with stream id %q: %v, want %q", h, werr, code)
		}
		want := uint64(0)
		if code == "" {
			want = 2
		}
		if pos, _ := f.host.store.Get("p").Cursor("k"); pos != want {
			t.Fatalf("cursor k at %d after a commit with stream id %q, want %d", pos, h, want)
		}
	}
	// A long-poll fetch naming a newer stream is refused only after its
	// wait too: the newer stream's owner may hold it that long.
	start := time.Now()
	if _, werr := requestNamingStream(t, f.nc, wire.FetchSubject("p"), []byte(`{"start":"latest","wait_ms":300}`), "6"); codeOf(werr) != wire.CodeNotOwner {
		t.Fatalf("long-poll fetch with a newer stream id: %v, want not_owner", werr)
	}
	if took, least := time.Since(start), staleOwnerReplyDelay+300*time.Millisecond; took < least {
		t.Fatalf("not_owner to a long-poll fetch came after %v, want at least %v", took, least)
	}
}

// An owner takes its stream's four data-plane verbs on one subscription
// and its followers' replication on a second, and gives both up with the
// role: a failover that promotes thousands of copies makes two SUBs per
// stream, not five. A message on the stream's wildcard that names no verb
// is refused with bad_request.
func TestOwnerSubscribesTwice(t *testing.T) {
	f := newFixture(t)
	f.waitHB("a ready host", func(wire.Heartbeat) bool { return f.host.Ready() })
	base := f.host.nc.NumSubscriptions()
	f.set(1, map[string]uint64{"p": 5, "q": 6},
		one("p", 5, 1, []wire.HistoryStart{}, ""), one("q", 6, 1, []wire.HistoryStart{}, ""))
	f.waitHB("owner of p and q", func(hb wire.Heartbeat) bool {
		p, okp := find(hb, "p")
		q, okq := find(hb, "q")
		return okp && okq && p.Role == wire.RoleOwner && q.Role == wire.RoleOwner
	})
	if n := f.host.nc.NumSubscriptions(); n != base+4 {
		t.Fatalf("%d subscriptions with two owned streams, want %d (2 per owner)", n, base+4)
	}
	// Every verb still reaches its handler through the one subscription.
	if _, werr := requestNamingStream(t, f.nc, wire.PublishSubject("p"), []byte("rec"), ""); werr != nil {
		t.Fatalf("publish: %v", werr)
	}
	if _, werr := requestNamingStream(t, f.nc, wire.FetchSubject("p"), []byte(`{"start":"earliest"}`), ""); werr != nil {
		t.Fatalf("fetch: %v", werr)
	}
	if _, werr := requestNamingStream(t, f.nc, wire.CommitSubject("p"), []byte(`{"cursor":"k","offset":1}`), ""); werr != nil {
		t.Fatalf("cursor commit: %v", werr)
	}
	if _, werr := requestNamingStream(t, f.nc, "brook.s.p.bogus", []byte("x"), ""); codeOf(werr) != wire.CodeBadRequest {
		t.Fatalf("a request on no verb: %v, want %s", werr, wire.CodeBadRequest)
	}
	// p's role ends (its stream is gone): its two subscriptions go, the
	// intake's once its drain is over.
	f.set(2, map[string]uint64{"q": 6}, one("q", 6, 1, []wire.HistoryStart{}, ""))
	deadline := time.Now().Add(10 * time.Second)
	for f.host.nc.NumSubscriptions() != base+2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d subscriptions after p's role ended, want %d", f.host.nc.NumSubscriptions(), base+2)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// codeOf is the code of werr, or "" for none.
func codeOf(werr *wire.Error) string {
	if werr == nil {
		return ""
	}
	return werr.Code
}

// requestNamingStream sends a request with wire.HeaderStreamID set to
// header (none if empty) and returns the reply, or the error it carried.
func requestNamingStream(t *testing.T, nc *nats.Conn, subject string, data []byte, header string) (*nats.Msg, *wire.Error) {
	t.Helper()
	m := nats.NewMsg(subject)
	m.Data = data
	if header != "" {
		m.Header.Set(wire.HeaderStreamID, header)
	}
	resp, err := nc.RequestMsg(m, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.Header.Get(frame.HeaderError); code != "" {
		var er wire.ErrorReply
		if err := json.Unmarshal(resp.Data, &er); err != nil || er.Error == nil || er.Error.Code != code {
			t.Fatalf("error reply %q with header %q", resp.Data, code)
		}
		return resp, er.Error
	}
	return resp, nil
}

// An idle follower doubles its long poll's wait after every empty reply,
// up to ReplIdleWait, and goes back to ReplWait once records come.
func TestIdleFollowerWaitsLonger(t *testing.T) {
	f := newFixtureWith(t, fixtureOptions{replWait: 40 * time.Millisecond, replIdleWait: 200 * time.Millisecond})
	waits := make(chan uint32, 64)
	var served atomic.Int32
	sub, err := f.nc.Subscribe(wire.ReplicationSubject("fo", 1, "n1"), func(m *nats.Msg) {
		req, err := frame.DecodeReplRequest(m.Data)
		if err != nil {
			t.Error(err)
			return
		}
		if m.Reply == "" {
			// A standalone ack (ackDurable) of the record once durable:
			// no long poll. It goes out after the next request or, when
			// the fsync lands first and the syncer wins the race, before.
			return
		}
		select {
		case waits <- req.WaitMS:
		default:
		}
		// Answer at once, as an owner whose wait ran out would: the
		// fifth answer carries a record.
		b := &frame.Batch{Epoch: 1, Tail: req.RecordTail, Next: req.RecordTail}
		if served.Add(1) == 5 {
			b.Records = []frame.Record{{Offset: req.RecordTail, Data: []byte{0, 'r'}}}
			b.Tail, b.Next = req.RecordTail+1, req.RecordTail+1
		}
		_ = m.Respond(frame.AppendBatch(nil, b))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	as := one("fo", 3, 1, []wire.HistoryStart{}, "")
	as.Assignment.Owner, as.Assignment.Followers = "n9", []string{"n1"}
	f.set(1, map[string]uint64{"fo": 3}, as)

	var got []uint32
	for len(got) < 7 {
		select {
		case w := <-waits:
			got = append(got, w)
		case <-time.After(10 * time.Second):
			t.Fatalf("follower sent %d requests: waits %v", len(got), got)
		}
	}
	// 40, 80, 160, 200 (capped), 200; the fifth reply brought a record:
	// 40, then 80 after the next empty one.
	if want := []uint32{40, 80, 160, 200, 200, 40, 80}; !slices.Equal(got, want) {
		t.Fatalf("follower waits %v ms, want %v", got, want)
	}
}

// TestPullPages: with more streams than one page holds, the host pulls
// page after page and applies every assignment, keeps a left-out copy of
// a stream that exists on a later page, and drops a copy of a stream that
// no page names.
func TestPullPages(t *testing.T) {
	f := newFixtureWith(t, fixtureOptions{pullPage: 3})
	f.mu.Lock()
	f.fullPulls = true // pulls of changes: TestPullOfChanges
	f.mu.Unlock()
	streams := map[string]uint64{"left": 100, "gone": 101}
	var as []wire.AssignedStream
	for i := range 10 {
		name := fmt.Sprintf("p%02d", i)
		streams[name] = uint64(i + 1)
		as = append(as, one(name, uint64(i+1), 1, []wire.HistoryStart{}, ""))
	}
	// First "left" and "gone" are assigned too, so the host holds them.
	f.set(1, streams, append(slices.Clone(as), one("left", 100, 1, []wire.HistoryStart{}, ""), one("gone", 101, 1, []wire.HistoryStart{}, ""))...)
	f.waitHB("12 streams owned", func(hb wire.Heartbeat) bool {
		n := 0
		for _, cs := range hb.Copies {
			if cs.Role == wire.RoleOwner {
				n++
			}
		}
		return n == 12
	})
	f.mu.Lock()
	before := f.pages
	f.mu.Unlock()
	// "left" is left out but still exists (on the last page, after the
	// p.. streams); "gone" is deleted.
	delete(streams, "gone")
	f.set(2, streams, as...)
	f.waitHB("left kept without a role, gone dropped", func(hb wire.Heartbeat) bool {
		left, okL := find(hb, "left")
		_, okG := find(hb, "gone")
		return okL && left.Role == wire.RoleNone && !okG && len(hb.Copies) == 11
	})
	f.mu.Lock()
	pages := f.pages - before
	f.mu.Unlock()
	// 11 streams at 3 a page: 4 pages a pull, maybe more than one pull.
	if pages < 4 {
		t.Fatalf("the pull took %d pages, want at least 4", pages)
	}
}

// owned is a heartbeat condition: the host owns stream name.
func owned(name string) func(wire.Heartbeat) bool {
	return func(hb wire.Heartbeat) bool { cs, ok := find(hb, name); return ok && cs.Role == wire.RoleOwner }
}

// TestPullOfChanges: once it has a snapshot, the host pulls only what
// changed since the version it applied: a new stream comes as a page of
// that stream alone, a stream left out keeps its copy without a role, a
// deleted one's copy goes; a coordinator that cannot answer from that
// version answers in full, and the host applies that.
func TestPullOfChanges(t *testing.T) {
	f := newFixture(t)
	hs := []wire.HistoryStart{}
	f.set(1, map[string]uint64{"a": 1, "b": 2}, one("a", 1, 1, hs, ""), one("b", 2, 1, hs, ""))
	f.waitHB("a and b owned", func(hb wire.Heartbeat) bool { return owned("a")(hb) && owned("b")(hb) })
	deltas := func() int {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.deltas
	}
	before := deltas()

	f.set(2, map[string]uint64{"a": 1, "b": 2, "c": 3}, one("a", 1, 1, hs, ""), one("b", 2, 1, hs, ""), one("c", 3, 1, hs, ""))
	f.waitHB("c owned", owned("c"))
	if deltas() == before {
		t.Fatal("the new stream was not pulled as a change")
	}
	f.mu.Lock()
	d := f.delta(wire.AssignmentPull{Node: "n1", Since: 1})
	f.mu.Unlock()
	if len(d.Streams) != 1 || len(d.Assignments) != 1 || d.Assignments[0].Assignment.Stream != "c" {
		t.Fatalf("the change since 1 is %+v, want c alone", d)
	}

	// a left out (it exists), b deleted.
	f.set(3, map[string]uint64{"a": 1, "c": 3}, one("c", 3, 1, hs, ""))
	f.waitHB("a without a role, b dropped, c owned", func(hb wire.Heartbeat) bool {
		a, okA := find(hb, "a")
		_, okB := find(hb, "b")
		return okA && a.Role == wire.RoleNone && !okB && owned("c")(hb)
	})
	if !f.host.ownsAnyInLatest() {
		t.Fatal("the known assignments lost c")
	}

	// Too old: answered in full, and a full answer drops what it does not
	// name (c, deleted meanwhile).
	f.mu.Lock()
	clear(f.served)
	f.mu.Unlock()
	before = deltas()
	f.set(4, map[string]uint64{"a": 1, "d": 4}, one("a", 1, 1, hs, ""), one("d", 4, 1, hs, ""))
	f.waitHB("a and d owned, c dropped", func(hb wire.Heartbeat) bool {
		_, okC := find(hb, "c")
		return owned("a")(hb) && owned("d")(hb) && !okC
	})
	if deltas() != before {
		t.Fatal("a pull from a version the coordinator cannot answer from was answered as changes")
	}
	// And the next pull is of changes again.
	f.set(5, map[string]uint64{"a": 1, "d": 4, "e": 5}, one("a", 1, 1, hs, ""), one("d", 4, 1, hs, ""), one("e", 5, 1, hs, ""))
	f.waitHB("e owned", owned("e"))
	if deltas() == before {
		t.Fatal("no pull of changes after a full one")
	}
}

// TestRecoveryNoticePulledAtOnce: the gap between notice-asked pulls
// (Config.PullGap) never delays a recovery's notice, which the stream it
// moved waits for; another notice waits for the gap.
func TestRecoveryNoticePulledAtOnce(t *testing.T) {
	f := newFixtureWith(t, fixtureOptions{pullGap: time.Hour, pullInterval: time.Hour})
	// The first pull (at start, no gap) has been answered.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		f.mu.Lock()
		pages := f.pages
		f.mu.Unlock()
		if pages > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the host did not pull its first snapshot")
		}
	}
	streams := map[string]uint64{"moved": 7, "later": 8}
	// A plain notice now waits for the hour's gap.
	f.set(2, streams, one("later", 8, 1, []wire.HistoryStart{}, ""))
	time.Sleep(300 * time.Millisecond)
	f.mu.Lock()
	hb := f.hb
	f.mu.Unlock()
	if owned("later")(hb) {
		t.Fatal("a plain notice was pulled within the gap")
	}
	// A recovery's notice is pulled at once, and the pull applies both.
	f.mu.Lock()
	f.snap = wire.AssignmentSnapshot{Version: 3, Node: "n1", Streams: streams,
		Assignments: []wire.AssignedStream{one("later", 8, 1, []wire.HistoryStart{}, ""), one("moved", 7, 1, []wire.HistoryStart{}, "")}}
	f.mu.Unlock()
	data, _ := json.Marshal(wire.AssignNotice{Version: 3, Recovery: true})
	if err := f.nc.Publish(wire.AssignNoticeSubject("n1"), data); err != nil {
		t.Fatal(err)
	}
	f.waitHB("the recovery's stream owned", owned("moved"))
}

// TestFullReportOnAsk: a notice asking for a full report (a coordinator
// with deltas and no base) makes the host's next heartbeat a full report,
// long before its full-report interval; asked again at once, it waits
// wire.MinAskedFullReportGap.
func TestFullReportOnAsk(t *testing.T) {
	f := newFixtureWith(t, fixtureOptions{fullReport: time.Hour})
	f.set(1, map[string]uint64{"a": 1}, one("a", 1, 1, []wire.HistoryStart{}, ""))
	f.waitHB("a owned", owned("a"))
	fulls := make(chan time.Time, 100)
	sub, err := f.nc.Subscribe(wire.HeartbeatSubject("n1"), func(m *nats.Msg) {
		var hb wire.Heartbeat
		if json.Unmarshal(m.Data, &hb) == nil && !hb.Live && !hb.Delta {
			fulls <- time.Now()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	_ = f.nc.Flush()
	time.Sleep(200 * time.Millisecond)
	if len(fulls) != 0 {
		t.Fatalf("%d full reports unasked, with an interval of an hour", len(fulls))
	}
	ask, _ := json.Marshal(wire.AssignNotice{FullReport: true})
	asked := time.Now()
	_ = f.nc.Publish(wire.AssignNoticeSubject("n1"), ask)
	_ = f.nc.Flush()
	select {
	case <-fulls:
	case <-time.After(5 * time.Second):
		t.Fatal("no full report after the ask")
	}
	_ = f.nc.Publish(wire.AssignNoticeSubject("n1"), ask)
	_ = f.nc.Flush()
	select {
	case at := <-fulls:
		if at.Sub(asked) < wire.MinAskedFullReportGap {
			t.Fatalf("second asked-for full report %v after the first ask, want at least %v", at.Sub(asked), wire.MinAskedFullReportGap)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no full report after the second ask")
	}
}

// TestRecoveryNoticeAssignmentApplied: a recovery's notice that carries
// its committed assignment (AssignNotice.Assigned) is applied at once,
// without waiting for the pull, when its epoch is past the copy's; a
// snapshot older than the notice, pulled meanwhile, is not applied over
// it. Here every pull answers the older snapshot, so only the notice can
// move the copy to epoch 2.
func TestRecoveryNoticeAssignmentApplied(t *testing.T) {
	f := newFixtureWith(t, fixtureOptions{pullGap: time.Hour, pullInterval: time.Hour})
	streams := map[string]uint64{"s": 7}
	f.mu.Lock()
	f.snap = wire.AssignmentSnapshot{Version: 2, Node: "n1", Streams: streams, Assignments: []wire.AssignedStream{one("s", 7, 1, []wire.HistoryStart{}, "")}}
	f.mu.Unlock()
	notice := func(n wire.AssignNotice) {
		data, _ := json.Marshal(n)
		if err := f.nc.Publish(wire.AssignNoticeSubject("n1"), data); err != nil {
			t.Fatal(err)
		}
	}
	ownedAt := func(epoch uint64) func(wire.Heartbeat) bool {
		return func(hb wire.Heartbeat) bool {
			cs, ok := find(hb, "s")
			return ok && cs.Role == wire.RoleOwner && cs.Epoch == epoch
		}
	}
	notice(wire.AssignNotice{Version: 2, Recovery: true})
	f.waitHB("s owned at epoch 1", ownedAt(1))
	moved := one("s", 7, 2, []wire.HistoryStart{}, "")
	notice(wire.AssignNotice{Version: 3, Recovery: true, Assigned: &moved})
	f.waitHB("s owned at epoch 2 from the notice alone", ownedAt(2))
	// The pull the notice asked for answered version 2: not applied.
	time.Sleep(200 * time.Millisecond)
	f.waitHB("s still owned at epoch 2", ownedAt(2))
}

// TestNoticedEpochSurvivesAnOlderPull: a pull read at a version before a
// recovery's notice, past its staleness check when the notice arrived,
// applies after the notice did (found by review: its older assignment
// stopped the role the notice had just given). It is skipped for the
// streams the notice applied, and applied for the others.
func TestNoticedEpochSurvivesAnOlderPull(t *testing.T) {
	f := newFixtureWith(t, fixtureOptions{pullGap: time.Hour, pullInterval: time.Hour})
	streams := map[string]uint64{"s": 7, "t": 8}
	older := wire.AssignmentSnapshot{Version: 2, Node: "n1", Streams: streams, Assignments: []wire.AssignedStream{
		one("s", 7, 1, []wire.HistoryStart{}, ""), one("t", 8, 1, []wire.HistoryStart{}, "")}}
	f.mu.Lock()
	f.snap = older
	f.mu.Unlock()
	notice := func(n wire.AssignNotice) {
		data, _ := json.Marshal(n)
		if err := f.nc.Publish(wire.AssignNoticeSubject("n1"), data); err != nil {
			t.Fatal(err)
		}
	}
	ownedAt := func(stream string, epoch uint64) func(wire.Heartbeat) bool {
		return func(hb wire.Heartbeat) bool {
			cs, ok := find(hb, stream)
			return ok && cs.Role == wire.RoleOwner && cs.Epoch == epoch
		}
	}
	notice(wire.AssignNotice{Version: 2, Recovery: true})
	f.waitHB("s and t owned at epoch 1", func(hb wire.Heartbeat) bool { return ownedAt("s", 1)(hb) && ownedAt("t", 1)(hb) })
	moved := one("s", 7, 2, []wire.HistoryStart{}, "")
	notice(wire.AssignNotice{Version: 3, Recovery: true, Assigned: &moved})
	f.waitHB("s owned at epoch 2 from the notice alone", ownedAt("s", 2))
	time.Sleep(200 * time.Millisecond) // the pull the notice asked for is done
	// The older pull's apply, after the notice's.
	todo := []*wire.AssignedStream{&older.Assignments[0], &older.Assignments[1]}
	f.host.apply(context.Background(), &older, todo)
	f.mu.Lock()
	next := f.hbCh
	f.mu.Unlock()
	select {
	case <-next: // a heartbeat taken after the apply
	case <-time.After(10 * time.Second):
		t.Fatal("no heartbeat after the apply")
	}
	f.mu.Lock()
	hb := f.hb
	f.mu.Unlock()
	if !ownedAt("s", 2)(hb) || !ownedAt("t", 1)(hb) {
		t.Fatalf("after the older pull's apply: %+v", hb)
	}
}
