package server

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/internal/testutil"
)

// cluster is n real coordinators (real Dragonboat on loopback ports, real
// embedded nats-server) in this test process.
type cluster struct {
	t       *testing.T
	nats    *testutil.NATS
	peers   map[uint64]string
	dirs    map[uint64]string
	servers map[uint64]*Server
	spans   *tracetest.SpanRecorder
	tp      *sdktrace.TracerProvider
	client  *nats.Conn
	opts    Options // template: TTL etc.
}

func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("BROOK_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	return slog.New(slog.DiscardHandler)
}

// newCluster starts n coordinators. tune adjusts the options template.
func newCluster(t *testing.T, n int, tune func(*Options)) *cluster {
	t.Helper()
	c := &cluster{t: t, nats: testutil.StartNATS(t), peers: map[uint64]string{}, dirs: map[uint64]string{}, servers: map[uint64]*Server{}}
	c.spans = tracetest.NewSpanRecorder()
	c.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(c.spans))
	c.opts = Options{
		NATSURL:         c.nats.URL,
		NATSSystemURL:   c.nats.SysURL,
		TTL:             time.Second,
		DisconnectGrace: 150 * time.Millisecond,
		ReplaceAfter:    time.Minute,
		SealTimeout:     300 * time.Millisecond,
		ControlInterval: 50 * time.Millisecond,
		Logger:          testLogger(t),
		TracerProvider:  c.tp,
	}
	if tune != nil {
		tune(&c.opts)
	}
	for i, a := range testutil.FreeAddrs(t, n) {
		id := uint64(i + 1)
		c.peers[id] = a
		c.dirs[id] = t.TempDir()
	}
	for id := range c.peers {
		c.start(id)
	}
	nc, err := nats.Connect(c.nats.URL, nats.Name("test-client"))
	if err != nil {
		t.Fatal(err)
	}
	c.client = nc
	t.Cleanup(func() {
		nc.Close()
		for id := range c.servers {
			c.kill(id)
		}
	})
	c.leader()
	return c
}

func (c *cluster) start(id uint64) {
	c.t.Helper()
	o := c.opts
	o.ReplicaID, o.RaftAddr, o.Peers, o.DataDir = id, c.peers[id], c.peers, c.dirs[id]
	o.Logger = c.opts.Logger.With("replica", id)
	s, err := Start(context.Background(), o)
	if err != nil {
		c.t.Fatalf("start coordinator %d: %v", id, err)
	}
	c.servers[id] = s
}

// kill stops a coordinator abruptly: no leadership transfer, its NodeHost
// simply closes.
func (c *cluster) kill(id uint64) {
	c.servers[id].shutdown(context.Background(), false)
	delete(c.servers, id)
}

// stop stops a coordinator gracefully.
func (c *cluster) stop(id uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.servers[id].Close(ctx)
	delete(c.servers, id)
}

// leader waits for a running coordinator that leads and whose control loop
// has taken over.
func (c *cluster) leader() uint64 {
	c.t.Helper()
	var id uint64
	testutil.Eventually(c.t, 15*time.Second, "a leading coordinator", func() bool {
		id = 0
		for i, s := range c.servers {
			s.mu.Lock()
			leading := s.leading
			s.mu.Unlock()
			if leading && s.IsLeader() {
				id = i
			}
		}
		if id == 0 {
			return false
		}
		for _, s := range c.servers {
			if !s.Serving() {
				return false
			}
		}
		return true
	})
	return id
}

// admin sends one admin request; body is JSON text or a value to encode.
func (c *cluster) admin(verb string, body any, out any) *wire.Error {
	c.t.Helper()
	return request(c.t, c.client, wire.AdminSubject(verb), body, out)
}

func request(t *testing.T, nc *nats.Conn, subject string, body any, out any) *wire.Error {
	t.Helper()
	var data []byte
	switch b := body.(type) {
	case string:
		data = []byte(b)
	case nil:
	default:
		var err error
		if data, err = json.Marshal(b); err != nil {
			t.Fatal(err)
		}
	}
	m, err := nc.Request(subject, data, 10*time.Second)
	if err != nil {
		t.Fatalf("request %s: %v", subject, err)
	}
	if code := m.Header.Get(HeaderError); code != "" {
		var er wire.ErrorReply
		if err := json.Unmarshal(m.Data, &er); err != nil || er.Error == nil || er.Error.Code != code {
			t.Fatalf("request %s: bad error reply %q (header %s)", subject, m.Data, code)
		}
		return er.Error
	}
	if out != nil {
		if err := json.Unmarshal(m.Data, out); err != nil {
			t.Fatalf("request %s: decode %q: %v", subject, m.Data, err)
		}
	}
	return nil
}

func (c *cluster) info(stream string) wire.StreamInfo {
	c.t.Helper()
	var info wire.StreamInfo
	if e := c.admin(wire.VerbStreamInfo, wire.StreamRef{Stream: stream}, &info); e != nil {
		c.t.Fatalf("stream.info %s: %v", stream, e)
	}
	return info
}

// waitInfo polls stream.info until cond holds.
func (c *cluster) waitInfo(stream, what string, timeout time.Duration, cond func(wire.StreamInfo) bool) wire.StreamInfo {
	c.t.Helper()
	var info wire.StreamInfo
	testutil.Eventually(c.t, timeout, what, func() bool {
		info = c.info(stream)
		return cond(info)
	})
	return info
}

func (c *cluster) create(stream string, copies int) wire.StreamInfo {
	c.t.Helper()
	var info wire.StreamInfo
	if e := c.admin(wire.VerbStreamCreate, wire.StreamCreate{Stream: stream, Copies: copies}, &info); e != nil {
		c.t.Fatalf("create %s: %v", stream, e)
	}
	return info
}

// spansOf returns the ended spans of one trace by name.
func (c *cluster) spansOf(traceID string) map[string][]sdktrace.ReadOnlySpan {
	out := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range c.spans.Ended() {
		if s.SpanContext().TraceID().String() == traceID {
			out[s.Name()] = append(out[s.Name()], s)
		}
	}
	return out
}

// host is a scripted stream host: it speaks the real protocol over the real
// NATS server (heartbeats, seal replies, assignment notices and pulls) with
// tails the test sets, so the coordinator's behaviour can be driven
// precisely without the storage engine.
type host struct {
	t    *testing.T
	node string
	url  string

	mu          sync.Mutex
	inc         uint64
	nc          *nats.Conn
	leaving     bool
	silentSeals bool
	sealDelay   time.Duration // how long the host takes to answer a seal
	tails       map[string][2]uint64
	pinned      map[string]uint64 // stream -> the epoch it keeps publishing
	copies      map[string]wire.CopyStatus
	snap        wire.AssignmentSnapshot
	notices     int
	seals       []wire.SealRequest
	// mute keeps the host off the data plane: it takes ownership without
	// subscribing to the streams' subjects, like an owner that is slow to
	// start serving.
	mute bool
	// quiet stops the host's heartbeats (as a real host's after its
	// leave).
	quiet bool
	// serving holds the data-plane subscriptions of the streams this host
	// owns, by stream name, as a real host makes them once it has pulled
	// its assignment.
	serving map[string]served
	stop    chan struct{}
	done    chan struct{}
}

// served is a scripted owner's presence on a stream's data plane.
type served struct {
	id   uint64
	subs []*nats.Subscription
}

func (c *cluster) host(node string) *host {
	return c.hostWith(node, false)
}

// hostWith starts a scripted host; a mute one never serves the data plane.
func (c *cluster) hostWith(node string, mute bool) *host {
	h := &host{t: c.t, node: node, url: c.nats.URL, tails: map[string][2]uint64{}, pinned: map[string]uint64{}, copies: map[string]wire.CopyStatus{}, mute: mute}
	h.start(1)
	c.t.Cleanup(h.kill)
	return h
}

// start connects (as brook-streamhost:<node>) with incarnation inc.
func (h *host) start(inc uint64) {
	h.t.Helper()
	nc, err := nats.Connect(h.url, nats.Name(HostConnPrefix+h.node), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		h.t.Fatal(err)
	}
	h.mu.Lock()
	h.inc, h.nc, h.leaving = inc, nc, false
	h.serving = map[string]served{}
	h.stop, h.done = make(chan struct{}), make(chan struct{})
	stop, done := h.stop, h.done
	h.mu.Unlock()
	if _, err := nc.Subscribe(wire.SealSubject(h.node), h.onSeal); err != nil {
		h.t.Fatal(err)
	}
	if _, err := nc.Subscribe(wire.SealBatchSubject(h.node), h.onSeals); err != nil {
		h.t.Fatal(err)
	}
	pull := make(chan struct{}, 1)
	if _, err := nc.Subscribe(wire.AssignNoticeSubject(h.node), func(*nats.Msg) {
		h.mu.Lock()
		h.notices++
		h.mu.Unlock()
		select {
		case pull <- struct{}{}:
		default:
		}
	}); err != nil {
		h.t.Fatal(err)
	}
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		h.pull()
		for {
			h.beat()
			select {
			case <-stop:
				return
			case <-tick.C:
			case <-pull:
				h.pull()
			}
		}
	}()
}

// kill closes the connection at once (no leaving heartbeat).
func (h *host) kill() {
	h.mu.Lock()
	nc, stop, done := h.nc, h.stop, h.done
	h.nc = nil
	h.mu.Unlock()
	if nc == nil {
		return
	}
	close(stop)
	<-done
	nc.Close()
}

func (h *host) beat() {
	h.mu.Lock()
	hb := wire.Heartbeat{Node: h.node, Incarnation: h.inc, Leaving: h.leaving, Copies: []wire.CopyStatus{}, AtMS: time.Now().UnixMilli()}
	for _, c := range h.copies {
		hb.Copies = append(hb.Copies, c)
	}
	nc := h.nc
	if h.quiet {
		nc = nil
	}
	h.mu.Unlock()
	// The connection the beat goes out on, as a real host names it: the
	// advisory test below matches the server's advisory against it.
	if nc == nil {
		return
	}
	hb.ConnServer = nc.ConnectedServerId()
	if cid, err := nc.GetClientID(); err == nil {
		hb.ConnID = cid
	}
	data, _ := json.Marshal(hb)
	_ = nc.Publish(wire.HeartbeatSubject(h.node), data)
}

// pull fetches this node's assignment snapshot and reports its copies in
// the following heartbeats, at the tails the test set.
func (h *host) pull() {
	h.mu.Lock()
	nc := h.nc
	h.mu.Unlock()
	m, err := nc.Request(wire.AssignPull, fmt.Appendf(nil, `{"node":%q}`, h.node), 2*time.Second)
	if err != nil {
		return
	}
	var snap wire.AssignmentSnapshot
	if err := decodeReply(m, &snap); err != nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if snap.Version < h.snap.Version {
		return
	}
	h.snap = snap
	for name, c := range h.copies {
		if id, ok := snap.Streams[name]; !ok || id != c.StreamID {
			delete(h.copies, name)
			continue
		}
		c.Role = wire.RoleNone
		h.copies[name] = c
	}
	for _, as := range snap.Assignments {
		a := as.Assignment
		role := wire.RoleFollower
		if a.Owner == h.node {
			role = wire.RoleOwner
		}
		t := h.tails[a.Stream]
		epoch := a.Epoch
		if e, ok := h.pinned[a.Stream]; ok {
			epoch = e
		}
		h.copies[a.Stream] = wire.CopyStatus{Stream: a.Stream, StreamID: a.StreamID, Role: role, Epoch: epoch, RecordTail: t[0], CursorTail: t[1]}
	}
	h.serveLocked(nc, snap)
}

// serveLocked subscribes to the publish and fetch subjects of the streams
// the snapshot makes this host own, and leaves those of the others, as a
// real owner does once it has taken its role. A publish is answered with a
// confirm at the host's record tail, a fetch with an empty reply; both
// refuse a Brook-Stream-Id naming another stream.
func (h *host) serveLocked(nc *nats.Conn, snap wire.AssignmentSnapshot) {
	if h.mute {
		return
	}
	owned := map[string]wire.Assignment{}
	for _, as := range snap.Assignments {
		if as.Assignment.Owner == h.node {
			owned[as.Assignment.Stream] = as.Assignment
		}
	}
	for name, sv := range h.serving {
		if a, ok := owned[name]; !ok || a.StreamID != sv.id {
			for _, sub := range sv.subs {
				_ = sub.Unsubscribe()
			}
			delete(h.serving, name)
		}
	}
	for name, a := range owned {
		if _, ok := h.serving[name]; ok {
			continue
		}
		id, epoch := a.StreamID, a.Epoch
		answer := func(m *nats.Msg, data []byte) {
			resp := nats.NewMsg(m.Reply)
			if got := m.Header.Get(wire.HeaderStreamID); got != "" && got != strconv.FormatUint(id, 10) {
				resp.Header.Set(HeaderError, wire.CodeNotFound)
				data = []byte(`{"error":{"code":"not_found","message":"another stream"}}`)
			}
			resp.Data = data
			_ = m.RespondMsg(resp)
		}
		sv := served{id: id}
		for _, sub := range []struct {
			subj string
			cb   nats.MsgHandler
		}{
			{wire.PublishSubject(name), func(m *nats.Msg) {
				h.mu.Lock()
				t := h.tails[name]
				h.mu.Unlock()
				data, _ := json.Marshal(wire.PublishConfirm{StreamID: id, Offset: t[0], Epoch: epoch, Copies: 1, W: 1})
				answer(m, data)
			}},
			{wire.FetchSubject(name), func(m *nats.Msg) { answer(m, nil) }},
		} {
			s, err := nc.Subscribe(sub.subj, sub.cb)
			if err != nil {
				return // the connection is closing
			}
			sv.subs = append(sv.subs, s)
		}
		h.serving[name] = sv
	}
}

func (h *host) onSeal(m *nats.Msg) {
	var req wire.SealRequest
	if err := json.Unmarshal(m.Data, &req); err != nil {
		return
	}
	reply, delay, silent := h.sealOf(req)
	if silent {
		return
	}
	time.Sleep(delay)
	data, _ := json.Marshal(reply)
	_ = m.Respond(data)
}

// onSeals answers a batch of seals (brook.host.<node>.seals) as onSeal
// answers each, after one delay.
func (h *host) onSeals(m *nats.Msg) {
	var b wire.SealBatch
	if err := json.Unmarshal(m.Data, &b); err != nil {
		return
	}
	out := wire.SealBatchReply{Replies: make([]wire.SealResult, len(b.Seals))}
	var delay time.Duration
	silent := false
	for i, req := range b.Seals {
		out.Replies[i].Reply, delay, silent = h.sealOf(req)
	}
	if silent {
		return
	}
	time.Sleep(delay)
	data, _ := json.Marshal(out)
	_ = m.Respond(data)
}

// sealOf notes a seal and returns its reply, the delay before it and
// whether the host answers no seal.
func (h *host) sealOf(req wire.SealRequest) (*wire.SealReply, time.Duration, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.tails[req.Stream]
	h.seals = append(h.seals, req)
	if c, ok := h.copies[req.Stream]; ok {
		c.Sealed = true
		h.copies[req.Stream] = c
	}
	return &wire.SealReply{Node: h.node, Stream: req.Stream, FenceEpoch: req.FenceEpoch,
		Transition: req.Transition, RecordTail: t[0], CursorTail: t[1], LogEpochs: []wire.LogEpoch{}}, h.sealDelay, h.silentSeals
}

func (h *host) setTails(stream string, record, cursor uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tails[stream] = [2]uint64{record, cursor}
	if c, ok := h.copies[stream]; ok {
		c.RecordTail, c.CursorTail = record, cursor
		h.copies[stream] = c
	}
}

// pinEpoch makes the host keep publishing epoch for its copy of stream,
// like a host that has not applied its later role changes.
func (h *host) pinEpoch(stream string, epoch uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pinned[stream] = epoch
	if c, ok := h.copies[stream]; ok {
		c.Epoch = epoch
		h.copies[stream] = c
	}
}

func (h *host) setSilent(silent bool) {
	h.mu.Lock()
	h.silentSeals = silent
	h.mu.Unlock()
}

// probeOn subscribes the host to its liveness probe subject: it answers
// each probe naming its incarnation when answer is set, and lets every
// probe go unanswered otherwise (a host cut off, or stalled past the
// probe's bound). Without it, a probe finds no responders, as a dead
// host's would.
func (h *host) probeOn(answer bool) {
	h.t.Helper()
	h.mu.Lock()
	nc := h.nc
	h.mu.Unlock()
	if _, err := nc.Subscribe(wire.HostProbeSubject(h.node), func(m *nats.Msg) {
		if !answer {
			return
		}
		h.mu.Lock()
		data, _ := json.Marshal(wire.Heartbeat{Node: h.node, Incarnation: h.inc, Copies: []wire.CopyStatus{}, Live: true})
		h.mu.Unlock()
		_ = m.Respond(data)
	}); err != nil {
		h.t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		h.t.Fatal(err)
	}
}

// stopBeats stops the host's heartbeats; it still answers seals.
func (h *host) stopBeats() {
	h.mu.Lock()
	h.quiet = true
	h.mu.Unlock()
}

func (h *host) setLeaving() {
	h.mu.Lock()
	h.leaving = true
	h.mu.Unlock()
	h.beat()
}

// holdCopy makes the host report a copy of stream (e.g. a copy it kept
// across a restart) before any assignment includes it.
func (h *host) holdCopy(stream string, id uint64, record uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tails[stream] = [2]uint64{record, 0}
	h.copies[stream] = wire.CopyStatus{Stream: stream, StreamID: id, Role: wire.RoleNone, RecordTail: record}
}

// sealsSeen returns the seal requests the host received, in order.
func (h *host) sealsSeen() []wire.SealRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]wire.SealRequest(nil), h.seals...)
}

func (h *host) snapshot() wire.AssignmentSnapshot {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.snap
}
