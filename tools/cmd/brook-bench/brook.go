package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/brook-streams/brook/pkg/client"
	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/policy"
	"github.com/brook-streams/brook/pkg/wire"
	authpkg "github.com/brook-streams/brook/tools/auth"
	"github.com/brook-streams/brook/tools/cluster"
	"github.com/brook-streams/brook/tools/cmd/brook-demo/brookload"
)

// The durable stream of the bench: three copies on majority_durable, the
// case of the specification's cluster test.
const (
	benchCopies = 3
	benchPolicy = policy.MajorityDurable
)

// startBrook starts a local process cluster (or connects to the one at
// --nats-url), creates the bench's stream and returns the target with its
// closer, which stops whatever it started.
func startBrook(ctx context.Context, o options, log *slog.Logger) (_ *brookTarget, _ func(), err error) {
	if o.stream != "durable" {
		return nil, nil, fmt.Errorf("brook target: unknown --stream %q (want durable)", o.stream)
	}
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	defer func() {
		if err != nil {
			closeAll()
		}
	}()

	t := &brookTarget{log: log, stream: "bench"}
	url := o.natsURL
	var auth []client.Option // the admin credentials: the local cluster's, or --nats-nkey
	if url == "" {
		cl, err := startLocalCluster(ctx, o, log)
		if err != nil {
			return nil, nil, err
		}
		closers = append(closers, func() { _ = cl.Stop() })
		url, t.nodes = cl.NATSURL(), brookload.LocalNodes{C: cl}
		auth = cl.ClientOptions(authpkg.Admin)
	} else {
		// An existing cluster may hold an earlier run's stream: this run
		// gets its own, deleted again at the end.
		t.stream = fmt.Sprintf("bench-%d", time.Now().Unix())
		t.deleteAtEnd = true
		if o.natsNkey != "" {
			auth = []client.Option{client.WithNkeySeedFile(o.natsNkey), client.WithInboxPrefix(wire.InboxAdmin)}
		}
		if o.compose {
			t.nodes = &brookload.ComposeNodes{}
		}
	}

	opts := append(brookload.ClientOptions(brookload.DefaultAttemptTimeout),
		client.WithName("brook-bench"), client.WithLogger(log), client.WithBatching(o.linger, o.batchRecords, o.batchBytes))
	opts = append(opts, auth...)
	opts = append(opts, client.WithDirectLink(!o.busPublish))
	if t.c, err = client.Connect(ctx, url, opts...); err != nil {
		return nil, nil, fmt.Errorf("brook target: %w", err)
	}
	closers = append(closers, func() { _ = t.c.Close() })
	t.info = brookload.StreamInfoOf(t.c, t.stream)

	if _, err := t.c.CreateStream(ctx, wire.StreamCreate{Stream: t.stream, Copies: benchCopies, Policy: benchPolicy}); err != nil {
		return nil, nil, fmt.Errorf("brook target: create stream %s: %w", t.stream, err)
	}
	if t.deleteAtEnd {
		closers = append(closers, func() {
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := t.c.DeleteStream(dctx, t.stream); err != nil {
				log.Warn("delete the bench stream", "stream", t.stream, "err", err)
			}
		})
	}
	info, err := waitServing(ctx, t.info)
	if err != nil {
		return nil, nil, fmt.Errorf("brook target: %w", err)
	}
	log.Info("stream serving", "stream", t.stream, "owner", info.Assignment.Owner,
		"followers", info.Assignment.Followers, "epoch", info.Assignment.Epoch, "w", info.W, "r", info.R)

	if t.pub, err = brookload.NewPublisher(ctx, t.c, brookload.PublisherConfig{
		Stream: t.stream, Producer: "bench-" + runTag(), Logger: log,
	}); err != nil {
		return nil, nil, fmt.Errorf("brook target: %w", err)
	}
	closers = append(closers, t.pub.Close)
	return t, closeAll, nil
}

// startLocalCluster builds the services and starts three coordinators,
// four stream hosts and attention under the work directory.
func startLocalCluster(ctx context.Context, o options, log *slog.Logger) (*cluster.Cluster, error) {
	root, err := cluster.RepoRoot(ctx)
	if err != nil {
		return nil, fmt.Errorf("brook target: %w", err)
	}
	log.Info("building the services", "repo", root)
	bins, err := cluster.Build(ctx, root, filepath.Join(o.workDir, "bin"))
	if bins.Coordinator == "" || bins.StreamHost == "" {
		return nil, fmt.Errorf("brook target: %w", err)
	}
	if err != nil {
		log.Warn("some services did not build; going on without them", "err", err)
	}
	natsBin := ""
	if o.natsProcesses {
		if natsBin = o.natsBin; natsBin == "" {
			if natsBin, err = cluster.BuildNATSServer(ctx, root, filepath.Join(o.workDir, "bin")); err != nil {
				return nil, fmt.Errorf("brook target: %w", err)
			}
		}
	}
	dir := filepath.Join(o.workDir, "cluster")
	cl, err := cluster.Start(ctx, cluster.Config{Bins: bins, Dir: dir, Attention: bins.Attention != "", Logger: log,
		CoordArgs: strings.Fields(o.coordArgs), HostArgs: strings.Fields(o.hostArgs),
		DirectHosts: !o.hostProxies, BusReplication: o.busReplication, NATSBin: natsBin})
	if err != nil {
		return nil, fmt.Errorf("brook target: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := cl.WaitLeader(wctx); err != nil {
		_ = cl.Stop()
		return nil, fmt.Errorf("brook target: %w", err)
	}
	if err := cl.WaitNodesLive(wctx, cl.Hosts()); err != nil {
		_ = cl.Stop()
		return nil, fmt.Errorf("brook target: %w", err)
	}
	log.Info("local cluster up", "nats", cl.NATSURL(), "logs", filepath.Join(dir, "logs"))
	return cl, nil
}

// waitServing polls until the stream serves.
func waitServing(ctx context.Context, info brookload.InfoFunc) (wire.StreamInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		i, err := info(ctx)
		if err == nil && i.Status == wire.StatusServing && i.Assignment.Owner != "" {
			return i, nil
		}
		select {
		case <-ctx.Done():
			return i, fmt.Errorf("wait for the stream to serve: %w (last: %v, status %q)", ctx.Err(), err, i.Status)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// runTag tells this run's producers from any earlier run's.
func runTag() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// brookTarget is bench.Target over a brook cluster.
type brookTarget struct {
	log         *slog.Logger
	c           *client.Client
	pub         *brookload.Publisher
	stream      string
	deleteAtEnd bool
	nodes       brookload.Nodes // nil: cannot kill (an existing cluster without --compose)
	info        brookload.InfoFunc
	readers     atomic.Int32

	mu     sync.Mutex
	victim string
	before wire.StreamInfo // at the kill
}

// Name implements bench.Target.
func (t *brookTarget) Name() string { return "brook" }

// Publish implements bench.Target: the record's id (publisher loop and
// sequence) is its producer id and sequence, so a retry is not written
// twice, and the publisher resolves attempts a failover left unanswered.
func (t *brookTarget) Publish(ctx context.Context, data []byte) (uint64, error) {
	id, ok := brookload.Decode(data)
	if !ok {
		return 0, fmt.Errorf("brook target: record of %d bytes names no publisher and sequence", len(data))
	}
	c, err := t.pub.Publish(ctx, id, data)
	if err != nil {
		return 0, err
	}
	return c.Offset, nil
}

// Kill implements bench.Target: SIGKILL the stream's owner now.
func (t *brookTarget) Kill(ctx context.Context) (string, error) {
	if t.nodes == nil {
		return "", errors.New("brook target: an existing cluster's owner can be killed only with --compose")
	}
	info, err := t.info(ctx)
	if err != nil {
		return "", fmt.Errorf("brook target: find the owner: %w", err)
	}
	owner := info.Assignment.Owner
	what, err := t.nodes.Kill(ctx, owner)
	if err != nil {
		return owner, err
	}
	t.mu.Lock()
	t.victim, t.before = owner, info
	t.mu.Unlock()
	t.log.Info("killed the owner", "node", owner, "what", what, "epoch", info.Assignment.Epoch)
	return owner, nil
}

// Follow implements bench.Target with a durable cursor of its own.
func (t *brookTarget) Follow(ctx context.Context, fn func(uint64, []byte)) error {
	cursor := fmt.Sprintf("bench-follow-%d", t.readers.Add(1))
	return brookload.Follow(ctx, t.c, t.stream, cursor, func(r frame.Record) { fn(r.Offset, r.Data) })
}

// ReadAll implements bench.Target with explicit-offset fetches.
func (t *brookTarget) ReadAll(ctx context.Context, fn func(uint64, []byte)) error {
	return brookload.ReadAll(ctx, t.c, t.stream, func(r frame.Record) { fn(r.Offset, r.Data) })
}

// After implements bench.Target: the failover's trace id, whether the old
// owner, restarted, rejoins as a follower without another recovery, and
// the final assignment.
func (t *brookTarget) After(ctx context.Context) map[string]any {
	out := map[string]any{}
	st := t.pub.Stats()
	out["publishes_unanswered"] = st.Unanswered
	out["publishes_resolved_by_read_back"] = st.Resolved
	t.mu.Lock()
	victim, before := t.victim, t.before
	t.mu.Unlock()
	defer func() {
		if info, err := t.info(ctx); err == nil {
			a := info.Assignment
			out["final_assignment"] = fmt.Sprintf("owner %s, followers %v, epoch %d, status %s", a.Owner, a.Followers, a.Epoch, info.Status)
		}
	}()
	if victim == "" {
		return out
	}
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	failed, err := brookload.WaitFailedOver(fctx, t.info, victim, before.Assignment.Epoch)
	if err != nil {
		out["failover"] = "not finished: " + err.Error()
		return out
	}
	out["failover_trace_id"] = failed.LastTraceID
	out["failover_epoch"] = failed.Assignment.Epoch
	what, err := t.nodes.Restart(ctx, victim)
	if err != nil {
		out["old_owner_rejoined"] = "restart failed: " + err.Error()
		return out
	}
	t.log.Info("restarted the old owner", "node", victim, "what", what)
	rctx, cancel2 := context.WithTimeout(ctx, time.Minute)
	defer cancel2()
	r, err := brookload.WaitRejoined(rctx, t.info, victim, failed)
	switch {
	case err != nil:
		out["old_owner_rejoined"] = fmt.Sprintf("no: %v", err)
	case r.WithoutRecovery():
		out["old_owner_rejoined"] = fmt.Sprintf("yes: %s follows at epoch %d after %d ms, no other recovery", victim, r.Epoch, r.Took.Milliseconds())
	default:
		out["old_owner_rejoined"] = fmt.Sprintf("not as expected: follower %v, epoch %d -> %d, starts %d -> %d, recovery seen %v",
			r.Follower, r.EpochBefore, r.Epoch, r.StartsBefore, r.StartsAfter, r.RecoverySeen)
	}
	out["old_owner_rejoined_ok"] = err == nil && r.WithoutRecovery()
	return out
}
