package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/brook-streams/brook/e2e/internal/workload"
	"github.com/brook-streams/brook/pkg/client"
	"github.com/brook-streams/brook/pkg/policy"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/tools/auth"
	"github.com/brook-streams/brook/tools/cluster"
)

// Timing of every suite's cluster. Detection stays well above the
// heartbeat interval so that a busy 2-core machine (other packages' tests
// run beside this one) does not expire a healthy host.
const (
	heartbeat      = 200 * time.Millisecond
	ttl            = 1500 * time.Millisecond
	confirmTimeout = 2 * time.Second
	// requestTimeout is above the hosts' confirm timeout, so a publish
	// that is confirmed late is not retried (and written twice).
	requestTimeout = confirmTimeout + time.Second
	// waitLong bounds one wait for the cluster to reach a state.
	waitLong = 45 * time.Second
)

// opts are a suite's additions to the default cluster.
type opts struct {
	attention bool
	coordArgs []string
	hostArgs  []string
	// timeout bounds the whole test (default 3 minutes).
	timeout time.Duration
	// tls runs the cluster with TLS (cluster.Config.TLS).
	tls bool
	// natsServers is cluster.Config.NATSServers (0: the default, 3 servers).
	natsServers int
}

// env is one suite's cluster and clients.
type env struct {
	t     *testing.T
	ctx   context.Context
	c     *cluster.Cluster
	cl    *client.Client // publishers and readers: retries across failovers
	began time.Time
}

// tlogHandler sends the harness's own log lines to the test log.
type tlogHandler struct {
	t     *testing.T
	attrs []slog.Attr
}

func (h tlogHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h tlogHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString("harness: " + r.Message)
	for _, a := range h.attrs {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
	}
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	h.t.Log(b.String())
	return nil
}
func (h tlogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return tlogHandler{t: h.t, attrs: append(slices.Clone(h.attrs), as...)}
}
func (h tlogHandler) WithGroup(string) slog.Handler { return h }

// newEnv starts a fresh cluster for t: three coordinators, four stream
// hosts, the attention service if asked; it waits for a leader and four
// live hosts. On failure the process logs and the streams' state are
// printed; everything is stopped when the test ends.
func newEnv(t *testing.T, o opts) *env {
	t.Helper()
	if testing.Short() {
		t.Skip("process suites are skipped in -short mode")
	}
	if built.err != nil {
		t.Fatalf("the service binaries did not build:\n%v", built.err)
	}
	if o.timeout == 0 {
		o.timeout = 3 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	t.Cleanup(cancel)
	cfg := cluster.Config{
		Bins:        built.bins,
		Dir:         t.TempDir(),
		Attention:   o.attention,
		TLS:         o.tls,
		NATSServers: o.natsServers,
		CoordArgs:   append([]string{"--ttl", ttl.String()}, o.coordArgs...),
		HostArgs: append([]string{"--heartbeat-interval", heartbeat.String(),
			"--confirm-timeout", confirmTimeout.String()}, o.hostArgs...),
		AttentionArgs: []string{"--ttl", ttl.String(), "--refresh", "250ms", "--lag-window", "30s"},
		StopGrace:     3 * time.Second,
		Logger:        slog.New(slog.DiscardHandler),
	}
	if testing.Verbose() {
		cfg.Logger = slog.New(tlogHandler{t: t})
	}
	c, err := cluster.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	e := &env{t: t, ctx: ctx, c: c, began: time.Now()}
	t.Cleanup(func() {
		if t.Failed() {
			e.dumpState()
			t.Logf("process logs (last lines of each):\n%s", c.LogTails(80))
			t.Logf("full process logs were in %s (removed with the test's temp dir)", cfg.Dir)
		}
		if err := c.Stop(); err != nil {
			t.Logf("stop cluster: %v", err)
		}
		t.Logf("suite wall time %v", time.Since(e.began).Round(100*time.Millisecond))
	})
	e.cl, err = client.Connect(ctx, c.NATSURL(), append(c.ClientOptions(auth.Admin), client.WithName("brook-e2e"),
		client.WithRequestTimeout(requestTimeout), client.WithRetry(0, 20*time.Second),
		client.WithLogger(slog.New(slog.DiscardHandler)))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.cl.Close() })
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitNodesLive(ctx, c.Hosts()); err != nil {
		t.Fatal(err)
	}
	return e
}

// dumpState logs every stream's info and the cluster info, for a failure.
func (e *env) dumpState() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if list, err := e.c.Client().ListStreams(ctx); err == nil {
		for _, s := range list.Streams {
			e.t.Logf("stream state at failure: %s", jsonString(s))
		}
	} else {
		e.t.Logf("stream list at failure: %v", err)
	}
	if ci, err := e.c.Client().ClusterInfo(ctx); err == nil {
		e.t.Logf("cluster info at failure: %s", jsonString(ci))
	}
}

func jsonString(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// logf logs with the time since the suite began, to read timings off a run.
func (e *env) logf(format string, args ...any) {
	e.t.Helper()
	e.t.Logf("[%6.2fs] %s", time.Since(e.began).Seconds(), fmt.Sprintf(format, args...))
}

// poll calls cond every 50ms until it returns true, returns an error (the
// test fails at once), or timeout passes (the test fails with the last
// state cond described).
func (e *env) poll(what string, timeout time.Duration, cond func(ctx context.Context) (bool, string, error)) {
	e.t.Helper()
	if err := e.pollErr(what, timeout, cond); err != nil {
		e.t.Fatal(err)
	}
}

// pollErr is poll returning the failure instead of failing the test.
func (e *env) pollErr(what string, timeout time.Duration, cond func(ctx context.Context) (bool, string, error)) error {
	ctx, cancel := context.WithTimeout(e.ctx, timeout)
	defer cancel()
	last := ""
	for {
		ok, state, err := cond(ctx)
		if state != "" {
			last = state
		}
		if err != nil {
			return fmt.Errorf("wait for %s: %w (state: %s)", what, err, last)
		}
		if ok {
			return nil
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("wait for %s: timed out after %v; last state: %s", what, timeout, last)
		case <-t.C:
		}
	}
}

// info returns stream.info, failing the test if no coordinator answers
// within a few seconds.
func (e *env) info(stream string) wire.StreamInfo {
	e.t.Helper()
	var info wire.StreamInfo
	e.poll("stream.info "+stream, 15*time.Second, func(ctx context.Context) (bool, string, error) {
		i, err := e.c.StreamInfo(ctx, stream)
		if err != nil {
			return false, err.Error(), nil
		}
		info = i
		return true, "", nil
	})
	return info
}

// waitInfo polls stream.info until pred holds; pred may fail the wait at
// once by returning an error (a state that must never be seen).
func (e *env) waitInfo(stream, what string, pred func(wire.StreamInfo) (bool, error)) wire.StreamInfo {
	e.t.Helper()
	var info wire.StreamInfo
	e.poll(what, waitLong, func(ctx context.Context) (bool, string, error) {
		i, err := e.c.StreamInfo(ctx, stream)
		if err != nil {
			return false, "stream.info: " + err.Error(), nil
		}
		info = i
		ok, perr := pred(i)
		return ok, describe(i), perr
	})
	return info
}

// describe is a short view of a stream's state for wait messages.
func describe(i wire.StreamInfo) string {
	var b strings.Builder
	fmt.Fprintf(&b, "status=%s epoch=%d owner=%s followers=%v starts=%v", i.Status, i.Assignment.Epoch,
		i.Assignment.Owner, i.Assignment.Followers, i.Starts)
	if r := i.Recovery; r != nil {
		fmt.Fprintf(&b, " recovery{transition=%d reason=%s", r.Transition, r.Reason)
		if r.Wait != nil {
			fmt.Fprintf(&b, " wait=%s answered=%d/%d unanswered=%v best=%s@%d", r.Wait.Kind, r.Wait.Answered, r.Wait.Needed,
				r.Wait.Unanswered, r.Wait.BestNode, r.Wait.BestTail)
			if r.Wait.Start != nil {
				fmt.Fprintf(&b, " start=%+v", *r.Wait.Start)
			}
		}
		b.WriteString("}")
	}
	for _, ct := range i.CopyTails {
		fmt.Fprintf(&b, " [%s %s e%d rec=%d cur=%d sealed=%v pub=%v]", ct.Node, ct.Role, ct.Epoch, ct.RecordTail, ct.CursorTail, ct.Sealed, ct.Published)
	}
	return b.String()
}

// copyTail returns node's entry in the stream's copy tails.
func copyTail(i wire.StreamInfo, node string) (wire.CopyTails, bool) {
	for _, ct := range i.CopyTails {
		if ct.Node == node {
			return ct, true
		}
	}
	return wire.CopyTails{}, false
}

// createStream creates a stream with copies copies under the cluster's
// default policy (majority_durable) and waits until it serves.
func (e *env) createStream(name string, copies int) wire.StreamInfo {
	e.t.Helper()
	if _, err := e.cl.CreateStream(e.ctx, wire.StreamCreate{Stream: name, Copies: copies}); err != nil {
		e.t.Fatalf("create stream %s: %v", name, err)
	}
	info := e.waitInfo(name, name+" serving", func(i wire.StreamInfo) (bool, error) {
		return i.Status == wire.StatusServing && len(i.Assignment.Copies()) == copies, nil
	})
	if info.Policy != policy.MajorityDurable {
		e.t.Fatalf("stream %s has policy %q, want the default %s", name, info.Policy, policy.MajorityDurable)
	}
	e.logf("stream %s: owner %s followers %v epoch %d, W=%d R=%d", name, info.Assignment.Owner,
		info.Assignment.Followers, info.Assignment.Epoch, info.W, info.R)
	return info
}

// host returns the stream host process of node.
func (e *env) host(node string) *cluster.Proc {
	e.t.Helper()
	p := e.c.HostByNode(node)
	if p == nil {
		e.t.Fatalf("no stream host %q", node)
	}
	return p
}

// hostIndex returns the index of node's host (for CutHost and HealHost).
func (e *env) hostIndex(node string) int {
	e.t.Helper()
	for i := range e.c.Hosts() {
		if e.c.Host(i).Node == node {
			return i
		}
	}
	e.t.Fatalf("no stream host %q", node)
	return -1
}

// signal sends sig to p and logs it.
func (e *env) signal(p *cluster.Proc, sig syscall.Signal) {
	e.t.Helper()
	if err := e.c.Kill(p, sig); err != nil {
		e.t.Fatalf("%v to %s: %v", sig, p.Name, err)
	}
	e.logf("%v -> %s", sig, p.Name)
}

// restart starts p again with its data directory.
func (e *env) restart(p *cluster.Proc) {
	e.t.Helper()
	if err := e.c.Restart(e.ctx, p); err != nil {
		e.t.Fatalf("restart %s: %v", p.Name, err)
	}
	e.logf("restarted %s", p.Name)
}

// leader returns the coordinator that leads Raft now.
func (e *env) leader() *cluster.Proc {
	e.t.Helper()
	var id uint64
	e.poll("a raft leader", waitLong, func(ctx context.Context) (bool, string, error) {
		l, err := e.c.LeaderReplica(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		id = l
		return true, "", nil
	})
	return e.c.CoordinatorByReplica(id)
}

// waitFollower waits until node follows the stream at epoch: in the
// assignment as a follower, and its heartbeat says follower at that epoch,
// not sealed. The epoch must not move meanwhile (no other recovery).
func (e *env) waitFollower(stream, node string, epoch uint64) wire.StreamInfo {
	e.t.Helper()
	return e.waitInfo(stream, node+" following "+stream+" at epoch "+fmt.Sprint(epoch), func(i wire.StreamInfo) (bool, error) {
		if i.Assignment.Epoch != epoch {
			return false, fmt.Errorf("the epoch moved from %d to %d: another ownership change", epoch, i.Assignment.Epoch)
		}
		if !slices.Contains(i.Assignment.Followers, node) {
			return false, nil
		}
		ct, ok := copyTail(i, node)
		return ok && ct.Published && ct.Role == wire.RoleFollower && ct.Epoch == epoch && !ct.Sealed, nil
	})
}

// waitCaughtUp waits until node's published record and cursor event tails
// equal the owner's. Only heartbeats published after the call count, so
// call it once nothing is published any more: then the owner's tails stand
// still and equal tails mean node holds everything.
func (e *env) waitCaughtUp(stream, node string) wire.StreamInfo {
	e.t.Helper()
	since := time.Now().Add(heartbeat / 4)
	fresh := func(ct wire.CopyTails) bool {
		// AgeMS is the heartbeat's age when the coordinator answered,
		// a moment ago on this same machine.
		return ct.Published && time.Now().Add(-time.Duration(ct.AgeMS)*time.Millisecond).After(since)
	}
	return e.waitInfo(stream, node+" caught up with the owner of "+stream, func(i wire.StreamInfo) (bool, error) {
		own, ok1 := copyTail(i, i.Assignment.Owner)
		ct, ok2 := copyTail(i, node)
		if !ok1 || !ok2 || !fresh(own) || !fresh(ct) {
			return false, nil
		}
		return i.Status == wire.StatusServing && ct.Epoch == i.Assignment.Epoch &&
			ct.RecordTail == own.RecordTail && ct.CursorTail == own.CursorTail, nil
	})
}

// waitServingAt waits until the stream serves at epoch with another owner
// than old.
func (e *env) waitServingAt(stream string, epoch uint64, old string) wire.StreamInfo {
	e.t.Helper()
	return e.waitInfo(stream, fmt.Sprintf("%s serving at epoch %d", stream, epoch), func(i wire.StreamInfo) (bool, error) {
		if i.Assignment.Epoch > epoch {
			return false, fmt.Errorf("epoch %d is past the expected %d", i.Assignment.Epoch, epoch)
		}
		return i.Status == wire.StatusServing && i.Assignment.Epoch == epoch && i.Assignment.Owner != old, nil
	})
}

// load starts a load of 4 publishers on the suite's client.
func (e *env) load(stream, name string, led *workload.Ledger) *workload.Load {
	return workload.StartLoad(e.ctx, e.cl, stream, led, workload.LoadConfig{Name: name})
}

// stopLoad stops l and logs the ledger.
func (e *env) stopLoad(l *workload.Load, led *workload.Ledger) {
	e.t.Helper()
	if err := l.Stop(); err != nil {
		e.t.Fatal(err)
	}
	e.logf("load stopped: %v", led.Stats())
}

// waitConfirms waits for n more confirms (counted from now) at minEpoch or
// later.
func (e *env) waitConfirms(led *workload.Ledger, n int, minEpoch uint64) {
	e.t.Helper()
	since := time.Now()
	pred := func(o workload.Outcome) bool {
		return o.Confirmed && o.Confirm.Epoch >= minEpoch && o.Done.After(since)
	}
	ctx, cancel := context.WithTimeout(e.ctx, waitLong)
	defer cancel()
	if err := led.WaitCount(ctx, n, pred); err != nil {
		e.t.Fatalf("%d confirms at epoch >= %d: %v; ledger: %v", n, minEpoch, err, led.Stats())
	}
}

// verify reads the whole stream with r and checks it against the ledger:
// no confirmed record lost, each at its confirmed offset, nothing delivered
// twice at different offsets.
func (e *env) verify(stream string, led *workload.Ledger, r *workload.Reader, cfg workload.CheckConfig) workload.Report {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, waitLong)
	defer cancel()
	if err := r.ReadAll(ctx, led); err != nil {
		e.t.Fatalf("read %s back: %v; ledger: %v", stream, err, led.Stats())
	}
	if cfg.MinCopies == nil {
		// Every confirm counted at least W copies of its assignment; a
		// stream of 2 or 3 copies under majority_durable has W=2.
		cfg.MinCopies = func(uint64) int { return 2 }
	}
	rep, err := workload.Check(led.Outcomes(), r.Delivered(), cfg)
	if err != nil {
		e.t.Fatalf("%s does not hold what was confirmed:\n%v\nledger: %v", stream, err, led.Stats())
	}
	if rep.Confirmed == 0 {
		e.t.Fatalf("%s: nothing was confirmed, so nothing was checked; ledger: %v", stream, led.Stats())
	}
	e.logf("verified %s: %v", stream, rep)
	return rep
}

// attention returns the attention list (the attention service's own view).
func (e *env) attention(ctx context.Context) (wire.AttentionListReply, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return e.c.Client().AttentionList(ctx)
}

// findEntry returns the first attention entry of kind about stream.
func findEntry(l wire.AttentionListReply, kind, stream string) (wire.AttentionEntry, bool) {
	for _, en := range l.Entries {
		if en.Kind == kind && en.Stream == stream {
			return en, true
		}
	}
	return wire.AttentionEntry{}, false
}

// figure returns an entry's numeric figure (JSON numbers decode as float64).
func figure(en wire.AttentionEntry, name string) (uint64, bool) {
	switch v := en.Figures[name].(type) {
	case float64:
		return uint64(v), true
	case json.Number:
		n, err := v.Int64()
		return uint64(n), err == nil
	}
	return 0, false
}

// entryKinds lists the kinds in an attention list, for messages.
func entryKinds(l wire.AttentionListReply) string {
	var ks []string
	for _, en := range l.Entries {
		ks = append(ks, en.Kind+"("+en.Stream+en.Node+")")
	}
	return strings.Join(ks, ", ")
}

// isConfirmTimeout reports whether err is a confirm_timeout reply.
func isConfirmTimeout(err error) bool { return client.IsConfirmTimeout(err) }

// wireError returns err's *wire.Error, or nil.
func wireError(err error) *wire.Error {
	var we *wire.Error
	if errors.As(err, &we) {
		return we
	}
	return nil
}

// envDuration reads a duration from the environment, or def.
func envDuration(name string, def time.Duration) (time.Duration, error) {
	s := os.Getenv(name)
	if s == "" {
		return def, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: %w", name, s, err)
	}
	return d, nil
}

// errUnexpectedMove explains a stream that moved when it must not have.
func errUnexpectedMove(i wire.StreamInfo, epoch uint64) error {
	return fmt.Errorf("the stream moved although its owner lives: want epoch %d and no recovery, have %s", epoch, describe(i))
}

// checkCopyContent reads node's own copy of stream and compares it, offset
// by offset, with what a reader was handed by the owner (ref). No seal is
// involved: every other copy is killed and recovery.accept-loss moves the
// stream onto node, which must hold ref's records exactly (it caught up
// before). The stream is left on node alone.
func (e *env) checkCopyContent(stream, node string, ref workload.Delivered) {
	e.t.Helper()
	var end uint64
	for off := range ref.Data {
		end = max(end, off+1)
	}
	info := e.info(stream)
	if !info.Assignment.Includes(node) {
		e.t.Fatalf("%s holds no copy of %s: %+v", node, stream, info.Assignment)
	}
	for _, n := range info.Assignment.Copies() {
		if n != node {
			e.signal(e.host(n), syscall.SIGKILL)
		}
	}
	e.waitInfo(stream, stream+" recovering after losing every copy but "+node, func(i wire.StreamInfo) (bool, error) {
		return i.Recovery != nil, nil
	})
	e.poll("accept-loss of "+stream+" onto "+node, waitLong, func(ctx context.Context) (bool, string, error) {
		// The coordinator judges liveness from heartbeats; retry until
		// it sees node live (it is).
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err := e.c.Client().AcceptLoss(cctx, stream, node)
		if err != nil {
			return false, err.Error(), nil
		}
		return true, "", nil
	})
	moved := e.waitServingAt(stream, info.Assignment.Epoch+1, "")
	if moved.Assignment.Owner != node {
		e.t.Fatalf("accept-loss onto %s moved %s to %s", node, stream, moved.Assignment.Owner)
	}
	if moved.AcceptedLoss != nil {
		e.t.Fatalf("%s had caught up, yet the accepted loss is below the confirmed prefix: %+v", node, *moved.AcceptedLoss)
	}
	e.logf("accept-loss moved %s onto %s at epoch %d", stream, node, moved.Assignment.Epoch)
	rd := workload.NewReader(e.cl, stream, "copy-of-"+node)
	ctx, cancel := context.WithTimeout(e.ctx, waitLong)
	defer cancel()
	if err := rd.ReadTo(ctx, end); err != nil {
		e.t.Fatalf("read %s's own copy of %s up to %d: %v", node, stream, end, err)
	}
	got := rd.Delivered()
	bad := 0
	for off := range end {
		want, ok := ref.Data[off]
		if !ok {
			continue
		}
		if string(got.Data[off]) != string(want) {
			bad++
			if bad <= 10 {
				e.t.Errorf("%s's copy holds %.40q at offset %d, the owner delivered %.40q", node, got.Data[off], off, want)
			}
		}
	}
	if bad > 0 {
		e.t.Fatalf("%s's copy differs from the owner's at %d offsets", node, bad)
	}
	if len(got.Problems) > 0 {
		e.t.Fatalf("reading %s's copy: %v", node, got.Problems)
	}
	e.logf("%s's own copy matches the owner's %d records", node, end)
}

// confirmGap returns how long after at the first publish begun after at
// was confirmed (false if none was), and the first confirm of any publish
// after at (begun before it too).
func confirmGap(led *workload.Ledger, at time.Time) (gapNew, gapAny time.Duration, ok bool) {
	var first, any time.Time
	for _, o := range led.Outcomes() {
		if !o.Confirmed || o.Done.Before(at) {
			continue
		}
		if any.IsZero() || o.Done.Before(any) {
			any = o.Done
		}
		if !o.Sent.Before(at) && (first.IsZero() || o.Done.Before(first)) {
			first = o.Done
		}
	}
	return first.Sub(at), any.Sub(at), !first.IsZero()
}
