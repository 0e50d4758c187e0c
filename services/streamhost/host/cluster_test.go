package host

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/heartbeat"
	"github.com/brook-streams/brook/pkg/streamlog"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/streamhost/envelope"
	"github.com/brook-streams/brook/services/streamhost/internal/assigntest"
)

// miniCluster runs several Hosts in this process against one embedded
// nats-server, with the test standing in for the coordinators: it answers
// assignment pulls from assignments it controls and records heartbeats.
type miniCluster struct {
	t   testing.TB
	url string
	nc  *nats.Conn
	dir string

	table *assigntest.Table // its own lock

	mu      sync.Mutex
	hbs     map[string]wire.Heartbeat
	parts   *heartbeat.Assembler
	reports map[string]*heartbeat.Copies
	changed chan struct{} // closed and replaced on every heartbeat
	hosts   map[string]*testHost
}

// testHost is one in-process Host with its captured log.
type testHost struct {
	node   string
	h      *Host
	log    *logBuffer
	cancel context.CancelFunc
	done   chan error
}

// logBuffer collects a host's log lines and wakes waiters on each one.
type logBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

func newLogBuffer() *logBuffer { return &logBuffer{changed: make(chan struct{})} }

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	close(b.changed)
	b.changed = make(chan struct{})
	return len(p), nil
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor waits until the log contains s, at most 10s.
func (b *logBuffer) waitFor(t *testing.T, s string) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		b.mu.Lock()
		found, ch := strings.Contains(b.buf.String(), s), b.changed
		b.mu.Unlock()
		if found {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %q in the log:\n%s", s, b.String())
		}
	}
}

func newMiniCluster(t testing.TB) *miniCluster {
	t.Helper()
	ns := startNATS(t, server.Options{})
	c := &miniCluster{
		t:       t,
		url:     ns.ClientURL(),
		dir:     t.TempDir(),
		table:   assigntest.NewTable(),
		hbs:     map[string]wire.Heartbeat{},
		parts:   heartbeat.NewAssembler(),
		reports: map[string]*heartbeat.Copies{},
		changed: make(chan struct{}),
		hosts:   map[string]*testHost{},
	}
	var err error
	if c.nc, err = nats.Connect(c.url); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.nc.Close)
	if _, err := c.nc.Subscribe(wire.AssignPull, c.table.ServePull); err != nil {
		t.Fatal(err)
	}
	if _, err := c.nc.Subscribe(wire.HeartbeatWildcard, c.onHeartbeat); err != nil {
		t.Fatal(err)
	}
	if _, err := c.nc.Subscribe(wire.HostLeaveWildcard, func(m *nats.Msg) { _ = m.Respond([]byte(`{"ok":true}`)) }); err != nil {
		t.Fatal(err)
	}
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *miniCluster) onHeartbeat(m *nats.Msg) {
	var hb wire.Heartbeat
	if err := json.Unmarshal(m.Data, &hb); err != nil {
		return
	}
	c.mu.Lock()
	// hbs holds the copies the reports so far add up to (a full report
	// and the deltas since), as a coordinator rebuilds them; a liveness
	// beat changes nothing.
	r := c.reports[hb.Node]
	if r == nil {
		r = &heartbeat.Copies{}
		c.reports[hb.Node] = r
	}
	if whole, ok := c.parts.Add(hb); ok {
		r.Apply(whole)
	}
	// The header is the latest beat's, of either kind (liveness beats
	// carry leaving and the store error too).
	hb.Copies, hb.Delta, hb.Since, hb.Part, hb.Parts = r.List(), false, 0, 0, 1
	c.hbs[hb.Node] = hb
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

// dataDir is node's data directory; it outlives the node's host, so a
// test can prepare it with streamlog before the host starts.
func (c *miniCluster) dataDir(node string) string { return filepath.Join(c.dir, node) }

// start runs a Host for node; adjust may change its configuration.
func (c *miniCluster) start(node string, adjust func(*Config)) *testHost {
	c.t.Helper()
	nc, err := nats.Connect(c.url, nats.Name("brook-streamhost:"+node))
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(nc.Close)
	return c.startOn(node, nc, adjust)
}

// startOn runs a Host for node on the connection nc (which the test
// closes); adjust may change its configuration.
func (c *miniCluster) startOn(node string, nc *nats.Conn, adjust func(*Config)) *testHost {
	c.t.Helper()
	lb := newLogBuffer()
	cfg := Config{
		Node:              node,
		DataDir:           c.dataDir(node),
		HeartbeatInterval: 50 * time.Millisecond,
		// Only the start, notices and the host's own requests pull: a
		// test must not be rescued by a periodic pull.
		PullInterval: time.Hour,
		AckWait:      50 * time.Millisecond,
		SealLinger:   200 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	if adjust != nil {
		adjust(&cfg)
	}
	h, err := New(cfg, nc)
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	th := &testHost{node: node, h: h, log: lb, cancel: cancel, done: make(chan error, 1)}
	go func() { th.done <- h.Run(ctx) }()
	c.mu.Lock()
	c.hosts[node] = th
	delete(c.hbs, node)
	c.mu.Unlock()
	c.t.Cleanup(th.stop)
	c.t.Cleanup(func() {
		if c.t.Failed() {
			c.t.Logf("--- log of %s ---\n%s", node, lb.String())
		}
	})
	return th
}

// stop stops the host and waits for it; repeating is harmless.
func (th *testHost) stop() {
	th.cancel()
	if err, ok := <-th.done; ok {
		close(th.done)
		_ = err
	}
}

// assign sets the assignments of the given streams, bumps the version and
// notifies every host.
func (c *miniCluster) assign(as ...wire.AssignedStream) uint64 {
	v := c.table.Set(as...)
	c.mu.Lock()
	nodes := make([]string, 0, len(c.hosts))
	for n := range c.hosts {
		nodes = append(nodes, n)
	}
	c.mu.Unlock()
	assigntest.Notify(c.nc, v, nodes)
	return v
}

// waitCopy waits until node's heartbeat shows stream in a state pred
// accepts.
func (c *miniCluster) waitCopy(node, stream, what string, pred func(wire.CopyStatus) bool) wire.CopyStatus {
	c.t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		var cs wire.CopyStatus
		found := false
		for _, x := range c.hbs[node].Copies {
			if x.Stream == stream {
				cs, found = x, true
			}
		}
		ch := c.changed
		c.mu.Unlock()
		if found && pred(cs) {
			return cs
		}
		select {
		case <-ch:
		case <-deadline.C:
			c.t.Fatalf("timed out waiting for %s's copy of %s: %s (last %+v)", node, stream, what, cs)
		}
	}
}

// publish sends one record, with a producer and sequence unless producer
// is empty, and returns the confirm or the error reply.
func (c *miniCluster) publish(stream string, data []byte, producer string, seq uint64) (*wire.PublishConfirm, *wire.Error) {
	c.t.Helper()
	m := nats.NewMsg(wire.PublishSubject(stream))
	m.Data = data
	if producer != "" {
		m.Header.Set(wire.HeaderProducer, producer)
		m.Header.Set(wire.HeaderSequence, strconv.FormatUint(seq, 10))
	}
	resp, err := c.nc.RequestMsg(m, 10*time.Second)
	if err != nil {
		return nil, &wire.Error{Code: "transport", Message: err.Error()}
	}
	if e := replyError(resp); e != nil {
		return nil, e
	}
	var pc wire.PublishConfirm
	if err := json.Unmarshal(resp.Data, &pc); err != nil {
		c.t.Fatalf("decode confirm %q: %v", resp.Data, err)
	}
	return &pc, nil
}

func (c *miniCluster) mustPublish(stream string, data []byte) wire.PublishConfirm {
	c.t.Helper()
	pc, e := c.publish(stream, data, "", 0)
	if e != nil {
		c.t.Fatalf("publish to %s: %v", stream, e)
	}
	return *pc
}

func replyError(m *nats.Msg) *wire.Error {
	var er wire.ErrorReply
	if json.Unmarshal(m.Data, &er) == nil && er.Error != nil {
		return er.Error
	}
	if code := m.Header.Get(frame.HeaderError); code != "" {
		return &wire.Error{Code: code, Message: string(m.Data)}
	}
	return nil
}

// seal sends a seal request to node.
func (c *miniCluster) seal(node, stream string, id, fence, transition uint64) (*wire.SealReply, *wire.Error) {
	body, _ := json.Marshal(wire.SealRequest{Stream: stream, StreamID: id, FenceEpoch: fence, Transition: transition})
	resp, err := c.nc.Request(wire.SealSubject(node), body, 5*time.Second)
	if err != nil {
		return nil, &wire.Error{Code: "transport", Message: err.Error()}
	}
	if e := replyError(resp); e != nil {
		return nil, e
	}
	var r wire.SealReply
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		c.t.Fatalf("decode seal reply: %v", err)
	}
	return &r, nil
}

// fetch reads from the owner.
func (c *miniCluster) fetch(stream string, req wire.FetchRequest) *frame.Batch {
	c.t.Helper()
	body, _ := json.Marshal(req)
	resp, err := c.nc.Request(wire.FetchSubject(stream), body, 5*time.Second)
	if err != nil {
		c.t.Fatalf("fetch %s: %v", stream, err)
	}
	if e := replyError(resp); e != nil {
		c.t.Fatalf("fetch %s: %v", stream, e)
	}
	b, err := frame.DecodeBatch(resp.Data)
	if err != nil {
		c.t.Fatalf("decode fetch reply: %v", err)
	}
	return b
}

// assignment builds a majority_durable assignment.
func assignment(stream string, id, epoch uint64, owner string, followers []string, starts ...wire.HistoryStart) wire.AssignedStream {
	if starts == nil {
		starts = []wire.HistoryStart{}
	}
	return wire.AssignedStream{
		Assignment: wire.Assignment{Stream: stream, StreamID: id, Epoch: epoch, Owner: owner, Followers: followers, Policy: "majority_durable"},
		Starts:     starts,
	}
}

// prepareCopy writes a copy of stream into node's data directory before
// its host starts: the copy begins epoch and holds stored (enveloped)
// records.
func (c *miniCluster) prepareCopy(node, stream string, id, epoch uint64, stored [][]byte) {
	c.t.Helper()
	st, err := streamlog.Open(streamlog.Options{Dir: c.dataDir(node), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		c.t.Fatal(err)
	}
	defer func() {
		if err := st.Close(); err != nil {
			c.t.Fatal(err)
		}
	}()
	cp, err := st.Create(stream, id, wire.Retention{})
	if err != nil {
		c.t.Fatal(err)
	}
	if err := cp.BeginEpoch(epoch); err != nil {
		c.t.Fatal(err)
	}
	if len(stored) > 0 {
		if _, err := cp.Append(context.Background(), stored); err != nil {
			c.t.Fatal(err)
		}
	}
}

// plain returns the stored form of plain records with the given payloads.
func plain(payloads ...string) [][]byte {
	out := make([][]byte, len(payloads))
	for i, p := range payloads {
		out[i] = envelope.Append(nil, "", 0, []byte(p))
	}
	return out
}

func payload(i int) []byte { return fmt.Appendf(nil, "payload-%d", i) }
