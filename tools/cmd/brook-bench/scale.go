package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/tools/auth"
	"github.com/brook-streams/brook/tools/bench"
	"github.com/brook-streams/brook/tools/cluster"
)

// The scale figures of --failover-streams (issue 17): how fast the streams
// are created, what the processes cost once idle, and what the heartbeats
// cost on the wire.

// createSlice is how many creates each creation-rate slice counts.
const createSlice = 1000

// createTiming is how long creating the streams took, with the rate of
// each slice of createSlice streams (in the order they completed), so a
// slowdown as the cluster grows shows.
type createTiming struct {
	Total  time.Duration
	Rate   float64   // streams per second over all
	Slices []float64 // streams per second of each full slice (and the rest)
}

// timeCreates runs create for every stream, limit at a time, and times
// them.
func timeCreates(ctx context.Context, streams []string, limit int, create func(context.Context, string) error) (createTiming, error) {
	var mu sync.Mutex
	var done []time.Time
	start := time.Now()
	err := forEach(ctx, streams, limit, func(ctx context.Context, s string) error {
		if err := create(ctx, s); err != nil {
			return err
		}
		mu.Lock()
		done = append(done, time.Now())
		mu.Unlock()
		return nil
	})
	return sliceRates(start, done), err
}

// sliceRates computes a createTiming from the start and the completion
// times (ascending, as appended under one lock).
func sliceRates(start time.Time, done []time.Time) createTiming {
	var t createTiming
	if len(done) == 0 {
		return t
	}
	t.Total = done[len(done)-1].Sub(start)
	t.Rate = float64(len(done)) / t.Total.Seconds()
	from := start
	for i := 0; i < len(done); i += createSlice {
		end := min(i+createSlice, len(done))
		d := done[end-1].Sub(from)
		if d > 0 {
			t.Slices = append(t.Slices, float64(end-i)/d.Seconds())
		}
		from = done[end-1]
	}
	return t
}

// procUsage is one process's cost over an idle window: CPU in percent of
// one core, and its resident memory at the end.
type procUsage struct {
	Name   string
	CPU    float64
	RSSMiB float64
}

// namedPid names a process to sample.
type namedPid struct {
	Name string
	Pid  int
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's
// times: 100 on every Linux this runs on (reading sysconf would need cgo).
const clockTicks = 100

// procRoot is where /proc is (tests point it elsewhere).
var procRoot = "/proc"

// errProc marks a failure to read /proc: the CPU and RSS figures are
// lost, not the run (the bench warns and goes on without them).
var errProc = errors.New("cannot read /proc")

// readProc reads a file under procRoot.
func readProc(elem ...string) ([]byte, error) {
	data, err := os.ReadFile(filepath.Join(append([]string{procRoot}, elem...)...))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errProc, err)
	}
	return data, nil
}

// cpuTicks reads a process's user and system time, in clock ticks.
func cpuTicks(pid int) (uint64, error) {
	data, err := readProc(strconv.Itoa(pid), "stat")
	if err != nil {
		return 0, err
	}
	// The command (field 2) may hold spaces; the fields after its closing
	// parenthesis start with the state (field 3): utime and stime are
	// fields 14 and 15.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command field", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the command", pid, len(f))
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return u + s, nil
}

// rssMiB reads a process's resident set size.
func rssMiB(pid int) (float64, error) {
	data, err := readProc(strconv.Itoa(pid), "status")
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/status: VmRSS %q: %w", pid, rest, err)
			}
			return kb / 1024, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
}

// sampleIdle measures procs over window: CPU from the difference of their
// times, RSS at the end. It takes the window even when /proc cannot be
// read (an errProc error), so what is counted beside it still is.
func sampleIdle(ctx context.Context, procs []namedPid, window time.Duration) ([]procUsage, error) {
	s, serr := startSample(procs)
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(window):
	}
	if serr != nil {
		return nil, serr
	}
	return s.end()
}

// cpuSample is a CPU measure of procs begun at start.
type cpuSample struct {
	procs  []namedPid
	before []uint64
	start  time.Time
}

// startSample reads procs' CPU times now; end measures from here.
func startSample(procs []namedPid) (*cpuSample, error) {
	s := &cpuSample{procs: procs, before: make([]uint64, len(procs)), start: time.Now()}
	for i, p := range procs {
		t, err := cpuTicks(p.Pid)
		if err != nil {
			return nil, err
		}
		s.before[i] = t
	}
	return s, nil
}

// end returns each process's CPU since the start, and its RSS now.
func (s *cpuSample) end() ([]procUsage, error) {
	elapsed := time.Since(s.start).Seconds()
	out := make([]procUsage, len(s.procs))
	for i, p := range s.procs {
		t, err := cpuTicks(p.Pid)
		if err != nil {
			return nil, err
		}
		rss, err := rssMiB(p.Pid)
		if err != nil {
			return nil, err
		}
		out[i] = procUsage{Name: p.Name, CPU: 100 * float64(t-s.before[i]) / clockTicks / elapsed, RSSMiB: rss}
	}
	return out, nil
}

// machineBusy reads the machine's busy CPU time over all its cores (the
// first line of /proc/stat, read by bench.ParseProcStat), in clock ticks:
// what every process on it, this cluster's or not, took.
func machineBusy() (uint64, error) {
	data, err := readProc("stat")
	if err != nil {
		return 0, err
	}
	busy, _, _, err := bench.ParseProcStat(bytes.NewReader(data))
	return busy, err
}

// byteCounter counts the messages and bytes of a subscription.
type byteCounter struct {
	msgs, bytes atomic.Int64
}

// countSubject subscribes nc to subject and counts what arrives until the
// returned stop is called.
func countSubject(nc *nats.Conn, subject string) (*byteCounter, func(), error) {
	c := &byteCounter{}
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		c.msgs.Add(1)
		c.bytes.Add(int64(len(m.Data) + len(m.Subject)))
	})
	if err != nil {
		return nil, nil, fmt.Errorf("subscribe %s: %w", subject, err)
	}
	if err := nc.Flush(); err != nil {
		return nil, nil, err
	}
	return c, func() { _ = sub.Unsubscribe() }, nil
}

// idleFigures are the scale mode's idle measures.
type idleFigures struct {
	Window time.Duration
	Procs  []procUsage
	// HBBytes and HBMsgs are per second, of every host's heartbeats
	// (subject and payload), over the window.
	HBBytes, HBMsgs float64
	// NoCPU says why Procs is empty: /proc could not be read.
	NoCPU string
}

// measureIdle waits settle, then samples procs over window while counting
// the heartbeats nc receives. Without /proc it counts the heartbeats
// alone and says why in NoCPU.
func measureIdle(ctx context.Context, nc *nats.Conn, procs []namedPid, settle, window time.Duration) (idleFigures, error) {
	f := idleFigures{Window: window}
	select {
	case <-ctx.Done():
		return f, ctx.Err()
	case <-time.After(settle):
	}
	cnt, stop, err := countSubject(nc, wire.HeartbeatWildcard)
	if err != nil {
		return f, err
	}
	start := time.Now()
	f.Procs, err = sampleIdle(ctx, procs, window)
	if errors.Is(err, errProc) {
		f.NoCPU, err = err.Error(), nil
	}
	stop()
	secs := time.Since(start).Seconds()
	f.HBBytes, f.HBMsgs = float64(cnt.bytes.Load())/secs, float64(cnt.msgs.Load())/secs
	return f, err
}

func (t createTiming) write(w io.Writer, n int) {
	var sl []string
	for _, r := range t.Slices {
		sl = append(sl, fmt.Sprintf("%.0f", r))
	}
	ignoreWrite(fmt.Fprintf(w, "created %d streams in %.1f s: %.0f streams/s; per %d: %s\n",
		n, t.Total.Seconds(), t.Rate, createSlice, strings.Join(sl, " ")))
}

func (f idleFigures) write(w io.Writer) {
	if f.Window == 0 {
		return
	}
	ignoreWrite(fmt.Fprintf(w, "idle over %s:\n", f.Window))
	if f.NoCPU != "" {
		ignoreWrite(fmt.Fprintf(w, "  no CPU figures: %s\n", f.NoCPU))
	}
	for _, p := range f.Procs {
		ignoreWrite(fmt.Fprintf(w, "  %-24s cpu %5.1f%% of a core  rss %6.1f MiB\n", p.Name, p.CPU, p.RSSMiB))
	}
	if f.HBMsgs > 0 {
		ignoreWrite(fmt.Fprintf(w, "  heartbeats: %.0f bytes/s in %.1f messages/s\n", f.HBBytes, f.HBMsgs))
	}
}

// idleSettle is how long the cluster is left alone before the idle
// window: the last creates' and publishes' beats and pulls die down.
const idleSettle = 5 * time.Second

// measureClusterIdle measures cl's coordinators, hosts and attention over
// window, and the heartbeats, heard as the attention service hears them.
func measureClusterIdle(ctx context.Context, cl *cluster.Cluster, window time.Duration) (idleFigures, error) {
	opts, err := cl.NATSOptions(auth.Attention)
	if err != nil {
		return idleFigures{}, err
	}
	nc, err := nats.Connect(cl.NATSURL(), append(opts, nats.Name("brook-bench-heartbeats"))...)
	if err != nil {
		return idleFigures{}, fmt.Errorf("connect to count heartbeats: %w", err)
	}
	defer nc.Close()
	var procs []namedPid
	for _, p := range cl.Procs() {
		procs = append(procs, namedPid{Name: p.Name, Pid: p.Pid()})
	}
	return measureIdle(ctx, nc, procs, idleSettle, window)
}

// timeAfterKill publishes to every stream at once with publish (a stream
// queued behind others would be timed from the kill while it waited for
// a turn) and records, per stream, how long after killed it was
// confirmed: in r.Serve for the streams owners names r.Killed for, in
// r.Others for the rest; both sorted. Where r.PerStream is not nil it
// also gets each stream's time by name.
func (r *massResult) timeAfterKill(ctx context.Context, streams []string, owners map[string]string, killed time.Time,
	publish func(context.Context, string) error) error {
	var mu sync.Mutex
	err := forEach(ctx, streams, len(streams), func(ctx context.Context, s string) error {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if err := publish(pctx, s); err != nil {
			return fmt.Errorf("publish after the kill: %w", err)
		}
		d := time.Since(killed)
		mu.Lock()
		if r.PerStream != nil {
			r.PerStream[s] = d
		}
		if owners[s] == r.Killed {
			r.Serve = append(r.Serve, d)
		} else {
			r.Others = append(r.Others, d)
		}
		mu.Unlock()
		return nil
	})
	slices.Sort(r.Serve)
	slices.Sort(r.Others)
	return err
}

// pickVictim sets r.Killed to the node owners names most often (the lowest
// name of a tie), and r.Owned to how often.
func (r *massResult) pickVictim(owners map[string]string) {
	owned := map[string]int{}
	for _, o := range owners {
		owned[o]++
	}
	for node, k := range owned {
		if k > r.Owned || (k == r.Owned && node < r.Killed) {
			r.Killed, r.Owned = node, k
		}
	}
}
