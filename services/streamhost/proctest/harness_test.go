package proctest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/heartbeat"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/streamhost/internal/assigntest"
)

// hostBin is the brook-streamhost binary built once for the package.
var hostBin string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "brook-streamhost-proctest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "temp dir:", err)
		return 1
	}
	defer func() {
		if err := os.RemoveAll(dir); err != nil {
			fmt.Fprintln(os.Stderr, "remove temp dir:", err)
		}
	}()
	hostBin = filepath.Join(dir, "brook-streamhost")
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = "/usr/local/go/bin/go"
	}
	args := []string{"build", "-o", hostBin}
	if os.Getenv("BROOK_RACE") != "" {
		// Hosts built with the race detector: slower, but the process
		// tests then also check the host for data races.
		args = append(args, "-race")
	}
	cmd := exec.Command(goBin, append(args, "github.com/brook-streams/brook/services/streamhost/cmd/brook-streamhost")...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build brook-streamhost:", err)
		return 1
	}
	return m.Run()
}

// cluster is an embedded nats-server, the host processes, and the test
// itself standing in for the coordinators: it answers assignment pulls
// from a static assignment it controls, publishes notices, and records
// heartbeats and node.leave requests.
type cluster struct {
	t   testing.TB
	ns  *server.Server
	url string
	nc  *nats.Conn
	dir string

	table *assigntest.Table // its own lock

	mu      sync.Mutex
	hbs     map[string]wire.Heartbeat
	parts   *heartbeat.Assembler
	reports map[string]*heartbeat.Copies
	leaves  []string
	changed chan struct{} // closed and replaced on every heartbeat or leave
	hosts   map[string]*proc
	// started is when each node's current process was started (unix
	// nanoseconds); heartbeats of an earlier incarnation are ignored.
	started map[string]uint64
}

func newCluster(t testing.TB) *cluster {
	t.Helper()
	ns, err := server.NewServer(&server.Options{
		Host:       "127.0.0.1",
		Port:       -1,
		NoLog:      true,
		NoSigs:     true,
		MaxPayload: 8 << 20,
	})
	if err != nil {
		t.Fatalf("nats server: %v", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(ns.Shutdown)
	c := &cluster{
		t:       t,
		ns:      ns,
		url:     ns.ClientURL(),
		dir:     t.TempDir(),
		table:   assigntest.NewTable(),
		hbs:     map[string]wire.Heartbeat{},
		parts:   heartbeat.NewAssembler(),
		reports: map[string]*heartbeat.Copies{},
		changed: make(chan struct{}),
		hosts:   map[string]*proc{},
		started: map[string]uint64{},
	}
	c.nc, err = nats.Connect(c.url, nats.Name("proctest"))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(c.nc.Close)
	c.sub(wire.AssignPull, c.table.ServePull)
	c.sub(wire.HeartbeatWildcard, c.onHeartbeat)
	c.sub(wire.HostLeaveWildcard, c.onLeave)
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *cluster) sub(subj string, cb nats.MsgHandler) {
	if _, err := c.nc.Subscribe(subj, cb); err != nil {
		c.t.Fatalf("subscribe %s: %v", subj, err)
	}
}

func (c *cluster) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *cluster) onHeartbeat(m *nats.Msg) {
	var hb wire.Heartbeat
	if err := json.Unmarshal(m.Data, &hb); err != nil {
		return
	}
	c.mu.Lock()
	if hb.Incarnation < c.started[hb.Node] {
		c.mu.Unlock()
		return // a late heartbeat of a killed process
	}
	// c.hbs holds the latest heartbeat with the copies the host's
	// reports add up to (its last full report and the deltas since).
	r := c.reports[hb.Node]
	if r == nil {
		r = &heartbeat.Copies{}
		c.reports[hb.Node] = r
	}
	if prev, ok := c.hbs[hb.Node]; ok && prev.Incarnation != hb.Incarnation {
		r.Reset(hb.Incarnation) // a new process: nothing known of its copies
	}
	if whole, ok := c.parts.Add(hb); ok && r.Apply(whole) {
		hb = whole
	}
	hb.Copies, hb.Delta, hb.Since = r.List(), false, 0
	c.hbs[hb.Node] = hb
	c.notifyLocked()
	c.mu.Unlock()
}

func (c *cluster) onLeave(m *nats.Msg) {
	var req wire.NodeRef
	_ = json.Unmarshal(m.Data, &req)
	c.mu.Lock()
	c.leaves = append(c.leaves, req.Node)
	v := c.table.Bump()
	c.notifyLocked()
	c.mu.Unlock()
	data, _ := json.Marshal(wire.OK{OK: true, Version: v})
	_ = m.Respond(data)
}

// assign sets the assignments of the given streams (replacing earlier ones
// of the same streams), bumps the version and notifies every host.
func (c *cluster) assign(as ...wire.AssignedStream) {
	v := c.table.Set(as...)
	c.mu.Lock()
	nodes := make([]string, 0, len(c.hosts))
	for n := range c.hosts {
		nodes = append(nodes, n)
	}
	c.mu.Unlock()
	assigntest.Notify(c.nc, v, nodes)
}

// proc is one brook-streamhost process.
type proc struct {
	node    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error
}

// hostArgs are the flags every test host gets, beside node and data dir.
var hostArgs = []string{"--heartbeat-interval", "100ms", "--log-level", "debug", "--max-payload", "65536"}

// start starts (or restarts, on the same data dir) the host node.
func (c *cluster) start(node string, extra ...string) *proc {
	c.t.Helper()
	dataDir := filepath.Join(c.dir, node)
	args := append([]string{"--node", node, "--data-dir", dataDir, "--nats-url", c.url}, hostArgs...)
	args = append(args, extra...)
	logPath := filepath.Join(c.dir, fmt.Sprintf("%s-%d.log", node, time.Now().UnixNano()))
	logf, err := os.Create(logPath)
	if err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.started[node] = uint64(time.Now().UnixNano())
	delete(c.hbs, node)
	c.mu.Unlock()
	cmd := exec.Command(hostBin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "OTEL_EXPORTER_OTLP_ENDPOINT=", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=")
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start %s: %v", node, err)
	}
	p := &proc{node: node, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		// Cleanup waits for done, so the test is still running here.
		if err := logf.Close(); err != nil {
			c.t.Errorf("close the log of %s: %v", node, err)
		}
		close(p.done)
	}()
	c.mu.Lock()
	c.hosts[node] = p
	c.mu.Unlock()
	c.t.Cleanup(func() {
		p.kill()
		if strings.Contains(p.log(), "WARNING: DATA RACE") {
			c.t.Errorf("%s reported a data race (see %s)", node, logPath)
		}
		if c.t.Failed() {
			c.dumpLog(p)
		}
	})
	return p
}

func (c *cluster) dumpLog(p *proc) {
	data, _ := os.ReadFile(p.logPath)
	lines := strings.Split(string(data), "\n")
	if len(lines) > 60 {
		lines = lines[len(lines)-60:]
	}
	c.t.Logf("--- last log lines of %s (%s) ---\n%s", p.node, p.logPath, strings.Join(lines, "\n"))
}

// kill SIGKILLs the process and waits for it.
func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// term SIGTERMs the process and waits for it to exit, at most timeout.
func (p *proc) term(timeout time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		p.kill()
		return fmt.Errorf("%s did not exit within %v of SIGTERM", p.node, timeout)
	}
}

func (p *proc) log() string {
	data, _ := os.ReadFile(p.logPath)
	return string(data)
}

// waitFor waits until cond holds, re-checking on every heartbeat, at most
// timeout. It fails the test with what when the time runs out.
func (c *cluster) waitFor(timeout time.Duration, what string, cond func() bool) {
	c.t.Helper()
	c.waitForf(timeout, func() string { return what }, cond)
}

// waitForf is waitFor with a description made when the time runs out.
func (c *cluster) waitForf(timeout time.Duration, what func() string, cond func() bool) {
	c.t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		ch := c.changed
		c.mu.Unlock()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			c.t.Fatalf("timed out after %v waiting for %s", timeout, what())
		}
	}
}

// copyStatus returns node's latest heartbeat entry for stream.
func (c *cluster) copyStatus(node, stream string) (wire.CopyStatus, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cs := range c.hbs[node].Copies {
		if cs.Stream == stream {
			return cs, true
		}
	}
	return wire.CopyStatus{}, false
}

// waitCopy waits until node's heartbeat shows stream in a state pred
// accepts.
func (c *cluster) waitCopy(node, stream, what string, pred func(wire.CopyStatus) bool) wire.CopyStatus {
	c.t.Helper()
	var last wire.CopyStatus
	describe := func() string { return fmt.Sprintf("%s's copy of %s: %s (last %+v)", node, stream, what, last) }
	c.waitForf(15*time.Second, describe, func() bool {
		cs, ok := c.copyStatus(node, stream)
		last = cs
		return ok && pred(cs)
	})
	return last
}

func (c *cluster) heartbeat(node string) wire.Heartbeat {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hbs[node]
}

// pubResult is the outcome of one publish.
type pubResult struct {
	ok  *wire.PublishConfirm
	err *wire.Error
	// nats is a transport error (no responders, timeout).
	nats error
}

func (r pubResult) String() string {
	switch {
	case r.ok != nil:
		return fmt.Sprintf("confirm %+v", *r.ok)
	case r.err != nil:
		return "error " + r.err.Error()
	default:
		return fmt.Sprintf("nats error %v", r.nats)
	}
}

// publish sends one record and waits for the host's answer.
func (c *cluster) publish(stream string, data []byte, hdr map[string]string) pubResult {
	m := nats.NewMsg(wire.PublishSubject(stream))
	m.Data = data
	for k, v := range hdr {
		m.Header.Set(k, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		return pubResult{nats: err}
	}
	if e := errorOf(resp); e != nil {
		return pubResult{err: e}
	}
	var pc wire.PublishConfirm
	if err := json.Unmarshal(resp.Data, &pc); err != nil {
		return pubResult{nats: fmt.Errorf("decode confirm %q: %w", resp.Data, err)}
	}
	return pubResult{ok: &pc}
}

// mustPublish publishes and fails the test unless it is confirmed.
func (c *cluster) mustPublish(stream string, data []byte) wire.PublishConfirm {
	c.t.Helper()
	r := c.publish(stream, data, nil)
	if r.ok == nil {
		c.t.Fatalf("publish to %s: %v", stream, r)
	}
	return *r.ok
}

// errorOf decodes an error reply (Brook-Error header or an "error" member).
func errorOf(m *nats.Msg) *wire.Error {
	code := m.Header.Get(frame.HeaderError)
	var er wire.ErrorReply
	if json.Unmarshal(m.Data, &er) == nil && er.Error != nil {
		return er.Error
	}
	if code != "" {
		return &wire.Error{Code: code, Message: string(m.Data)}
	}
	return nil
}

// fetch sends a fetch request.
func (c *cluster) fetch(stream string, req wire.FetchRequest) (*frame.Batch, error) {
	body, _ := json.Marshal(req)
	resp, err := c.nc.Request(wire.FetchSubject(stream), body, time.Duration(req.WaitMS)*time.Millisecond+5*time.Second)
	if err != nil {
		return nil, err
	}
	if e := errorOf(resp); e != nil {
		return nil, e
	}
	return frame.DecodeBatch(resp.Data)
}

// request sends a JSON request and decodes a JSON reply into out.
func (c *cluster) request(subj string, in, out any) error {
	body, _ := json.Marshal(in)
	resp, err := c.nc.Request(subj, body, 5*time.Second)
	if err != nil {
		return err
	}
	if e := errorOf(resp); e != nil {
		return e
	}
	return json.Unmarshal(resp.Data, out)
}

func (c *cluster) seal(node, stream string, id, fence, transition uint64) (wire.SealReply, error) {
	var r wire.SealReply
	err := c.request(wire.SealSubject(node), wire.SealRequest{Stream: stream, StreamID: id, FenceEpoch: fence, Transition: transition}, &r)
	return r, err
}

func (c *cluster) mustSeal(node, stream string, id, fence, transition uint64) wire.SealReply {
	c.t.Helper()
	r, err := c.seal(node, stream, id, fence, transition)
	if err != nil {
		c.t.Fatalf("seal %s on %s at %d: %v", stream, node, fence, err)
	}
	return r
}

func (c *cluster) commit(stream, cursor string, off uint64) (wire.CursorCommitReply, error) {
	var r wire.CursorCommitReply
	err := c.request(wire.CommitSubject(stream), wire.CursorCommit{Cursor: cursor, Offset: off}, &r)
	return r, err
}

// asg builds an AssignedStream.
func asg(stream string, id, epoch uint64, owner string, followers []string, pol string, starts ...wire.HistoryStart) wire.AssignedStream {
	if starts == nil {
		starts = []wire.HistoryStart{}
	}
	return wire.AssignedStream{
		Assignment: wire.Assignment{Stream: stream, StreamID: id, Epoch: epoch, Owner: owner, Followers: followers, Policy: pol},
		Starts:     starts,
	}
}

// codeOf returns the wire error code of err, or "" when it is not one.
func codeOf(err error) string {
	var we *wire.Error
	if errors.As(err, &we) {
		return we.Code
	}
	return ""
}

func rec(i int) []byte { return []byte("record-" + strconv.Itoa(i)) }

func checkRecords(t *testing.T, b *frame.Batch, from uint64, n int) {
	t.Helper()
	if len(b.Records) != n {
		t.Fatalf("batch holds %d records, want %d (batch head %d tail %d confirmed %d)", len(b.Records), n, b.Head, b.Tail, b.Confirmed)
	}
	for i, r := range b.Records {
		if r.Offset != from+uint64(i) {
			t.Fatalf("record %d at offset %d, want %d", i, r.Offset, from+uint64(i))
		}
		if want := rec(int(r.Offset)); !bytes.Equal(r.Data, want) {
			t.Fatalf("record at %d = %q, want %q", r.Offset, r.Data, want)
		}
	}
}
