package watch

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/heartbeat"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/attention/judge"
)

func startNATS(t *testing.T, port int) *natsserver.Server {
	t.Helper()
	ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatalf("nats server: %v", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(5 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(ns.Shutdown)
	return ns
}

func connect(t *testing.T, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// runWatcher runs w until the test ends.
func runWatcher(t *testing.T, w *Watcher) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

func TestHeartbeatsKeptPerNode(t *testing.T) {
	ns := startNATS(t, -1)
	nc := connect(t, ns.ClientURL())
	w := New(connect(t, ns.ClientURL()), Options{Refresh: time.Hour})
	runWatcher(t, w)

	pub := func(subject string, hb any) {
		data, _ := json.Marshal(hb)
		if s, ok := hb.(string); ok {
			data = []byte(s)
		}
		if err := nc.Publish(subject, data); err != nil {
			t.Fatal(err)
		}
	}
	// Hosts repeat their heartbeats; so does the test, until the watcher
	// has subscribed and kept them.
	eventually(t, "heartbeats kept", func() bool {
		pub(wire.HeartbeatSubject("h1"), wire.Heartbeat{Node: "h1", Incarnation: 1, Copies: []wire.CopyStatus{{Stream: "s", RecordTail: 3}}})
		pub(wire.HeartbeatSubject("h2"), wire.Heartbeat{Node: "impostor", Incarnation: 1}) // names another node: dropped
		pub(wire.HeartbeatSubject("h3"), "not json")                                       // dropped
		pub(wire.HeartbeatSubject("h4"), wire.Heartbeat{Incarnation: 1})                   // no node: the subject's
		pub(wire.HeartbeatSubject("h1"), wire.Heartbeat{Node: "h1", Incarnation: 2, Copies: []wire.CopyStatus{{Stream: "s", RecordTail: 5}}})
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // one heartbeat period between rounds
		_, hbs, _ := w.Snapshot(time.Now())
		return hbs["h1"].Heartbeat.Incarnation == 2 && len(hbs) == 2 && hbs["h4"].Heartbeat.Node == "h4"
	})
	_, hbs, st := w.Snapshot(time.Now())
	if got := hbs["h1"].Heartbeat.Copies[0].RecordTail; got != 5 {
		t.Errorf("h1 tail %d, want the latest 5", got)
	}
	if _, ok := hbs["impostor"]; ok || st.NodesHeard != 2 {
		t.Errorf("heartbeats %v", hbs)
	}
	if time.Since(hbs["h1"].At) > time.Minute {
		t.Errorf("receive time %v", hbs["h1"].At)
	}
}

// TestSplitHeartbeatsAssembled publishes a host's beats in parts (as a host
// with more copies than one message holds does): the watcher must keep the
// copies of the last whole beat, never a part's share of them.
func TestSplitHeartbeatsAssembled(t *testing.T) {
	ns := startNATS(t, -1)
	nc := connect(t, ns.ClientURL())
	w := New(connect(t, ns.ClientURL()), Options{Refresh: time.Hour})
	runWatcher(t, w)

	copies := make([]wire.CopyStatus, 40)
	for i := range copies {
		copies[i] = wire.CopyStatus{Stream: fmt.Sprintf("s%02d", i), StreamID: uint64(i + 1), Role: wire.RoleFollower, Epoch: 1, RecordTail: 7}
	}
	beat := uint64(0)
	publishBeat := func(upTo int) int {
		beat++
		parts := heartbeat.Split(wire.Heartbeat{Node: "h1", Incarnation: 1, Beat: beat, Copies: copies}, 4096)
		for _, p := range parts[:min(upTo, len(parts))] {
			data, _ := json.Marshal(p)
			if err := nc.Publish(wire.HeartbeatSubject("h1"), data); err != nil {
				t.Fatal(err)
			}
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		return len(parts)
	}
	eventually(t, "a whole split beat kept", func() bool {
		if n := publishBeat(1 << 30); n < 3 {
			t.Fatalf("%d parts, want at least 3", n)
		}
		time.Sleep(20 * time.Millisecond) // one heartbeat period between rounds
		_, hbs, _ := w.Snapshot(time.Now())
		return len(hbs["h1"].Heartbeat.Copies) == len(copies)
	})
	// Half of the next beat: life is refreshed, the copies stay whole.
	_, before, _ := w.Snapshot(time.Now())
	time.Sleep(5 * time.Millisecond)
	publishBeat(1)
	eventually(t, "a part refreshes the receive time", func() bool {
		_, hbs, _ := w.Snapshot(time.Now())
		return hbs["h1"].At.After(before["h1"].At)
	})
	_, hbs, _ := w.Snapshot(time.Now())
	if got := len(hbs["h1"].Heartbeat.Copies); got != len(copies) {
		t.Fatalf("after one part of a beat the watcher keeps %d copies, want %d", got, len(copies))
	}
}

// TestDeltaHeartbeatsRebuildTheCopies publishes a full report and deltas
// (as every host does): the watcher keeps the copies a full report would
// list, and after a missed delta keeps the previous ones until the next
// full report.
func TestDeltaHeartbeatsRebuildTheCopies(t *testing.T) {
	ns := startNATS(t, -1)
	nc := connect(t, ns.ClientURL())
	w := New(connect(t, ns.ClientURL()), Options{Refresh: time.Hour})
	runWatcher(t, w)

	rep := heartbeat.Reporter{FullEvery: time.Hour}
	beat := uint64(0)
	publish := func(send bool, cs ...wire.CopyStatus) {
		beat++
		hb := rep.Report(wire.Heartbeat{Node: "h1", Incarnation: 1, Beat: beat, Copies: cs}, time.Now())
		if !send {
			return
		}
		data, _ := json.Marshal(hb)
		if err := nc.Publish(wire.HeartbeatSubject("h1"), data); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	copies := func() []wire.CopyStatus {
		_, hbs, _ := w.Snapshot(time.Now())
		return hbs["h1"].Heartbeat.Copies
	}
	a := wire.CopyStatus{Stream: "a", StreamID: 1, Role: wire.RoleOwner, Epoch: 1, RecordTail: 1}
	b := wire.CopyStatus{Stream: "b", StreamID: 2, Role: wire.RoleFollower, Epoch: 1}
	eventually(t, "the first full report kept", func() bool {
		rep = heartbeat.Reporter{FullEvery: time.Hour} // every try starts with a full report
		publish(true, a, b)
		time.Sleep(20 * time.Millisecond)
		return len(copies()) == 2
	})
	a.RecordTail = 2
	publish(true, a) // a delta: a moved, b gone
	eventually(t, "a delta applied", func() bool {
		cs := copies()
		return len(cs) == 1 && cs[0] == a
	})
	a.RecordTail = 3
	publish(false, a, b) // lost
	a.RecordTail = 4
	publish(true, a, b) // follows the lost delta: not applied
	time.Sleep(50 * time.Millisecond)
	if cs := copies(); len(cs) != 1 || cs[0].RecordTail != 2 {
		t.Fatalf("after a missed delta the watcher keeps %v, want a at tail 2 only", cs)
	}
	rep.FullEvery = time.Nanosecond
	publish(true, a, b)
	eventually(t, "the next full report kept", func() bool {
		cs := copies()
		return len(cs) == 2 && cs[0] == a && cs[1] == b
	})
}

// A stale replica's older state must not roll the view back, but a
// coordinator cluster rebuilt from scratch must be followed.
func TestOlderVersionsFollowedOnlyWhenTheyPersist(t *testing.T) {
	ns := startNATS(t, -1)
	w := New(connect(t, ns.ClientURL()), Options{})
	at := time.Now()
	w.applyStreams(wire.StreamList{Version: 5, Streams: []wire.StreamInfo{{Stream: "new"}}}, at)
	w.applyCluster(wire.ClusterInfo{Version: 5}, at)
	for i := 1; i < lowerVersionsToFollow; i++ {
		w.applyStreams(wire.StreamList{Version: 4}, at)
		if v, _, st := w.Snapshot(at); v.Version != 5 || len(v.Streams) != 1 || !st.Ready {
			t.Fatalf("older reply %d rolled the view back to %d", i, v.Version)
		}
	}
	w.applyStreams(wire.StreamList{Version: 4}, at)
	if v, _, _ := w.Snapshot(at); v.Version != 4 || len(v.Streams) != 0 {
		t.Errorf("persisting older version not followed: %d", v.Version)
	}
	// One newer reply in between resets the count.
	w.applyStreams(wire.StreamList{Version: 6}, at)
	w.applyStreams(wire.StreamList{Version: 1}, at)
	w.applyStreams(wire.StreamList{Version: 7}, at)
	w.applyStreams(wire.StreamList{Version: 1}, at)
	if v, _, _ := w.Snapshot(at); v.Version != 7 {
		t.Errorf("version %d, want 7", v.Version)
	}
}

// TestLocalClusterInfoNeverFollowed: a cluster.info answered from a
// replica's local state (no quorum) neither replaces the view nor counts
// toward following a lower version, however often it comes.
func TestLocalClusterInfoNeverFollowed(t *testing.T) {
	ns := startNATS(t, -1)
	w := New(connect(t, ns.ClientURL()), Options{})
	at := time.Now()
	w.applyCluster(wire.ClusterInfo{Version: 5, Leader: 1}, at)
	for range lowerVersionsToFollow + 1 {
		w.applyCluster(wire.ClusterInfo{Version: 3, Local: true}, at)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cluster.Version != 5 || w.cluster.Local || w.lowerCluster != 0 {
		t.Fatalf("after local replies: version %d local %v lower %d, want 5 false 0", w.cluster.Version, w.cluster.Local, w.lowerCluster)
	}
}

func TestRequestErrors(t *testing.T) {
	ns := startNATS(t, -1)
	nc := connect(t, ns.ClientURL())
	if _, err := nc.Subscribe(wire.AdminSubject(wire.VerbStreamList), func(m *nats.Msg) {
		out := nats.NewMsg(m.Reply)
		out.Header.Set(HeaderError, wire.CodeUnavailable)
		out.Data, _ = json.Marshal(wire.ErrorReply{Error: wire.Errorf(wire.CodeUnavailable, "no quorum")})
		if err := m.RespondMsg(out); err != nil {
			t.Errorf("answer %s: %v", m.Subject, err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Subscribe(wire.AdminSubject(wire.VerbClusterInfo), func(m *nats.Msg) {
		if err := m.Respond([]byte("[")); err != nil {
			t.Errorf("answer %s: %v", m.Subject, err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	w := New(connect(t, ns.ClientURL()), Options{RequestTimeout: time.Second})
	ctx := context.Background()
	var sl wire.StreamList
	if err := w.request(ctx, wire.VerbStreamList, wire.StreamListRequest{}, &sl); wire.CodeOf(err) != wire.CodeUnavailable {
		t.Errorf("error reply read as %v", err)
	}
	var ci wire.ClusterInfo
	if err := w.request(ctx, wire.VerbClusterInfo, wire.Empty{}, &ci); err == nil {
		t.Error("undecodable reply accepted")
	}
	w.pull(ctx)
	if _, _, st := w.Snapshot(time.Now()); st.Ready {
		t.Error("ready after failed pulls")
	}
}

// After NATS comes back, heartbeats sent meanwhile were missed: listening
// starts again, so the judge does not take that silence for nodes down.
func TestListeningRestartsAfterReconnect(t *testing.T) {
	ns := startNATS(t, -1)
	port := ns.Addr().(*net.TCPAddr).Port
	w := New(connect(t, ns.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond)), Options{Refresh: time.Hour})
	runWatcher(t, w)
	v, _, st := w.Snapshot(time.Now())
	if !st.Connected || v.ListeningSince.IsZero() {
		t.Fatalf("status %+v since %v", st, v.ListeningSince)
	}
	first := v.ListeningSince

	ns.Shutdown()
	ns.WaitForShutdown()
	var down time.Time
	eventually(t, "the client notices the outage", func() bool {
		down = time.Now()
		_, _, st := w.Snapshot(down)
		return !st.Connected
	})
	if v, _, _ := w.Snapshot(down); !v.ListeningSince.Equal(down) {
		t.Errorf("while disconnected: listening since %v, want %v", v.ListeningSince, down)
	}
	startNATS(t, port)
	eventually(t, "reconnected", func() bool { _, _, st := w.Snapshot(time.Now()); return st.Connected })
	v, _, _ = w.Snapshot(time.Now())
	if !v.ListeningSince.After(down) || !v.ListeningSince.After(first) {
		t.Errorf("listening since %v, not after the outage at %v", v.ListeningSince, down)
	}
}

// fakeLister answers cluster.info and stream.list as the coordinators do,
// stream.list in pages, and counts the list requests.
type fakeLister struct {
	mu       sync.Mutex
	version  uint64
	names    []string // sorted
	lists    int      // stream.list requests answered
	stuckAt  string   // if set, a page after this cursor names it again as next
	maxLimit int      // the largest limit asked for
	// The streams' changes: the version of each stream's latest change
	// (its deletion's for one deleted), the version below which a
	// request with since is answered in full, and the requests with
	// since answered with changes.
	changed map[string]uint64
	floor   uint64
	since   int
	// strict refuses since as a coordinator of an earlier release does
	// (an unknown field: bad_request).
	strict bool
}

// change records a change of the stream name at a new version: its
// creation or update, or its deletion.
func (f *fakeLister) change(name string, deleted bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.version++
	if f.changed == nil {
		f.changed = map[string]uint64{}
	}
	f.changed[name] = f.version
	i, found := slices.BinarySearch(f.names, name)
	switch {
	case deleted && found:
		f.names = slices.Delete(f.names, i, i+1)
	case !deleted && !found:
		f.names = slices.Insert(f.names, i, name)
	}
}

// info is how the fake lists a stream: its version says which change it
// shows.
func (f *fakeLister) info(name string) wire.StreamInfo {
	return wire.StreamInfo{Stream: name, Version: f.changed[name]}
}

// changes answers a request with since from the fake's changes, in the
// order of their versions, as the coordinators do.
func (f *fakeLister) changes(req wire.StreamListRequest) wire.StreamList {
	f.since++
	var after []string
	for name, v := range f.changed {
		if v > req.Since {
			after = append(after, name)
		}
	}
	slices.SortFunc(after, func(a, b string) int { return cmp.Compare(f.changed[a], f.changed[b]) })
	out := wire.StreamList{Version: f.version, Streams: []wire.StreamInfo{}, Since: req.Since}
	for i, name := range after {
		if req.Limit > 0 && i == req.Limit {
			out.NextSince = f.changed[after[i-1]]
			break
		}
		if _, found := slices.BinarySearch(f.names, name); found {
			out.Streams = append(out.Streams, f.info(name))
		} else {
			out.Deleted = append(out.Deleted, name)
		}
	}
	return out
}

func (f *fakeLister) serve(t *testing.T, nc *nats.Conn) {
	t.Helper()
	answer := func(m *nats.Msg, v any) {
		data, _ := json.Marshal(v)
		if err := m.Respond(data); err != nil {
			t.Errorf("answer %s: %v", m.Subject, err)
		}
	}
	if _, err := nc.Subscribe(wire.AdminSubject(wire.VerbClusterInfo), func(m *nats.Msg) {
		f.mu.Lock()
		defer f.mu.Unlock()
		answer(m, wire.ClusterInfo{Version: f.version})
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Subscribe(wire.AdminSubject(wire.VerbStreamList), func(m *nats.Msg) {
		var req wire.StreamListRequest
		if err := json.Unmarshal(m.Data, &req); err != nil {
			t.Errorf("stream.list body %q: %v", m.Data, err)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		f.lists++
		f.maxLimit = max(f.maxLimit, req.Limit)
		if req.Since > 0 && f.strict {
			reply := nats.NewMsg(m.Reply)
			reply.Header.Set(HeaderError, wire.CodeBadRequest)
			reply.Data, _ = json.Marshal(wire.ErrorReply{Error: wire.Errorf(wire.CodeBadRequest, "unknown field \"since\"")})
			if err := m.RespondMsg(reply); err != nil {
				t.Errorf("refuse %s: %v", m.Subject, err)
			}
			return
		}
		if req.Since > 0 && req.Since >= f.floor {
			answer(m, f.changes(req))
			return
		}
		out := wire.StreamList{Version: f.version, Streams: []wire.StreamInfo{}}
		i := sort.SearchStrings(f.names, req.Cursor)
		if i < len(f.names) && f.names[i] == req.Cursor {
			i++
		}
		for ; i < len(f.names) && (req.Limit == 0 || len(out.Streams) < req.Limit); i++ {
			out.Streams = append(out.Streams, f.info(f.names[i]))
		}
		if req.Limit > 0 && i < len(f.names) {
			out.Next = f.names[i-1]
			if f.stuckAt != "" && req.Cursor == f.stuckAt {
				out.Next = req.Cursor
			}
		}
		answer(m, out)
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// The stream list is read in pages, so no reply grows with the cluster,
// and not read again while the cluster info says the state has not moved.
func TestStreamListPagedAndSkippedWhileUnchanged(t *testing.T) {
	ns := startNATS(t, -1)
	f := &fakeLister{version: 7}
	for i := range 1234 {
		f.names = append(f.names, fmt.Sprintf("s%05d", i))
	}
	f.serve(t, connect(t, ns.ClientURL()))
	w := New(connect(t, ns.ClientURL()), Options{RequestTimeout: time.Second})
	ctx := context.Background()

	w.pull(ctx)
	v, _, st := w.Snapshot(time.Now())
	if !st.Ready || len(v.Streams) != len(f.names) || v.Version != 7 {
		t.Fatalf("after the first pull: ready %v, %d streams at version %d; want %d at 7", st.Ready, len(v.Streams), v.Version, len(f.names))
	}
	for i, s := range v.Streams {
		if s.Stream != f.names[i] {
			t.Fatalf("stream %d is %q, want %q (pages lost or repeated)", i, s.Stream, f.names[i])
		}
	}
	f.mu.Lock()
	lists, maxLimit := f.lists, f.maxLimit
	f.mu.Unlock()
	if want := (len(f.names) + listPage - 1) / listPage; lists != want || maxLimit != listPage {
		t.Errorf("%d list requests with limit up to %d; want %d pages of %d", lists, maxLimit, want, listPage)
	}

	w.pull(ctx)
	f.mu.Lock()
	again := f.lists - lists
	f.mu.Unlock()
	if again != 0 {
		t.Errorf("an unchanged state was listed again (%d requests)", again)
	}
	f.change(f.names[0], true) // version 8
	w.pull(ctx)
	if v, _, _ := w.Snapshot(time.Now()); v.Version != 8 || len(v.Streams) != len(f.names) {
		t.Errorf("after the state moved: %d streams at version %d, want %d at 8", len(v.Streams), v.Version, len(f.names))
	}
}

// listedView returns the watcher's stream list as the fake lists it:
// names and versions.
func listedView(w *Watcher) ([]wire.StreamInfo, uint64) {
	v, _, _ := w.Snapshot(time.Now())
	out := make([]wire.StreamInfo, 0, len(v.Streams))
	for _, s := range v.Streams {
		out = append(out, wire.StreamInfo{Stream: s.Stream, Version: s.Version})
	}
	return out, v.Version
}

// fullListing is what a full listing of f gives.
func (f *fakeLister) fullListing() ([]wire.StreamInfo, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []wire.StreamInfo{}
	for _, name := range f.names {
		out = append(out, f.info(name))
	}
	return out, f.version
}

// TestStreamListChangesApplied: once the stream list is held, a pull lists
// only the streams changed after its version, in pages, and the list with
// them applied (updates, deletions, new streams, a stream deleted and
// created again) is what a full listing gives; a coordinator that cannot
// say what changed, and a list listed in full over listMaxAge ago, get a
// full listing again.
func TestStreamListChangesApplied(t *testing.T) {
	ns := startNATS(t, -1)
	f := &fakeLister{version: 7}
	for i := range 1234 {
		f.change(fmt.Sprintf("s%05d", i), false)
	}
	f.serve(t, connect(t, ns.ClientURL()))
	w := New(connect(t, ns.ClientURL()), Options{RequestTimeout: time.Second})
	ctx := context.Background()
	check := func(what string) {
		t.Helper()
		got, gotVersion := listedView(w)
		want, version := f.fullListing()
		if gotVersion != version || !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: %d streams at version %d, want %d at %d", what, len(got), gotVersion, len(want), version)
		}
	}
	requests := func() (lists, since int) {
		f.mu.Lock()
		defer f.mu.Unlock()
		lists, since, f.lists, f.since = f.lists, f.since, 0, 0
		return lists, since
	}
	// pull pulls and checks the list against a full listing and the
	// requests against want: list requests, and of them with since.
	pull := func(what string, wantLists, wantSince int) {
		t.Helper()
		w.pull(ctx)
		check(what)
		if lists, since := requests(); lists != wantLists || since != wantSince {
			t.Fatalf("%s: %d list requests, %d with since answered with changes; want %d and %d", what, lists, since, wantLists, wantSince)
		}
	}
	pull("the first pull", 3, 0)

	f.change("s00010", false)
	f.change("s00020", true)
	f.change("a-new", false)
	f.change("s00030", true)
	f.change("s00030", false)
	pull("five changes", 1, 1)

	for i := range 1100 {
		f.change(fmt.Sprintf("s%05d", i), i%7 == 0)
	}
	pull("1,100 changes", 3, 3)

	// The coordinators' change log starts after the list held.
	f.change("b-new", false)
	f.mu.Lock()
	f.floor = f.version
	f.mu.Unlock()
	pull("a coordinator that cannot list the changes", 3, 0)

	f.change("c-new", false)
	w.mu.Lock()
	w.listedAt = w.listedAt.Add(-listMaxAge)
	w.mu.Unlock()
	pull("a list listed in full listMaxAge ago", 3, 0)

	// A state behind the list held is another history (a restored
	// cluster): its changes are not asked for; a full listing is, which
	// the view follows only once the lower version persists.
	_, held := listedView(w)
	f.mu.Lock()
	f.version = held - 20
	f.mu.Unlock()
	w.pull(ctx)
	if lists, since := requests(); lists != 3 || since != 0 {
		t.Fatalf("a state behind the list: %d list requests, %d with since; want 3 full pages", lists, since)
	}
	if _, v := listedView(w); v != held {
		t.Fatalf("a state behind the list once: the view went to version %d from %d", v, held)
	}
	f.mu.Lock()
	f.version = held
	f.mu.Unlock()

	// A coordinator of an earlier release refuses since: the list is
	// listed in full at once, not left behind until listMaxAge.
	f.mu.Lock()
	f.floor, f.strict = 0, true
	f.mu.Unlock()
	f.change("d-new", false)
	pull("a coordinator that refuses since", 4, 0)
}

// TestStreamListChangesMustMove: a coordinator whose pages of changes do
// not move next_since past since cannot keep the watcher asking forever:
// the pull fails and keeps the previous view.
func TestStreamListChangesMustMove(t *testing.T) {
	ns := startNATS(t, -1)
	nc := connect(t, ns.ClientURL())
	if _, err := nc.Subscribe(wire.AdminSubject(wire.VerbStreamList), func(m *nats.Msg) {
		var req wire.StreamListRequest
		_ = json.Unmarshal(m.Data, &req)
		data, _ := json.Marshal(wire.StreamList{Streams: []wire.StreamInfo{}, Version: 9, Since: req.Since, NextSince: req.Since})
		_ = m.Respond(data)
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	w := New(connect(t, ns.ClientURL()), Options{RequestTimeout: time.Second})
	_, err := w.pullChanges(context.Background(), 5)
	if err == nil || !strings.Contains(err.Error(), "does not move") {
		t.Fatalf("a stuck next_since gave %v", err)
	}
}

// A coordinator whose pages do not move the cursor cannot keep the
// watcher asking forever: the pull fails and keeps the previous view.
func TestStreamListCursorMustMove(t *testing.T) {
	ns := startNATS(t, -1)
	f := &fakeLister{version: 3}
	for i := range 3 * listPage {
		f.names = append(f.names, fmt.Sprintf("s%05d", i))
	}
	f.stuckAt = f.names[listPage-1]
	f.serve(t, connect(t, ns.ClientURL()))
	w := New(connect(t, ns.ClientURL()), Options{RequestTimeout: time.Second})
	_, _, err := w.pullStreams(context.Background(), nil)
	if err == nil || !strings.Contains(err.Error(), "does not move") {
		t.Fatalf("a stuck cursor gave %v", err)
	}
}

// A watcher that starts between a node's full reports hears its liveness
// beats and deltas first: the node counts as heard (live, no copies known,
// so the judge stays quiet about them) instead of "never heard" until the
// next full report, seconds later; that report then gives its copies.
func TestNodeHeardBeforeItsNextFullReport(t *testing.T) {
	w, send := beatWatcher(t)
	seen := func() (judge.HeartbeatSeen, bool) {
		_, hbs, _ := w.Snapshot(time.Now())
		s, ok := hbs["h1"]
		return s, ok
	}
	// A delta whose base this watcher never saw, then liveness beats.
	a := wire.CopyStatus{Stream: "a", StreamID: 1, Role: wire.RoleOwner, Epoch: 1, RecordTail: 5}
	// Sent again on every try: Run subscribes in its own goroutine, so
	// the first may come before the subscription.
	eventually(t, "h1 heard from a delta without base", func() bool {
		send(wire.Heartbeat{Node: "h1", Incarnation: 1, Beat: 7, Delta: true, Since: 6, Copies: []wire.CopyStatus{a}})
		time.Sleep(10 * time.Millisecond)
		_, ok := seen()
		return ok
	})
	if s, _ := seen(); len(s.Heartbeat.Copies) != 0 || s.Heartbeat.Delta {
		t.Fatalf("copies taken from a delta without base: %+v", s.Heartbeat)
	}
	first, _ := seen()
	time.Sleep(5 * time.Millisecond)
	send(wire.Heartbeat{Node: "h1", Incarnation: 1, Beat: 8, Live: true, Copies: []wire.CopyStatus{}})
	eventually(t, "a liveness beat keeps h1 heard", func() bool { s, _ := seen(); return s.At.After(first.At) })
	send(wire.Heartbeat{Node: "h1", Incarnation: 1, Beat: 9, Copies: []wire.CopyStatus{a}})
	eventually(t, "the full report gives the copies", func() bool {
		s, _ := seen()
		return len(s.Heartbeat.Copies) == 1 && s.Heartbeat.Copies[0] == a
	})
}

// TestBeatOfAnOlderIncarnationIgnored: a killed host's beat delivered after
// its successor's must not take the node back to the old incarnation and
// its copies (heartbeat.Superseded, the rule the coordinators follow too).
func TestBeatOfAnOlderIncarnationIgnored(t *testing.T) {
	w, send := beatWatcher(t)
	cur := wire.CopyStatus{Stream: "new", StreamID: 2, Role: wire.RoleOwner, Epoch: 1, RecordTail: 1}
	eventually(t, "h1's new incarnation heard", func() bool {
		send(wire.Heartbeat{Node: "h1", Incarnation: 2, Beat: 1, Copies: []wire.CopyStatus{cur}})
		time.Sleep(10 * time.Millisecond)
		_, hbs, _ := w.Snapshot(time.Now())
		return len(hbs["h1"].Heartbeat.Copies) == 1
	})
	old := wire.CopyStatus{Stream: "old", StreamID: 1, Role: wire.RoleOwner, Epoch: 1, RecordTail: 9}
	send(wire.Heartbeat{Node: "h1", Incarnation: 1, Beat: 40, Copies: []wire.CopyStatus{old}})
	send(wire.Heartbeat{Node: "h1", Incarnation: 1, Beat: 41, Live: true, Copies: []wire.CopyStatus{}})
	// Messages of one connection arrive in order: once h2 is heard, the
	// old beats were handled.
	send(wire.Heartbeat{Node: "h2", Incarnation: 1, Beat: 1, Copies: []wire.CopyStatus{}})
	eventually(t, "h2 heard", func() bool { _, hbs, _ := w.Snapshot(time.Now()); _, ok := hbs["h2"]; return ok })
	_, hbs, _ := w.Snapshot(time.Now())
	if h := hbs["h1"].Heartbeat; h.Incarnation != 2 || len(h.Copies) != 1 || h.Copies[0] != cur {
		t.Fatalf("h1 after its predecessor's late beats: incarnation %d, copies %+v; want 2 with %+v", h.Incarnation, h.Copies, cur)
	}
}

// beatWatcher runs a watcher on a server of its own until the test ends,
// and returns it with a send that publishes a heartbeat on its node's
// subject and flushes.
func beatWatcher(t *testing.T) (*Watcher, func(wire.Heartbeat)) {
	ns := startNATS(t, -1)
	nc := connect(t, ns.ClientURL())
	w := New(connect(t, ns.ClientURL()), Options{Refresh: time.Hour})
	runWatcher(t, w)
	return w, func(hb wire.Heartbeat) {
		t.Helper()
		data, _ := json.Marshal(hb)
		if err := nc.Publish(wire.HeartbeatSubject(hb.Node), data); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
}

// A pull is followed by a pause of pullSpacing times its length, at most
// maxPullPause, before the next one starts, and pulls start at least
// minPullGap apart.
func TestPullGapPausesInProportionToThePull(t *testing.T) {
	for _, tc := range []struct{ took, want time.Duration }{
		{0, minPullGap},
		{10 * time.Millisecond, minPullGap},
		{50 * time.Millisecond, minPullGap},
		{100 * time.Millisecond, 400 * time.Millisecond},
		{500 * time.Millisecond, 2 * time.Second},
		{time.Second, 3 * time.Second},
		{5 * time.Second, 7 * time.Second},
	} {
		if got := pullGap(tc.took); got != tc.want {
			t.Errorf("pullGap(%v) = %v, want %v", tc.took, got, tc.want)
		}
	}
}
