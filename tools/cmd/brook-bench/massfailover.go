package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/brook-streams/brook/pkg/client"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/tools/auth"
	"github.com/brook-streams/brook/tools/bench"
	"github.com/brook-streams/brook/tools/cluster"
)

// massResult is what one mass failover measured.
type massResult struct {
	Streams int    // streams created
	Killed  string // the node killed
	// NoKill says no host was killed (--failover-kill=false): Killed names
	// the host that owns the most, left alive.
	NoKill bool
	Owned  int // streams the killed node owned
	// Clients is how many clients published (--failover-clients).
	Clients int
	// Serve holds, per stream the killed node owned, how long after the
	// SIGKILL its first publish was confirmed again, ascending.
	Serve []time.Duration
	// Others is the same for the streams it did not own (a follower lost:
	// they should keep confirming without a recovery).
	Others []time.Duration
	// PerStream, when not nil (--failover-times), is each stream's time of
	// Serve or Others by name.
	PerStream map[string]time.Duration
	// Create times the creates; Idle is what the processes and the
	// heartbeats cost once the streams are idle (zero without
	// --idle-window).
	Create createTiming
	Idle   idleFigures
	// Cost is what the failover window cost the processes, and the
	// client's requests in it.
	Cost failoverCost
	// CoordRestart is how long a coordinator follower, SIGKILLed once
	// every stream was read back, took from its restart until its
	// /healthz answered ok (it knows the Raft leader, having loaded its
	// snapshot and log); CoordRestarted names it.
	CoordRestart   time.Duration
	CoordRestarted string
	// Raft counts, from the coordinators' logs: leaderships begun and
	// snapshots the stores took, up to the kill and up to the end.
	RaftAtKill, RaftAtEnd raftCounts
	// Stages times, from the processes' logs, the steps of the owned
	// streams' failover (readStages).
	Stages stageTimes
}

// raftCounts are the coordinators' leaderships and Raft snapshots, summed
// over their logs.
type raftCounts struct{ Leaderships, Snapshots int }

// countRaft counts, in every coordinator's log, the leaderships begun
// ("became raft leader") and the snapshots taken ("raft snapshot taken").
func countRaft(cl *cluster.Cluster) raftCounts {
	var rc raftCounts
	for i := range cl.Coordinators() {
		b, err := os.ReadFile(cl.Coordinator(i).LogPath)
		if err != nil {
			continue
		}
		rc.Leaderships += bytes.Count(b, []byte("became raft leader"))
		rc.Snapshots += bytes.Count(b, []byte("raft snapshot taken"))
	}
	return rc
}

// writeTimes writes PerStream to path, one stream a line: its name,
// "owned" or "other" (owners names who owned it before the kill) and its
// milliseconds after the kill, for matching with the processes' logs.
func (r massResult) writeTimes(path string, owners map[string]string) error {
	var b bytes.Buffer
	for _, s := range slices.Sorted(maps.Keys(r.PerStream)) {
		kind := "other"
		if owners[s] == r.Killed {
			kind = "owned"
		}
		ignoreWrite(fmt.Fprintf(&b, "%s %s %d\n", s, kind, r.PerStream[s].Milliseconds()))
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write the per-stream times: %w", err)
	}
	return nil
}

func (r massResult) write(w io.Writer) {
	line := func(what string, ds []time.Duration) {
		ignoreWrite(fmt.Fprintf(w, "%-28s %5d  p50 %4d ms  p90 %4d ms  p99 %4d ms  max %4d ms\n", what, len(ds),
			bench.Quantile(ds, 0.5).Milliseconds(), bench.Quantile(ds, 0.9).Milliseconds(),
			bench.Quantile(ds, 0.99).Milliseconds(), bench.Quantile(ds, 1).Milliseconds()))
	}
	r.Create.write(w, r.Streams)
	r.Idle.write(w)
	if r.NoKill {
		ignoreWrite(fmt.Fprintf(w, "burst without a kill: %d idle streams of %d copies, one publish each; %s, left alive, owns %d\n", r.Streams, benchCopies, r.Killed, r.Owned))
	} else {
		ignoreWrite(fmt.Fprintf(w, "mass failover: %d streams of %d copies, SIGKILL of %s, which owned %d; %d publishing client(s)\n", r.Streams, benchCopies, r.Killed, r.Owned, max(r.Clients, 1)))
	}
	line("serving again (owned)", r.Serve)
	line("confirming (not owned)", r.Others)
	ignoreWrite(fmt.Fprintf(w, "confirms per second after the %s (owned/not owned): %s\n", map[bool]string{true: "first publish", false: "kill"}[r.NoKill], perSecond(r.Serve, r.Others)))
	r.Stages.write(w)
	if r.NoKill {
		r.Cost.writeAs(w, "burst window", "first publish")
	} else {
		r.Cost.write(w)
	}
	ignoreWrite(fmt.Fprintf(w, "coordinators' raft (their logs): %d leaderships, %d snapshots by the kill; %d and %d by the end\n",
		r.RaftAtKill.Leaderships, r.RaftAtKill.Snapshots, r.RaftAtEnd.Leaderships, r.RaftAtEnd.Snapshots))
	if r.CoordRestarted != "" {
		ignoreWrite(fmt.Fprintf(w, "coordinator restart (%s, a follower, SIGKILL): serving again %d ms after its start\n",
			r.CoordRestarted, r.CoordRestart.Milliseconds()))
	}
}

// massProducer is the producer id of the mass failover's publishes: each
// stream gets sequence 1 before the kill and 2 after, so a publish retried
// across the failover is written once and the check below can demand
// exactly two records.
const massProducer = "mass-failover"

// runMassFailover measures how many streams come back when the host that
// owns the most of them dies: it creates n streams of three copies on a
// local cluster, publishes one record to each, SIGKILLs that host, and
// publishes again to every stream until confirmed, timing each from the
// kill. Then it reads every stream back: both records, once each, in
// order. Each stream fails over on its own recovery worker, so the time
// should not grow with the number of streams the host owned.
func runMassFailover(ctx context.Context, o options, n int, log *slog.Logger) (massResult, error) {
	res := massResult{Streams: n, NoKill: o.failoverNoKill, Clients: max(o.failoverClients, 1)}
	cl, err := startLocalCluster(ctx, o, log)
	if err != nil {
		return res, err
	}
	defer func() { _ = cl.Stop() }()
	c, err := connectRetrying(ctx, cl, "brook-bench-mass", o.busPublish, log)
	if err != nil {
		return res, err
	}
	defer closeClient(c, log)
	pubs := []*client.Client{c}
	for i := 1; i < o.failoverClients; i++ {
		pc, err := connectRetrying(ctx, cl, fmt.Sprintf("brook-bench-mass-%d", i), o.busPublish, log)
		if err != nil {
			return res, err
		}
		defer closeClient(pc, log)
		pubs = append(pubs, pc)
	}
	pub := map[string]*client.Client{} // each stream's publishing client

	streams := make([]string, n)
	for i := range streams {
		streams[i] = fmt.Sprintf("mass-%05d", i)
		pub[streams[i]] = pubs[i%len(pubs)]
	}
	if res.Create, err = createStreams(ctx, c, streams, o.createConcurrency, log); err != nil {
		return res, err
	}
	var mu sync.Mutex
	owners := map[string]string{}
	err = forEach(ctx, streams, 64, func(ctx context.Context, s string) error {
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		info, err := cl.WaitServing(wctx, s)
		if err != nil {
			return err
		}
		// One record on every copy's W before the kill.
		if _, err := pub[s].Publish(wctx, s, record(s, 1), client.WithProducer(massProducer, 1)); err != nil {
			return fmt.Errorf("publish before the kill: %w", err)
		}
		mu.Lock()
		owners[s] = info.Assignment.Owner
		mu.Unlock()
		return nil
	})
	if err != nil {
		return res, err
	}
	if o.idleWindow > 0 {
		if res.Idle, err = measureClusterIdle(ctx, cl, o.idleWindow); err != nil {
			return res, fmt.Errorf("idle measure: %w", err)
		}
		if res.Idle.NoCPU != "" {
			log.Warn("idle measure: no CPU figures", "err", res.Idle.NoCPU)
		}
	}
	res.pickVictim(owners)
	victim := cl.HostByNode(res.Killed)
	if victim == nil {
		return res, fmt.Errorf("no process for node %s", res.Killed)
	}
	profile := ""
	if o.cpuProfile != "" {
		profile = o.cpuProfile + ".failover.pprof"
	}
	spared := victim // costProcs leaves out the process killed
	if res.NoKill {
		spared = nil
	}
	stats := func() client.Stats {
		var sum client.Stats
		for _, pc := range pubs {
			sum = sum.Add(pc.Stats())
		}
		return sum
	}
	meter, err := startCost(costProcs(cl, spared), stats, profile, log)
	if err != nil {
		return res, fmt.Errorf("failover cost: %w", err)
	}
	if o.failoverTimes != "" {
		res.PerStream = make(map[string]time.Duration, len(streams))
	}
	var killed time.Time
	res.Cost, err = meter.measure(log, func() error {
		res.RaftAtKill = countRaft(cl)
		killed = time.Now()
		if res.NoKill {
			log.Info("publishing to every stream, no host killed", "most_owned", res.Killed, "owned", res.Owned, "streams", n)
		} else {
			log.Info("killing the host that owns the most streams", "node", res.Killed, "owned", res.Owned, "streams", n)
			if err := cl.Kill(victim, syscall.SIGKILL); err != nil {
				return err
			}
		}
		return res.timeAfterKill(ctx, streams, owners, killed, func(ctx context.Context, s string) error {
			_, err := pub[s].Publish(ctx, s, record(s, 2), client.WithProducer(massProducer, 2))
			return err
		})
	})
	if err != nil {
		return res, err
	}
	if o.failoverTimes != "" {
		if err := res.writeTimes(o.failoverTimes, owners); err != nil {
			return res, err
		}
	}
	if !res.NoKill {
		owned := map[string]bool{}
		for s, o := range owners {
			if o == res.Killed {
				owned[s] = true
			}
		}
		var serr error
		if res.Stages, serr = readStages(cl, killed, owned, res.Serve); serr != nil {
			log.Warn("failover stages not read", "err", serr)
		}
	}
	if err := forEach(ctx, streams, 64, func(ctx context.Context, s string) error {
		return checkTwoRecords(ctx, c, s)
	}); err != nil {
		return res, err
	}
	res.CoordRestarted, res.CoordRestart, err = timeCoordinatorRestart(ctx, cl, log)
	res.RaftAtEnd = countRaft(cl)
	return res, err
}

// timeCoordinatorRestart SIGKILLs a coordinator that does not lead, starts
// it again and times, from that start, until its /healthz answers ok.
func timeCoordinatorRestart(ctx context.Context, cl *cluster.Cluster, log *slog.Logger) (string, time.Duration, error) {
	leader, err := cl.WaitLeader(ctx)
	if err != nil {
		return "", 0, err
	}
	var p *cluster.Proc
	for i := range cl.Coordinators() {
		if c := cl.Coordinator(i); c.Node != strconv.FormatUint(leader, 10) {
			p = c
			break
		}
	}
	if p == nil {
		return "", 0, errors.New("coordinator restart: no follower")
	}
	log.Info("restarting a coordinator follower", "proc", p.Name, "leader", leader)
	if err := cl.Kill(p, syscall.SIGKILL); err != nil {
		return p.Name, 0, err
	}
	start := time.Now()
	if err := cl.Restart(ctx, p); err != nil {
		return p.Name, 0, err
	}
	url := "http://" + p.HTTPAddr() + "/healthz"
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p.Name, time.Since(start), nil
			}
		}
		select {
		case <-ctx.Done():
			return p.Name, 0, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// connectRetrying connects an admin client to cl that retries without
// bound, with short backoffs: the measure is when a stream serves again,
// not when a client that backed off for long happens to ask. busPublish
// keeps its batches off the client link (--bus-publish).
func connectRetrying(ctx context.Context, cl *cluster.Cluster, name string, busPublish bool, log *slog.Logger) (*client.Client, error) {
	return client.Connect(ctx, cl.NATSURL(), append(cl.ClientOptions(auth.Admin),
		client.WithName(name), client.WithLogger(log), client.WithDirectLink(!busPublish),
		client.WithRetry(0, 0), client.WithBackoff(5*time.Millisecond, 50*time.Millisecond),
		client.WithRequestTimeout(3*time.Second), client.WithAdminTimeout(30*time.Second))...)
}

// closeClient closes c, logging a failure.
func closeClient(c *client.Client, log *slog.Logger) {
	if err := c.Close(); err != nil {
		log.Warn("close client", "err", err)
	}
}

// createStreams creates streams (three copies, the bench's policy),
// limit at a time, and times the creates.
func createStreams(ctx context.Context, c *client.Client, streams []string, limit int, log *slog.Logger) (createTiming, error) {
	var created atomic.Int64
	start := time.Now()
	t, err := timeCreates(ctx, streams, max(limit, 1), func(ctx context.Context, s string) error {
		_, err := c.CreateStream(ctx, wire.StreamCreate{Stream: s, Copies: benchCopies, Policy: benchPolicy})
		for wire.CodeOf(err) == wire.CodeOutcomeUnknown && ctx.Err() == nil {
			// The create's proposal timed out and may yet commit: the
			// names are this run's own, so the bench repeats it, and an
			// "exists" below means the first one committed.
			_, err = c.CreateStream(ctx, wire.StreamCreate{Stream: s, Copies: benchCopies, Policy: benchPolicy})
		}
		if err == nil || wire.CodeOf(err) == wire.CodeExists {
			if k := created.Add(1); k%createSlice == 0 {
				log.Info("streams created so far", "streams", k, "seconds", time.Since(start).Seconds())
			}
		}
		if wire.CodeOf(err) == wire.CodeExists {
			// The client retried a create whose first attempt was
			// committed but not answered in time: the names are this
			// run's own, so the stream is the one created.
			return nil
		}
		if err != nil {
			return fmt.Errorf("create: %w", err)
		}
		return nil
	})
	if err == nil {
		log.Info("streams created", "streams", len(streams), "seconds", t.Total.Seconds(), "per_second", t.Rate)
	}
	return t, err
}

// record is the payload of the mass failover's seq-th publish to stream.
func record(stream string, seq int) []byte { return fmt.Appendf(nil, "%s/%d", stream, seq) }

// checkTwoRecords reads stream from its start and demands exactly the two
// records published, in order, each once.
func checkTwoRecords(ctx context.Context, c *client.Client, stream string) error {
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var got [][]byte
	for fctx.Err() == nil {
		b, err := c.Fetch(fctx, stream, wire.FetchRequest{Start: "offset", Offset: 0, MaxRecords: 10, WaitMS: 200})
		if err != nil {
			return fmt.Errorf("read %s back: %w", stream, err)
		}
		got = got[:0]
		for _, r := range b.Records {
			got = append(got, r.Data)
		}
		// The second record is confirmed, but a new owner's watermark may
		// need its followers' acks before a fetch sees it.
		if len(got) >= 2 {
			break
		}
	}
	want := [][]byte{record(stream, 1), record(stream, 2)}
	if !slices.EqualFunc(got, want, bytes.Equal) {
		return fmt.Errorf("%s holds %q, want %q", stream, got, want)
	}
	return nil
}

// forEach runs fn for every stream, at most limit at a time, and returns
// the first error (the calls still running are cancelled).
func forEach(ctx context.Context, streams []string, limit int, fn func(context.Context, string) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, max(limit, 1))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for _, s := range streams {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := fn(ctx, s); err != nil {
				mu.Lock()
				if first == nil {
					first = fmt.Errorf("%s: %w", s, err)
					cancel()
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

// perSecond renders how many of owned and others were confirmed in each
// second after the kill, "1s 0/12 2s 40/900 ...": confirms that bunch up
// at a multiple of the client's request timeout show retries, not the
// cluster, setting the pace.
func perSecond(owned, others []time.Duration) string {
	var counts [][2]int
	add := func(ds []time.Duration, k int) {
		for _, d := range ds {
			s := int(d / time.Second)
			for len(counts) <= s {
				counts = append(counts, [2]int{})
			}
			counts[s][k]++
		}
	}
	add(owned, 0)
	add(others, 1)
	var b []byte
	for s, c := range counts {
		if c == [2]int{} {
			continue
		}
		b = fmt.Appendf(b, " <%ds %d/%d", s+1, c[0], c[1])
	}
	if len(b) == 0 {
		return "none"
	}
	return string(b[1:])
}
