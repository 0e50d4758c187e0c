// Command brook-bench is the cluster bench: a publish workload against a
// brook cluster (the local process cluster it starts, or one already
// running, e.g. the compose stack) or, for the peer comparison, against a
// three-server NATS JetStream cluster, with an optional SIGKILL of the
// stream's owner (leader) at a set second, and a verification that every
// confirmed record is delivered exactly once at one offset.
//
//	brook-bench --stream durable --kill-owner-at-secs 5 --duration 15s
//	brook-bench --target jetstream --kill-owner-at-secs 5 --duration 15s
//	brook-bench --move-owner-at-secs 5 --duration 10s
//	brook-bench --nats-url nats://127.0.0.1:4222 --nats-nkey deploy/secrets/admin.nk --compose --kill-owner-at-secs 5
//	brook-bench --failover-streams 300
//	brook-bench --failover-streams 10000 --target jetstream
//	brook-bench --balance-streams 300 --runs 3
//	brook-bench --target both --catchup-records 1000000 --runs 3
//
// The --failover-streams form measures a mass failover instead: many
// streams, the host that owns the most of them killed, and how soon each
// serves again; with the creation rate (per 1,000 streams), each process's
// idle CPU and RSS and the heartbeats' bytes per second (issue 17), and
// over the failover (the kill to the last stream confirmed) each process's
// CPU, the bench process's own (its client, and the nats-servers unless
// --nats-processes), the machine's and the client's requests by kind; with
// --target jetstream, the same with R3 file streams on three nats-servers. The --catchup-records form fills a stream and times one
// reader reading it all from the start (issue 16). The --balance-streams
// form measures the owner balancer (issue 15): many streams under light
// load on four hosts, the host owning the most killed and restarted, and
// how soon every host owns within 10% of the even share again, with the
// moved streams' write gaps (balance.go).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/brook-streams/brook/pkg/client"
	"github.com/brook-streams/brook/tools/bench"
)

type options struct {
	target     string
	stream     string
	killAt     float64
	moveAt     float64
	duration   time.Duration
	recordSize int
	publishers int
	window     int
	readers    int
	natsURL    string
	natsNkey   string
	workDir    string
	natsBin    string
	jsonOut    string
	svgOut     string
	compose    bool
	runs       int
	both       bool
	// failoverStreams > 0 runs the mass failover instead of the workload.
	failoverStreams int
	// failoverTimes, with failoverStreams, names the file of each
	// stream's confirm time after the kill.
	failoverTimes string
	// failoverNoKill publishes the burst after the idle window with no
	// host killed: what waking every idle stream at once costs alone
	// (--failover-kill=false; the zero value kills, as tests expect).
	failoverNoKill bool
	// failoverClients is how many clients, each its own NATS connection,
	// publish the mass failover's records (stream i's go through client
	// i mod failoverClients); creates and read-backs use the first.
	failoverClients int
	// balanceStreams > 0 runs the owner-balance measure instead.
	balanceStreams int
	// createConcurrency is how many creates --failover-streams runs at
	// once (default defaultCreateConcurrency); idleWindow > 0 measures the
	// idle cluster over that window.
	createConcurrency int
	idleWindow        time.Duration
	coordArgs         string
	// catchupRecords > 0 runs the catch-up read instead of the workload.
	catchupRecords int
	catchupWindow  int
	catchupReaders string
	catchupProfile string
	hostArgs       string
	// cpuProfile, if set, profiles the owner, a follower and the client
	// of every brook workload run (profile.go).
	cpuProfile string
	// timeline, if set, writes where a confirm's time went over the same
	// window without the profiles (profile.go).
	timeline string
	// hostProxies runs the local cluster's hosts behind its TCP proxies.
	hostProxies bool
	// busReplication runs the local cluster's hosts without their direct
	// replication link (replication over NATS only).
	busReplication bool
	// busPublish keeps the bench client's publish batches on the bus
	// (no client.WithDirectLink).
	busPublish bool
	// natsProcesses runs the local cluster's nats-servers as processes.
	natsProcesses bool
	// workloads, if set, runs each publishers x window workload in turn
	// (workloads.go); linger and batch* are the brook client's batching.
	workloads    string
	linger       time.Duration
	batchRecords int
	batchBytes   int
}

// defaultCreateConcurrency is --create-concurrency's default. A create takes
// about 260 ms on this 2-core machine whatever the streams held (issue 17),
// so 16 in flight create about 60 streams/s and the goal of 300/s needs
// more; 64 measured 142/s at 3,000 streams. Every side of it is bounded:
// the coordinators' requests (--max-inflight), the Raft proposal queue,
// the hosts' create notices (4,096, then left to the pull) and applies (16
// at once).
const defaultCreateConcurrency = 64

func main() {
	var o options
	flag.StringVar(&o.target, "target", "brook", "system under test: brook, jetstream, or both (alternating runs, side-by-side medians)")
	flag.IntVar(&o.runs, "runs", 1, "runs per target; the comparison quotes medians")
	flag.StringVar(&o.stream, "stream", "durable", "stream kind: durable (3 copies, majority_durable)")
	flag.Float64Var(&o.killAt, "kill-owner-at-secs", -1, "SIGKILL the stream's owner (JetStream: leader) at this second; negative: no kill")
	flag.Float64Var(&o.moveAt, "move-owner-at-secs", -1, "move the stream's ownership to its best follower (stream.move) at this second and report the write gap; negative: no move")
	flag.DurationVar(&o.duration, "duration", 15*time.Second, "how long to publish")
	flag.IntVar(&o.recordSize, "record-size", 256, "record size in bytes")
	flag.IntVar(&o.publishers, "publishers", 4, "publishers")
	flag.IntVar(&o.window, "window", 16, "outstanding publishes per publisher (async window)")
	flag.IntVar(&o.readers, "readers", 1, "durable readers following the stream during the run")
	flag.StringVar(&o.natsURL, "nats-url", "", "an existing brook cluster's NATS URL (e.g. the compose stack); empty: start a local process cluster")
	flag.StringVar(&o.natsNkey, "nats-nkey", "", "with --nats-url: the admin principal's nkey seed file (e.g. deploy/secrets/admin.nk for the compose stack; the bench creates and deletes its stream)")
	flag.BoolVar(&o.compose, "compose", false, "with --nats-url: the cluster is the compose stack; kill the owner with docker kill")
	flag.StringVar(&o.workDir, "dir", "", "work directory for data and logs (default: a temp dir)")
	flag.StringVar(&o.natsBin, "nats-server", "", "nats-server binary for --target jetstream and --nats-processes (default: build it)")
	flag.StringVar(&o.jsonOut, "json", "", "write the result as JSON to this file")
	flag.StringVar(&o.svgOut, "svg", "", "write the confirms timeline as SVG to this file")
	flag.StringVar(&o.coordArgs, "coord-args", "", "extra arguments of every coordinator of the local cluster, space separated (e.g. \"--disconnect-grace 150ms --ttl 800ms\")")
	flag.IntVar(&o.failoverStreams, "failover-streams", 0, "instead of the workload: create this many streams on a local cluster, SIGKILL the host owning the most, and time each stream's first confirm after the kill")
	failoverKill := flag.Bool("failover-kill", true, "with --failover-streams (brook): false kills no host and times the same burst of one publish per idle stream (the streams of the host that owns the most stay apart as \"owned\")")
	flag.StringVar(&o.failoverTimes, "failover-times", "", "with --failover-streams (brook): write each stream's name, owned or other, and its first confirm's milliseconds after the kill to this file, one stream a line")
	flag.IntVar(&o.failoverClients, "failover-clients", 1, "with --failover-streams (brook): how many clients, each with its own NATS connection, publish the streams' records, each stream through one of them (as a cluster's streams are published by many processes)")
	flag.IntVar(&o.balanceStreams, "balance-streams", 0, "instead of the workload: create this many streams on a local cluster of 4 hosts under light load, SIGKILL the host owning the most, restart it once its streams failed over, and time the owner balancer back to every host within 10% of the even share")
	flag.IntVar(&o.createConcurrency, "create-concurrency", defaultCreateConcurrency, "with --failover-streams or --balance-streams: creates in flight at once")
	flag.DurationVar(&o.idleWindow, "idle-window", 10*time.Second, "with --failover-streams: once every stream serves, wait 5 s, then measure each process's CPU and RSS and the heartbeats' bytes over this window (0: skip)")
	flag.IntVar(&o.catchupRecords, "catchup-records", 0, "instead of the workload: fill a stream with this many --record-size records, then time one reader reading them all from the start (with --target both: brook and JetStream alternating)")
	flag.IntVar(&o.catchupWindow, "catchup-window", 256, "with --catchup-records: outstanding async publishes while filling")
	flag.StringVar(&o.catchupReaders, "catchup-readers", "", "with --catchup-records: comma-separated reader settings to time (default: brook "+strings.Join(brookReaders, ",")+"; jetstream "+strings.Join(bench.JetStreamReaders, ",")+")")
	flag.StringVar(&o.catchupProfile, "catchup-cpuprofile", "", "with --catchup-records: write a CPU profile of the bench process (the reader's client) over each read to <this>.<target>-catchup-<run>.<reader>.pprof")
	flag.StringVar(&o.hostArgs, "host-args", "", "extra arguments of every stream host of the local cluster, space separated (e.g. \"--pprof\")")
	flag.StringVar(&o.workloads, "workloads", "", "instead of --publishers/--window: comma-separated PUBLISHERSxWINDOW workloads run in turn, each compared on its own and all in one summary table (e.g. 4x16,1x256,1x1; a window of 1 is a synchronous publisher)")
	flag.DurationVar(&o.linger, "linger", client.DefaultLinger, "brook client: how long a publish may wait for others to share its batch (0: no batching, one request per record)")
	flag.IntVar(&o.batchRecords, "batch-records", client.DefaultBatchRecords, "brook client: most records per publish batch")
	flag.IntVar(&o.batchBytes, "batch-bytes", client.DefaultBatchBytes, "brook client: most bytes per publish batch")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "brook workloads on the local cluster: CPU profiles of the stream's owner, one follower and the bench process (the client) over the middle half of each run, to <this>.<run dir>.{owner,follower,client}.pprof (runs the hosts with --pprof); with --failover-streams: the bench process (its client and embedded nats-servers) over the failover window, to <this>.failover.pprof, and its mutex contention to <this>.failover.mutex.pprof")
	flag.StringVar(&o.timeline, "timeline", "", "brook workloads on the local cluster, without --cpuprofile: over the middle half of each run, the client's batches and where a batch's confirm went (client round trip, the owner's intake, append and wait for a follower, a follower's poll and apply), to <this>.<run dir>.batches.txt and the log")
	flag.BoolVar(&o.busPublish, "bus-publish", false, "brook: publish batches over NATS only, without the client link to the owner's host (client.WithDirectLink), which the hosts offer with their direct link; also for --failover-streams and --balance-streams")
	flag.BoolVar(&o.busReplication, "bus-replication", false, "local cluster: start the stream hosts without their direct replication link (--repl-listen), so that replication travels over NATS only")
	flag.BoolVar(&o.hostProxies, "host-proxies", false, "local cluster: connect the stream hosts to NATS through the harness's per-host TCP proxies (which the partition tests need) instead of directly; every host message then also passes through this process")
	flag.BoolVar(&o.natsProcesses, "nats-processes", false, "local cluster: run each of brook's nats-servers as a process of its own (the --nats-server binary, default: build it), as the JetStream target's are, instead of embedded in this process, where they share its scheduler and garbage collector with the bench's publishers and readers")
	flag.Parse()
	o.failoverNoKill = !*failoverKill
	if o.cpuProfile != "" && !strings.Contains(" "+o.hostArgs+" ", " --pprof ") {
		o.hostArgs = strings.TrimSpace(o.hostArgs + " --pprof")
	}
	o.both = o.target == "both"

	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, log); err != nil {
		fmt.Fprintln(os.Stderr, "brook-bench:", err)
		os.Exit(1)
	}
}

// run runs what o asks for. Without --dir it works in a temporary
// directory, removed after a run that succeeded and kept, with its
// processes' logs, after one that failed (a 10,000-stream run that stopped
// at a host's expiry left nothing to say why).
func run(ctx context.Context, o options, log *slog.Logger) (err error) {
	if o.workDir == "" {
		d, derr := os.MkdirTemp("", "brook-bench-")
		if derr != nil {
			return derr
		}
		defer func() {
			if err != nil { // run's result, not derr
				log.Warn("the run failed: its work directory (data and logs) is kept", "dir", d)
				return
			}
			if rerr := os.RemoveAll(d); rerr != nil {
				log.Warn("remove work directory", "dir", d, "err", rerr)
			}
		}()
		o.workDir = d
	}
	if err := os.MkdirAll(o.workDir, 0o755); err != nil {
		return err
	}
	if o.balanceStreams > 0 {
		return alternate(ctx, o, []string{"brook"}, "-balance", func(ro options) error {
			res, err := runBalance(ctx, ro, ro.balanceStreams, log)
			if res.Killed != "" {
				res.write(os.Stdout)
			}
			return err
		})
	}
	if o.failoverStreams > 0 {
		mass := runMassFailover
		if o.target == "jetstream" {
			mass = runJSMassFailover
		}
		res, err := mass(ctx, o, o.failoverStreams, log)
		if res.Killed != "" {
			res.write(os.Stdout)
		}
		return err
	}
	targets := []string{o.target}
	if o.target == "both" {
		targets = []string{"brook", "jetstream"}
	}
	if o.catchupRecords > 0 {
		return runCatchUps(ctx, o, targets, log)
	}
	if o.workloads != "" {
		return runWorkloads(ctx, o, targets, log)
	}
	results := map[string][]*bench.Result{}
	failed := alternate(ctx, o, targets, "", func(ro options) error {
		res, err := runOne(ctx, ro, log)
		if res != nil {
			results[ro.target] = append(results[ro.target], res)
		}
		return err
	})
	if ctx.Err() != nil {
		return failed
	}
	if len(targets) > 1 || o.runs > 1 {
		fmt.Println()
		_ = bench.WriteComparison(os.Stdout, targets, results)
	}
	return failed
}

// alternate runs one o.runs times per target, alternating the targets run
// after run so that both meet the same noise on a shared machine (the
// summaries quote medians), each with o.target set and a work directory of
// its own (<target><tag>-<run>). It returns the runs' errors joined, and
// stops early once ctx ends.
func alternate(ctx context.Context, o options, targets []string, tag string, one func(ro options) error) error {
	var failed error
	for i := 0; i < max(o.runs, 1); i++ {
		for _, name := range targets {
			ro := o
			ro.target = name
			ro.workDir = filepath.Join(o.workDir, fmt.Sprintf("%s%s-%d", name, tag, i))
			if err := os.MkdirAll(ro.workDir, 0o755); err != nil {
				return errors.Join(failed, err)
			}
			if err := one(ro); err != nil {
				failed = errors.Join(failed, fmt.Errorf("%s%s run %d: %w", name, tag, i+1, err))
				if ctx.Err() != nil {
					return failed
				}
			}
		}
	}
	return failed
}

// peerTarget is a system under test of both workloads.
type peerTarget interface {
	bench.Target
	bench.CatchUpTarget
}

// startTarget starts a fresh cluster of o.target with its stream and
// returns it with its closer.
func startTarget(ctx context.Context, o options, log *slog.Logger) (peerTarget, func(), error) {
	switch o.target {
	case "jetstream", bench.JetStreamAsync:
		bin := o.natsBin
		if bin == "" {
			var err error
			if bin, err = bench.BuildNATSServer(ctx, filepath.Join(o.workDir, "bin")); err != nil {
				return nil, nil, err
			}
		}
		js, err := bench.StartJetStream(ctx, bin, o.workDir)
		if err != nil {
			return nil, nil, err
		}
		js.Async = o.target == bench.JetStreamAsync
		return js, js.Close, nil
	case "brook":
		t, c, err := startBrook(ctx, o, log)
		if err != nil {
			return nil, nil, err
		}
		return t, c, nil
	default:
		return nil, nil, fmt.Errorf("unknown --target %q (want brook, jetstream, %s or both)", o.target, bench.JetStreamAsync)
	}
}

// runOne runs the workload once against a fresh cluster of o.target.
func runOne(ctx context.Context, o options, log *slog.Logger) (*bench.Result, error) {
	target, closer, err := startTarget(ctx, o, log)
	if err != nil {
		return nil, err
	}
	defer closer()

	cfg := bench.Config{
		Duration: o.duration, RecordSize: o.recordSize, Publishers: o.publishers, Window: o.window,
		Kill: o.killAt >= 0, KillAt: time.Duration(o.killAt * float64(time.Second)),
		FollowReaders: o.readers, Logger: log, SettleAfterStop: time.Second, DataDir: o.workDir,
		Progress: progressPrinter(os.Stderr, o.target, !isTerminal(os.Stderr)),
	}
	var run bench.Target = target
	if o.moveAt >= 0 {
		if run, err = withMove(target); err != nil {
			return nil, err
		}
		cfg.Kill, cfg.KillAt = true, time.Duration(o.moveAt*float64(time.Second))
	}
	var profiled sync.WaitGroup
	pctx, stopProfiles := context.WithCancel(ctx)
	if bt, ok := target.(*brookTarget); ok && (o.cpuProfile != "" || o.timeline != "") {
		prefix, profiles := o.cpuProfile, true
		if prefix == "" {
			prefix, profiles = o.timeline, false
		}
		profiled.Add(1)
		go func() {
			defer profiled.Done()
			profileRun(pctx, bt, prefix+"."+filepath.Base(o.workDir), o.duration, profiles, log)
		}()
	}
	res, err := bench.Run(ctx, run, cfg)
	// A run that ended early ends its profiles with it.
	stopProfiles()
	profiled.Wait()
	if isTerminal(os.Stderr) {
		fmt.Fprintln(os.Stderr) // below the redrawn progress line
	}
	if res != nil {
		_ = res.WriteText(os.Stdout)
		suffix := ""
		if o.runs > 1 || o.both {
			suffix = "." + filepath.Base(o.workDir)
		}
		if o.jsonOut != "" {
			if werr := writeFile(o.jsonOut+suffix, res.WriteJSON); werr != nil {
				return res, werr
			}
		}
		if o.svgOut != "" {
			if werr := writeFile(o.svgOut+suffix, res.WriteSVG); werr != nil {
				return res, werr
			}
		}
	}
	if err != nil {
		return res, err
	}
	if !res.Verify.OK {
		return res, fmt.Errorf("verification failed: %+v", res.Verify)
	}
	return res, nil
}

func writeFile(path string, write func(w io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		return errors.Join(err, f.Close())
	}
	return f.Close()
}

// progressPrinter returns the bench's progress report writing to w: one
// line redrawn with \r on a terminal, or, with lines (w is a file or a
// pipe), one line per report, so that a log of the bench holds one line
// per interval rather than one very long line.
func progressPrinter(w io.Writer, target string, lines bool) func(bench.Progress) {
	return func(p bench.Progress) {
		mark := ""
		if p.Killed {
			mark = " (owner killed)"
		}
		line := fmt.Sprintf("%s %5.1fs  %9d confirmed  %6d errors%s", target, p.Elapsed.Seconds(), p.Confirmed, p.Errors, mark)
		if lines {
			ignoreWrite(fmt.Fprintln(w, line))
			return
		}
		ignoreWrite(fmt.Fprintf(w, "\r%s   ", line))
	}
}

// ignoreWrite drops the result of a write of the bench's report to its
// output (the terminal or a log): a failed write there has nowhere better
// to be reported, and the bench's results are checked on their own.
func ignoreWrite(int, error) {}

// isTerminal reports whether f is a terminal (a character device such as a
// tty, not a file or a pipe).
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
