package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/brook-streams/brook/pkg/client"
	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/policy"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/tools/auth"
	"github.com/brook-streams/brook/tools/cluster"
	"github.com/brook-streams/brook/tools/cmd/brook-demo/brookload"
)

// config is the demo's settings.
type config struct {
	// Dir holds the binaries, the data and the logs (default: a new
	// directory under os.TempDir, kept after the demo).
	Dir string
	// Before and After are how long to publish before the kill and after
	// it (at least until a publish begun after the kill is confirmed).
	Before, After time.Duration
	Publishers    int
	RecordSize    int
	// NATSServers is how many nats-servers run (a NATS cluster with
	// routes when more than one).
	NATSServers int
	// Keep keeps the cluster running after the summary until ctx ends.
	Keep bool
	// Bins, if set, are used instead of building.
	Bins cluster.Bins
}

const (
	demoStream = "demo"
	demoCopies = 3
	demoCursor = "demo-verify"
)

func (c *config) defaults() {
	if c.Before <= 0 {
		c.Before = 5 * time.Second
	}
	if c.After <= 0 {
		c.After = 5 * time.Second
	}
	if c.Publishers <= 0 {
		c.Publishers = 32
	}
	if c.RecordSize < brookload.IDLen {
		c.RecordSize = 128
	}
}

// demo is one run.
type demo struct {
	cfg  config
	con  *console
	log  *slog.Logger
	cl   *cluster.Cluster
	c    *client.Client
	info brookload.InfoFunc
	sum  summary

	// binDir holds the binaries the demo built ("" if given).
	binDir string
	// failedOver is the stream's info once it served again after the kill.
	failedOver wire.StreamInfo
	// stopWatch stops the failover watcher (once it runs).
	stopWatch     func()
	stopWatchOnce sync.Once
}

// endWatch stops the watcher if it runs; safe to call more than once.
func (d *demo) endWatch() {
	d.stopWatchOnce.Do(func() {
		if d.stopWatch != nil {
			d.stopWatch()
		}
	})
}

// run runs the demo, writing to out. The summary's Pass is the verdict;
// an error means the demo could not run to the end.
func run(ctx context.Context, cfg config, out io.Writer) (summary, error) {
	cfg.defaults()
	d := &demo{cfg: cfg, con: consoleFor(out)}
	err := d.run(ctx)
	return d.sum, err
}

func (d *demo) run(ctx context.Context) error {
	if d.cfg.Dir == "" {
		dir, err := os.MkdirTemp("", "brook-demo-")
		if err != nil {
			return fmt.Errorf("work directory: %w", err)
		}
		d.cfg.Dir = dir
	}
	if err := os.MkdirAll(d.cfg.Dir, 0o755); err != nil {
		return fmt.Errorf("work directory: %w", err)
	}
	logDir := filepath.Join(d.cfg.Dir, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return fmt.Errorf("log directory: %w", err)
	}
	// The harness's and the client's own logs go to a file: the terminal
	// shows the demo.
	logf, err := os.Create(filepath.Join(logDir, "demo.log"))
	if err != nil {
		return fmt.Errorf("demo log: %w", err)
	}
	defer func() {
		if err := logf.Close(); err != nil {
			d.con.Printf("demo log: %v", err)
		}
	}()
	d.log = slog.New(slog.NewTextHandler(logf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	d.con.Printf("brook demo: data and logs of every process under %s", logDir)
	// The binaries it builds are large and rebuilt on every run: they go
	// once the cluster has stopped (this runs after d.stop); data and
	// logs stay for reading.
	defer func() {
		if d.binDir != "" {
			_ = os.RemoveAll(d.binDir)
		}
	}()

	if err := d.start(ctx); err != nil {
		return err
	}
	defer d.stop()
	defer d.endWatch()

	pubCtx, stopPub := context.WithCancel(ctx)
	defer stopPub()
	pub, err := brookload.NewPublisher(ctx, d.c, brookload.PublisherConfig{
		Stream: demoStream, Producer: "demo-" + randomTag(), Logger: d.log,
	})
	if err != nil {
		return err
	}
	defer pub.Close()

	// Publish, kill the owner, watch the failover, publish on.
	rec, end, err := d.publishAndKill(ctx, pubCtx, pub)
	if err != nil {
		return err
	}
	confirms, errs, killAt, firstAfter := rec.snapshot()
	summarizeRecords(&d.sum, confirms, errs, rec.start, end, killAt, firstAfter)
	if st := pub.Stats(); st.Unanswered > 0 {
		d.con.Printf("publishes left unanswered by the kill: %d; found in the new owner's log: %d; sent again: %d (records read to decide: %d)",
			st.Unanswered, st.Resolved, st.Retried, st.Scanned)
	}

	d.verify(ctx, confirms)
	if d.sum.FailoverDone {
		d.rejoin(ctx)
	}
	if err := d.sum.write(d.con.w); err != nil {
		return err
	}
	if d.cfg.Keep {
		d.keep(ctx)
	}
	return nil
}

// start builds the services (unless given) and starts the cluster and the
// stream.
func (d *demo) start(ctx context.Context) error {
	bins := d.cfg.Bins
	if bins.Coordinator == "" {
		root, err := cluster.RepoRoot(ctx)
		if err != nil {
			return fmt.Errorf("find the repository: %w", err)
		}
		d.con.Printf("building brook-coordinator, brook-streamhost, brook-attention ...")
		began := time.Now()
		d.binDir = filepath.Join(d.cfg.Dir, "bin")
		bins, err = cluster.Build(ctx, root, d.binDir)
		if err != nil {
			return fmt.Errorf("build: %w", err)
		}
		d.con.Printf("built in %.1fs", time.Since(began).Seconds())
	}
	began := time.Now()
	cl, err := cluster.Start(ctx, cluster.Config{
		Bins: bins, Dir: d.cfg.Dir, Attention: true, Logger: d.log,
		LogDir: filepath.Join(d.cfg.Dir, "logs"), NATSServers: d.cfg.NATSServers,
	})
	if err != nil {
		return err
	}
	d.cl = cl
	servers := make([]string, cl.NATSServers())
	for i := range servers {
		servers[i] = cl.NATSServer(i).Addr()
	}
	what := "nats-server in this process at " + servers[0]
	if len(servers) > 1 {
		what = fmt.Sprintf("a cluster of %d nats-servers in this process at %s", len(servers), strings.Join(servers, ", "))
	}
	d.con.Printf("started %s, 3 coordinators, 4 stream hosts (h1..h4) and attention, each its own process", what)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	leader, err := cl.WaitLeader(wctx)
	if err != nil {
		d.stop()
		return err
	}
	if err := cl.WaitNodesLive(wctx, cl.Hosts()); err != nil {
		d.stop()
		return err
	}
	d.con.Printf("coordinator %d leads the Raft shard; %d stream hosts live (%.1fs)", leader, cl.Hosts(), time.Since(began).Seconds())

	opts := append(brookload.ClientOptions(brookload.DefaultAttemptTimeout), client.WithName("brook-demo"), client.WithLogger(d.log))
	opts = append(opts, cl.ClientOptions(auth.Admin)...)
	if d.c, err = client.Connect(ctx, cl.NATSURL(), opts...); err != nil {
		d.stop()
		return err
	}
	d.info = brookload.StreamInfoOf(d.c, demoStream)
	if _, err := d.c.CreateStream(wctx, wire.StreamCreate{Stream: demoStream, Copies: demoCopies, Policy: policy.MajorityDurable}); err != nil {
		d.stop()
		return fmt.Errorf("create stream %s: %w", demoStream, err)
	}
	info, err := cl.WaitServing(wctx, demoStream)
	if err != nil {
		d.stop()
		return err
	}
	a := info.Assignment
	d.con.Printf("stream %s: owner %s, followers %v, epoch %d, policy %s: a record is confirmed once W=%d of %d copies hold it; recovery seals R=%d",
		demoStream, a.Owner, a.Followers, a.Epoch, a.Policy, info.W, len(a.Copies()), info.R)
	return nil
}

// stop stops everything the demo started; safe to call twice.
func (d *demo) stop() {
	if d.c != nil {
		_ = d.c.Close()
	}
	if d.cl != nil {
		if err := d.cl.Stop(); err != nil {
			d.log.Warn("stop cluster", "err", err)
		}
	}
}

// publishAndKill publishes for Before, kills the owner, watches the
// failover and publishes on for After (and at least until a publish begun
// after the kill is confirmed, within 30 s more). It returns when every
// publisher has stopped.
func (d *demo) publishAndKill(ctx, pubCtx context.Context, pub *brookload.Publisher) (*recorder, time.Time, error) {
	start := time.Now()
	rec := newRecorder(start)
	firstAfter := make(chan struct{})
	rec.onFirstAfter = func(at, killAt time.Time) {
		d.con.Event(at, "first confirm of a publish begun after the kill: writes were unavailable for %d ms", at.Sub(killAt).Milliseconds())
		close(firstAfter)
	}
	d.con.Printf("publishing %d-byte records from %d publishers; the owner is killed after %v", d.cfg.RecordSize, d.cfg.Publishers, d.cfg.Before)

	var stopping atomic.Bool
	var wg sync.WaitGroup
	for p := range d.cfg.Publishers {
		wg.Add(1)
		go func(pubID uint32) {
			defer wg.Done()
			for seq := uint64(0); !stopping.Load() && pubCtx.Err() == nil; seq++ {
				id := brookload.ID{Pub: pubID, Seq: seq}
				sent := time.Now()
				// A publish gets time to ride out a failover, but not forever.
				cctx, cancel := context.WithTimeout(pubCtx, 30*time.Second)
				c, err := pub.Publish(cctx, id, brookload.Encode(id, d.cfg.RecordSize))
				cancel()
				if err != nil {
					rec.failed()
					d.log.Warn("publish failed", "id", id, "err", err)
					continue
				}
				rec.confirm(id, confirmed{Offset: c.Offset, Sent: sent, At: time.Now(), Resolved: c.Resolved})
			}
		}(uint32(p))
	}
	progDone := make(chan struct{})
	progCtx, stopProg := context.WithCancel(ctx)
	go func() {
		defer close(progDone)
		const every = 250 * time.Millisecond
		t := time.NewTicker(every)
		defer t.Stop()
		stride := d.con.progressStride()
		for n := 1; ; n++ {
			select {
			case <-progCtx.Done():
				d.con.Progress(progressLine(rec.tick(time.Now(), every)))
				return
			case now := <-t.C:
				p := progressLine(rec.tick(now, every))
				if n%stride == 0 {
					d.con.Progress(p)
				}
			}
		}
	}()
	finish := func() time.Time {
		stopping.Store(true)
		wg.Wait()
		end := time.Now()
		stopProg()
		<-progDone
		d.con.EndProgress()
		return end
	}

	if err := sleep(ctx, d.cfg.Before); err != nil {
		finish()
		return rec, time.Now(), err
	}
	if err := d.kill(ctx, rec, firstAfter); err != nil {
		finish()
		return rec, time.Now(), err
	}
	end := finish()
	return rec, end, nil
}

// kill kills the owner, watches the failover, and returns when publishing
// after the kill is done.
func (d *demo) kill(ctx context.Context, rec *recorder, firstAfter <-chan struct{}) error {
	info, err := d.info(ctx)
	if err != nil {
		return fmt.Errorf("find the owner: %w", err)
	}
	victim := info.Assignment.Owner
	base := view{info: info, victimState: wire.NodeLive}
	w, err := startWatch(d.con, d.c.Conn(), d.info, d.clusterInfo, demoStream, victim, base)
	if err != nil {
		return err
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan struct{})

	killAt := time.Now()
	rec.markKill(killAt)
	d.con.setKill(killAt)
	what, err := brookload.LocalNodes{C: d.cl}.Kill(ctx, victim)
	if err != nil {
		stopWatch()
		return err
	}
	d.con.Event(killAt, "SIGKILL %s (%s), the owner of %s at epoch %d", victim, what, demoStream, info.Assignment.Epoch)
	d.sum.Victim, d.sum.OldEpoch = victim, info.Assignment.Epoch
	go func() {
		defer close(watchDone)
		w.run(watchCtx, killAt)
	}()
	d.stopWatch = func() { stopWatch(); <-watchDone }

	// Publish on for After, and until writes are back (bounded).
	if err := sleep(ctx, d.cfg.After); err != nil {
		return err
	}
	select {
	case <-firstAfter:
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(30 * time.Second):
		d.con.Event(time.Now(), "no publish begun after the kill was confirmed within %v", d.cfg.After+30*time.Second)
	}
	served, at := w.failedOver()
	if !at.IsZero() {
		d.sum.FailoverDone, d.sum.FailoverTook = true, at.Sub(killAt)
		d.sum.NewOwner, d.sum.Epoch, d.sum.TraceID = served.Assignment.Owner, served.Assignment.Epoch, served.LastTraceID
		d.failedOver = served
	}
	return nil
}

func (d *demo) clusterInfo(ctx context.Context) (wire.ClusterInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return d.c.ClusterInfo(ctx)
}

// verify reads the stream back with a durable cursor and judges it.
func (d *demo) verify(ctx context.Context, confirms map[brookload.ID]confirmed) {
	vctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	began := time.Now()
	end, err := brookload.SettledTail(vctx, d.c, demoStream, 15*time.Second)
	if err != nil {
		d.sum.VerifyErr = err.Error()
		return
	}
	read := make([]delivery, 0, end)
	n, err := brookload.ReadCursor(vctx, d.c, demoStream, demoCursor, end, func(r frame.Record) {
		id, ok := brookload.Decode(r.Data)
		read = append(read, delivery{Offset: r.Offset, ID: id, OK: ok})
	})
	if err != nil {
		d.sum.VerifyErr = err.Error()
		return
	}
	d.sum.Verify = judge(confirms, read, 0, end)
	verdict := "OK"
	if !d.sum.Verify.OK() {
		verdict = "FAILED"
	}
	d.con.Printf("read back %d records (offsets 0..%d) with durable cursor %s in %.1fs: every confirmed record exactly once at its offset: %s",
		n, end, demoCursor, time.Since(began).Seconds(), verdict)
}

// rejoin restarts the old owner and waits until it follows the new owner
// at the failover's epoch, without another recovery.
func (d *demo) rejoin(ctx context.Context) {
	defer d.endWatch() // the watcher shows the rejoin too
	victim := d.sum.Victim
	what, err := brookload.LocalNodes{C: d.cl}.Restart(ctx, victim)
	if err != nil {
		d.sum.RejoinErr = err.Error()
		return
	}
	d.con.Event(time.Now(), "restarted %s (%s) with its data", victim, what)
	rctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	r, err := brookload.WaitRejoined(rctx, d.info, victim, d.failedOver)
	d.sum.Rejoin = r
	if err != nil {
		d.sum.RejoinErr = err.Error()
		return
	}
	if r.WithoutRecovery() {
		d.con.Event(time.Now(), "%s follows %s at epoch %d: rejoined without another recovery (epoch, history starts and trace unchanged)",
			victim, r.Info.Assignment.Owner, r.Epoch)
	}
	// Let the watcher print the follower's own report.
	_ = sleep(ctx, 100*time.Millisecond)
}

// keep leaves the cluster running until ctx ends, with the commands to
// look at it.
func (d *demo) keep(ctx context.Context) {
	url := d.cl.NATSURL()
	if a := d.cl.Auth(); a != nil {
		// The operator's credential: its seed, and the inbox prefix it
		// may subscribe to (nats-server refuses the CLI's default).
		if p, ok := a.Principal(auth.Admin); ok {
			url += " --nkey " + p.SeedFile + " --inbox-prefix " + p.InboxPrefix
		}
	}
	d.con.Printf("\nthe cluster keeps running; try (https://github.com/nats-io/natscli):")
	d.con.Printf("  nats request %s '{\"stream\":\"%s\"}' --server %s", wire.AdminSubject(wire.VerbStreamInfo), demoStream, url)
	d.con.Printf("  nats request %s '' --server %s", wire.AdminSubject(wire.VerbClusterInfo), url)
	d.con.Printf("  nats request %s '' --server %s", wire.AttentionList, url)
	if a := d.cl.Attention(); a != nil && a.HTTPAddr() != "" {
		d.con.Printf("  attention page: http://%s/", a.HTTPAddr())
	}
	d.con.Printf("  logs: %s", filepath.Join(d.cfg.Dir, "logs"))
	d.con.Printf("Ctrl-C stops the cluster.")
	<-ctx.Done()
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func randomTag() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
