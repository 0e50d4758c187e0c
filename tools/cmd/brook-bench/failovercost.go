package main

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strconv"
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
}

// costMeter measures a failoverCost from its start to end.
type costMeter struct {
	sample *cpuSample
	busy0  uint64
	c      *client.Client
	stats0 client.Stats
	// profile is the CPU profile of this process being written (nil
	// without --cpuprofile).
	profile *os.File
}

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

// startCost starts measuring cl's processes but killed, this process
// and c's requests; with profile set it also writes this process's CPU
// profile over the window there.
func startCost(cl *cluster.Cluster, killed *cluster.Proc, c *client.Client, profile string) (*costMeter, error) {
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
	procs = append(procs, namedPid{Name: selfName(cl), Pid: os.Getpid()})
	m := &costMeter{c: c, stats0: c.Stats()}
	var err error
	if m.busy0, err = machineBusy(); err != nil {
		return nil, err
	}
	if m.sample, err = startSample(procs); err != nil {
		return nil, err
	}
	if profile != "" {
		if m.profile, err = os.Create(profile); err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(m.profile); err != nil {
			_ = m.profile.Close()
			return nil, err
		}
	}
	return m, nil
}

// end measures the window up to now.
func (m *costMeter) end() (failoverCost, error) {
	if m.profile != nil {
		pprof.StopCPUProfile()
		if err := m.profile.Close(); err != nil {
			return failoverCost{}, err
		}
	}
	f := failoverCost{Window: time.Since(m.sample.start), Client: m.c.Stats().Sub(m.stats0)}
	busy, err := machineBusy()
	if err != nil {
		return f, err
	}
	f.Machine = 100 * float64(busy-m.busy0) / clockTicks / f.Window.Seconds()
	f.Procs, err = m.sample.end()
	return f, err
}

func (f failoverCost) write(w io.Writer) {
	if f.Window == 0 {
		return
	}
	ignoreWrite(fmt.Fprintf(w, "failover window %.1f s (SIGKILL to the last stream confirmed):\n", f.Window.Seconds()))
	var sum float64
	for _, p := range f.Procs {
		sum += p.CPU
		ignoreWrite(fmt.Fprintf(w, "  %-30s cpu %5.1f%% of a core  rss %6.1f MiB\n", p.Name, p.CPU, p.RSSMiB))
	}
	ignoreWrite(fmt.Fprintf(w, "  machine: cpu %.0f%% of a core busy (all its cores), these processes %.0f%%\n", f.Machine, sum))
	s := f.Client
	ignoreWrite(fmt.Fprintf(w, "  client: %d publish attempts (%d retries), %d probes, %d stream.info, %d notice subscriptions, %d notices heard\n",
		s.PublishAttempts, s.Retries, s.Probes, s.StatusChecks, s.NoticeSubscribes, s.Notices))
}
