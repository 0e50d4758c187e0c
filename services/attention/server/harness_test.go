package server

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/attention/judge"
)

// The test cluster's timing: heartbeats 10x faster than the TTL, a pull every
// 100ms, so every wait below is well under a second when things work.
const (
	testTTL      = 500 * time.Millisecond
	testHBPeriod = 50 * time.Millisecond
	testRefresh  = 100 * time.Millisecond
)

func startNATS(t *testing.T) *natsserver.Server {
	t.Helper()
	ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
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

func connect(t *testing.T, ns *natsserver.Server, name string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(ns.ClientURL(), nats.Name(name))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// fakeCoordinator stands in for the coordinators' state: it answers
// stream.list and cluster.info from what the test sets, and publishes change
// notices like the leader does.
type fakeCoordinator struct {
	nc    *nats.Conn
	mu    sync.Mutex
	list  wire.StreamList
	info  wire.ClusterInfo
	pulls atomic.Int64
}

func newFakeCoordinator(t *testing.T, nc *nats.Conn) *fakeCoordinator {
	t.Helper()
	fc := &fakeCoordinator{nc: nc}
	fc.list.Streams = []wire.StreamInfo{}
	answer := func(get func() any) nats.MsgHandler {
		return func(m *nats.Msg) {
			var req wire.Empty
			if len(m.Data) > 0 && json.Unmarshal(m.Data, &req) != nil {
				t.Errorf("attention sent a bad request body %q", m.Data)
			}
			fc.mu.Lock()
			data, err := json.Marshal(get())
			fc.mu.Unlock()
			if err != nil {
				t.Errorf("marshal: %v", err)
				return
			}
			if err := m.Respond(data); err != nil {
				t.Errorf("answer %s: %v", m.Subject, err)
			}
		}
	}
	for verb, get := range map[string]func() any{
		wire.VerbStreamList:  func() any { fc.pulls.Add(1); return fc.list },
		wire.VerbClusterInfo: func() any { return fc.info },
	} {
		if _, err := nc.QueueSubscribe(wire.AdminSubject(verb), wire.AdminQueue, answer(get)); err != nil {
			t.Fatalf("subscribe: %v", err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return fc
}

// set replaces the state at a new version and, if notify, publishes the
// change notice to every node as the leader would.
func (fc *fakeCoordinator) set(t *testing.T, version uint64, streams []wire.StreamInfo, nodes []wire.NodeInfo, notify bool) {
	t.Helper()
	fc.mu.Lock()
	fc.list = wire.StreamList{Streams: streams, Version: version}
	fc.info = wire.ClusterInfo{Nodes: nodes, Version: version, Leader: 1, AnsweredBy: 1}
	fc.mu.Unlock()
	if !notify {
		return
	}
	data, _ := json.Marshal(wire.AssignNotice{Version: version})
	for _, n := range nodes {
		if err := fc.nc.Publish(wire.AssignNoticeSubject(n.Node), data); err != nil {
			t.Fatal(err)
		}
	}
	if err := fc.nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// heartbeats publishes, every testHBPeriod, a heartbeat for each running
// node with the copies the test gave it.
type heartbeats struct {
	mu    sync.Mutex
	nodes map[string][]wire.CopyStatus
}

func startHeartbeats(t *testing.T, nc *nats.Conn) *heartbeats {
	h := &heartbeats{nodes: map[string][]wire.CopyStatus{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		tick := time.NewTicker(testHBPeriod)
		defer tick.Stop()
		for {
			h.mu.Lock()
			for node, copies := range h.nodes {
				data, _ := json.Marshal(wire.Heartbeat{Node: node, Incarnation: 1, Copies: copies, AtMS: time.Now().UnixMilli()})
				if err := nc.Publish(wire.HeartbeatSubject(node), data); err != nil {
					t.Errorf("publish heartbeat of %s: %v", node, err)
				}
			}
			h.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return h
}

// run makes node publish copies (an empty list: running, nothing published).
func (h *heartbeats) run(node string, copies ...wire.CopyStatus) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if copies == nil {
		copies = []wire.CopyStatus{}
	}
	h.nodes[node] = copies
}

// startService runs a Service until the test ends.
func startService(t *testing.T, ns *natsserver.Server, refresh time.Duration) *Service {
	t.Helper()
	nc := connect(t, ns, "brook-attention")
	svc := New(nc, Options{
		Judge:          judge.Config{TTL: testTTL, LagWindow: 10 * time.Second},
		Refresh:        refresh,
		RequestTimeout: time.Second,
		Logger:         testLogger(t),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return svc
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last state: %s", what, within, state)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// requestList asks brook.attention.list as an operator would.
func requestList(nc *nats.Conn) (wire.AttentionListReply, *wire.Error, error) {
	msg, err := nc.Request(wire.AttentionList, nil, 2*time.Second)
	if err != nil {
		return wire.AttentionListReply{}, nil, err
	}
	var er wire.ErrorReply
	if json.Unmarshal(msg.Data, &er) == nil && er.Error != nil {
		if got := msg.Header.Get("Brook-Error"); got != er.Error.Code {
			return wire.AttentionListReply{}, nil, fmt.Errorf("Brook-Error header %q, body code %q", got, er.Error.Code)
		}
		return wire.AttentionListReply{}, er.Error, nil
	}
	var r wire.AttentionListReply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		return r, nil, fmt.Errorf("decode list: %w", err)
	}
	return r, nil, nil
}

func entryKinds(es []wire.AttentionEntry) []string {
	out := []string{}
	for _, e := range es {
		out = append(out, e.Kind+"/"+e.Stream+"/"+e.Node)
	}
	return out
}

func hasKind(es []wire.AttentionEntry, kind, stream string) (wire.AttentionEntry, bool) {
	for _, e := range es {
		if e.Kind == kind && e.Stream == stream {
			return e, true
		}
	}
	return wire.AttentionEntry{}, false
}
