package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/brook-streams/brook/pkg/client"
	"github.com/brook-streams/brook/tools/cluster"
)

// failoverCost is what the mass failover's window cost, from the SIGKILL
// until the last stream was confirmed again (each stream's publish gives
// up two minutes after the kill, which caps the window): the CPU of every
// process of the local cluster left and of this one, whose client
// publishes to every stream at once (and whose embedded nats-servers
// route it all, unless --nats-processes made them processes, listed then
// on their own), the machine's, and the client's requests by kind.
type failoverCost struct {
	Window time.Duration
	Procs  []procUsage
	// Machine is every process of the machine, in percent of one core
	// (the cores' busy time added up), other sessions' included.
	Machine float64
	Client  client.Stats
	// NoCPU says why Procs and Machine are not measured: /proc could
	// not be read.
	NoCPU string
}

// costMeter measures a failoverCost from its start to end.
type costMeter struct {
	start time.Time
	// sample and busy0 are the CPU figures at the start; sample is nil
	// when /proc could not be read (noCPU says why).
	sample *cpuSample
	busy0  uint64
	noCPU  string
	stats  func() client.Stats
	stats0 client.Stats
	// profile is the CPU profile of this process being written (nil
	// without --cpuprofile, and once stopped); mutexProfile is where the
	// mutex contention over the same window goes.
	profile      *os.File
	mutexProfile string
}

// mutexSampling is the fraction (1 in n) of mutex contention events the
// failover's mutex profile samples.
const mutexSampling = 5

// selfName names this process among the measured: the client, and the
// nats-servers unless they run as processes.
func selfName(cl *cluster.Cluster) string {
	for i := range cl.NATSServers() {
		if cl.NATSServer(i).Pid() != 0 {
			return "brook-bench (client)"
		}
	}
	return fmt.Sprintf("brook-bench (client, %d nats)", cl.NATSServers())
}

// costProcs are the processes a failover's cost is measured on: cl's
// but killed, its nats-servers if they are processes, and this one.
func costProcs(cl *cluster.Cluster, killed *cluster.Proc) []namedPid {
	var procs []namedPid
	for _, p := range cl.Procs() {
		if p != killed {
			procs = append(procs, namedPid{Name: p.Name, Pid: p.Pid()})
		}
	}
	for i := range cl.NATSServers() {
		if pid := cl.NATSServer(i).Pid(); pid != 0 {
			procs = append(procs, namedPid{Name: "nats-" + strconv.Itoa(i), Pid: pid})
		}
	}
	return append(procs, namedPid{Name: selfName(cl), Pid: os.Getpid()})
}

// startCost starts measuring procs and the client's requests (stats);
// with profile set it also writes this process's CPU profile over the
// window there. A /proc it cannot read costs the CPU figures only: it
// warns and measures the rest. Stop the profile on every path (stop, or
// measure, which ends the meter whatever happens in the window).
func startCost(procs []namedPid, stats func() client.Stats, profile string, log *slog.Logger) (*costMeter, error) {
	m := &costMeter{start: time.Now(), stats: stats, stats0: stats()}
	busy0, err := machineBusy()
	var sample *cpuSample
	if err == nil {
		sample, err = startSample(procs)
	}
	if err != nil {
		m.noCPU = err.Error()
		log.Warn("failover cost: no CPU figures; measuring the client's requests alone", "err", err)
	} else {
		m.sample, m.busy0 = sample, busy0
	}
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, errors.Join(err, f.Close())
		}
		m.profile = f
		m.mutexProfile = strings.TrimSuffix(profile, ".pprof") + ".mutex.pprof"
		runtime.SetMutexProfileFraction(mutexSampling)
	}
	return m, nil
}

// stop stops the CPU profile if one is being written; it may be called
// again.
func (m *costMeter) stop() error {
	if m.profile == nil {
		return nil
	}
	pprof.StopCPUProfile()
	err := m.profile.Close()
	m.profile = nil
	// The mutex profile counts from when sampling began: the window.
	runtime.SetMutexProfileFraction(0)
	f, merr := os.Create(m.mutexProfile)
	if merr == nil {
		merr = errors.Join(pprof.Lookup("mutex").WriteTo(f, 0), f.Close())
	}
	return errors.Join(err, merr)
}

// measure runs window (the kill and what follows it) and ends the meter
// whatever it returns, so the CPU profile stops on every path: a failed
// kill left it running. A failure to measure is logged (the figures are
// what could be measured); window's error is returned.
func (m *costMeter) measure(log *slog.Logger, window func() error) (failoverCost, error) {
	err := window()
	f, cerr := m.end()
	if cerr != nil {
		log.Warn("failover cost not measured in full", "err", cerr)
	}
	return f, err
}

// end stops the profile and measures the window up to now.
func (m *costMeter) end() (failoverCost, error) {
	perr := m.stop()
	f := failoverCost{Window: time.Since(m.start), Client: m.stats().Sub(m.stats0), NoCPU: m.noCPU}
	if m.sample == nil {
		return f, perr
	}
	busy, err := machineBusy()
	if err != nil {
		f.NoCPU = err.Error()
		return f, errors.Join(perr, err)
	}
	f.Machine = 100 * float64(busy-m.busy0) / clockTicks / f.Window.Seconds()
	f.Procs, err = m.sample.end()
	if err != nil {
		f.NoCPU = err.Error()
	}
	return f, errors.Join(perr, err)
}

func (f failoverCost) write(w io.Writer) { f.writeAs(w, "failover window", "SIGKILL") }

// writeAs writes f under the title what, its window measured from start.
func (f failoverCost) writeAs(w io.Writer, what, start string) {
	if f.Window == 0 {
		return
	}
	ignoreWrite(fmt.Fprintf(w, "%s %.1f s (%s to the last stream confirmed):\n", what, f.Window.Seconds(), start))
	if f.NoCPU != "" {
		ignoreWrite(fmt.Fprintf(w, "  no CPU figures: %s\n", f.NoCPU))
	}
	var sum float64
	for _, p := range f.Procs {
		sum += p.CPU
		ignoreWrite(fmt.Fprintf(w, "  %-30s cpu %5.1f%% of a core  rss %6.1f MiB\n", p.Name, p.CPU, p.RSSMiB))
	}
	if f.NoCPU == "" {
		ignoreWrite(fmt.Fprintf(w, "  machine: cpu %.0f%% of a core busy (all its cores), these processes %.0f%%\n", f.Machine, sum))
	}
	s := f.Client
	ignoreWrite(fmt.Fprintf(w, "  client: %d publish attempts (%d retries), %d probes, %d stream.info, %d notice subscriptions, %d notices heard, %d admin retries\n",
		s.PublishAttempts, s.Retries, s.Probes, s.StatusChecks, s.NoticeSubscribes, s.Notices, s.AdminRetries))
	ignoreWrite(fmt.Fprintf(w, "  client retries after: %d no responders, %d timeouts, %d attempts abandoned for a newer owner, %d refusals or reconnects\n",
		s.RetriesNoResponders, s.RetriesTimedOut, s.RetriesOwnerLost, s.RetriesOther))
}
