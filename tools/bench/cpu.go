package bench

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// CPU is what a run's publishing cost in processor time: the whole
// machine's (every process of the system under test, the bench's client
// and readers, and whatever else runs) and the bench process's own, over
// the publishing window (from the first publish until the last one is
// answered), per confirmed record. All processes of both targets share the
// machine, so the machine's figure is the one that bounds the rate: at
// MachineUSPerRecord microseconds of CPU per record, Cores cores confirm
// at most Cores*1e6/MachineUSPerRecord records/s.
type CPU struct {
	Cores int `json:"cores"`
	// MachineBusyPct is the share of all cores' time spent running
	// anything (user, system and interrupts; idle, I/O wait and time
	// stolen by the hypervisor are not busy).
	MachineBusyPct float64 `json:"machine_busy_pct"`
	// MachineCoreSeconds is the busy time in core-seconds.
	MachineCoreSeconds float64 `json:"machine_core_seconds"`
	// BenchCoreSeconds is this process's own CPU time (getrusage): the
	// client, the follow readers and, with the local cluster's
	// nats-servers embedded, those servers too.
	BenchCoreSeconds float64 `json:"bench_core_seconds"`
	// Records is the confirmed records the times are divided by.
	Records int `json:"records"`
	// MachineUSPerRecord and BenchUSPerRecord are the two times in
	// microseconds per confirmed record (0 without records).
	MachineUSPerRecord float64 `json:"machine_us_per_record"`
	BenchUSPerRecord   float64 `json:"bench_us_per_record"`
}

// cpuSample is one reading of the machine's and this process's CPU clocks.
type cpuSample struct {
	at          time.Time
	busy, total uint64 // /proc/stat's aggregate line, in clock ticks
	cores       int
	self        time.Duration // this process's user + system time
}

// procStat is where the machine's clocks are read; a variable for tests.
var procStat = "/proc/stat"

// sampleCPU reads the clocks now. It fails where /proc/stat is missing
// (not Linux); the bench then reports no CPU figures.
func sampleCPU() (cpuSample, error) {
	f, err := os.Open(procStat)
	if err != nil {
		return cpuSample{}, err
	}
	defer func() { _ = f.Close() }() // read-only
	busy, total, cores, err := ParseProcStat(f)
	if err != nil {
		return cpuSample{}, err
	}
	return cpuSample{at: time.Now(), busy: busy, total: total, cores: cores, self: selfCPU()}, nil
}

// ParseProcStat reads the aggregate "cpu" line of /proc/stat (user, nice,
// system, idle, iowait, irq, softirq, steal, ...) and counts the per-core
// "cpuN" lines. Busy is user+nice+system+irq+softirq; the total adds idle,
// iowait and steal. Guest time is already inside user and is not added
// again. It is the bench's one reader of the machine's CPU clocks (the
// scale mode's machine figure reads the busy ticks here too).
func ParseProcStat(r io.Reader) (busy, total uint64, cores int, err error) {
	sc := bufio.NewScanner(r)
	found := false
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || !strings.HasPrefix(fields[0], "cpu") {
			continue
		}
		if fields[0] != "cpu" {
			cores++
			continue
		}
		if len(fields) < 9 {
			return 0, 0, 0, fmt.Errorf("proc stat: cpu line has %d fields, want at least 9", len(fields))
		}
		var v [8]uint64
		for i := range v {
			if v[i], err = strconv.ParseUint(fields[i+1], 10, 64); err != nil {
				return 0, 0, 0, fmt.Errorf("proc stat: cpu field %d: %w", i+1, err)
			}
		}
		user, nice, system, idle, iowait, irq, softirq, steal := v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]
		busy = user + nice + system + irq + softirq
		total = busy + idle + iowait + steal
		found = true
	}
	if err := sc.Err(); err != nil {
		return 0, 0, 0, err
	}
	if !found || cores == 0 {
		return 0, 0, 0, errors.New("proc stat: no cpu lines")
	}
	return busy, total, cores, nil
}

// cpuBetween is the CPU spent from a to b, divided over records. The
// machine's busy share of its ticks times the wall time and the cores is
// its busy core-seconds, which needs no clock-tick rate.
func cpuBetween(a, b cpuSample, records int) *CPU {
	wall := b.at.Sub(a.at).Seconds()
	if b.total <= a.total || wall <= 0 || b.busy < a.busy {
		return nil
	}
	share := float64(b.busy-a.busy) / float64(b.total-a.total)
	c := &CPU{
		Cores:              b.cores,
		MachineBusyPct:     100 * share,
		MachineCoreSeconds: share * wall * float64(b.cores),
		BenchCoreSeconds:   (b.self - a.self).Seconds(),
		Records:            records,
	}
	if records > 0 {
		c.MachineUSPerRecord = c.MachineCoreSeconds * 1e6 / float64(records)
		c.BenchUSPerRecord = c.BenchCoreSeconds * 1e6 / float64(records)
	}
	return c
}
