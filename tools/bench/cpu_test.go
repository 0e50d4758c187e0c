package bench

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const procStatText = `cpu  100 20 30 800 40 5 5 10 7 0
cpu0 50 10 15 400 20 2 3 5 7 0
cpu1 50 10 15 400 20 3 2 5 0 0
intr 12345 0 0
ctxt 999
`

func TestParseProcStat(t *testing.T) {
	busy, total, cores, err := ParseProcStat(strings.NewReader(procStatText))
	if err != nil {
		t.Fatal(err)
	}
	// busy = user+nice+system+irq+softirq; guest (7) is inside user.
	if busy != 100+20+30+5+5 || total != busy+800+40+10 || cores != 2 {
		t.Fatalf("busy %d total %d cores %d", busy, total, cores)
	}
	for _, bad := range []string{"", "intr 1\n", "cpu 1 2 3\ncpu0 1 2 3 4 5 6 7 8\n", "cpu 1 2 x 4 5 6 7 8\ncpu0 1 2 3 4 5 6 7 8\n"} {
		if _, _, _, err := ParseProcStat(strings.NewReader(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// The busy share of the ticks times the wall time and the cores is the
// busy core-seconds, divided over the records.
func TestCPUBetween(t *testing.T) {
	t0 := time.Now()
	a := cpuSample{at: t0, busy: 1000, total: 5000, cores: 2, self: time.Second}
	b := cpuSample{at: t0.Add(10 * time.Second), busy: 1500, total: 7000, cores: 2, self: 3 * time.Second}
	c := cpuBetween(a, b, 1000)
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-9 }
	if c == nil || !near(c.MachineBusyPct, 25) || !near(c.MachineCoreSeconds, 5) || !near(c.BenchCoreSeconds, 2) ||
		!near(c.MachineUSPerRecord, 5000) || !near(c.BenchUSPerRecord, 2000) || c.Cores != 2 || c.Records != 1000 {
		t.Fatalf("%+v", c)
	}
	if c := cpuBetween(a, b, 0); c == nil || c.MachineUSPerRecord != 0 {
		t.Fatalf("no records: %+v", c)
	}
	if cpuBetween(b, a, 1) != nil {
		t.Fatal("clocks that went back gave figures")
	}
}

// On this machine the clocks are read and a busy loop of this process
// shows in both its own time and the machine's. The loop spins until this
// process has had 200 ms of CPU, not for 200 ms of wall time: on a busy
// machine (CI runs the modules' tests side by side) a wall-clock loop may
// get a third of a core.
func TestSampleCPU(t *testing.T) {
	if _, err := os.Stat(procStat); err != nil {
		t.Skip("no /proc/stat")
	}
	a, err := sampleCPU()
	if err != nil {
		t.Fatal(err)
	}
	const spin = 200 * time.Millisecond
	for deadline := time.Now().Add(20 * time.Second); selfCPU()-a.self < spin; {
		if time.Now().After(deadline) {
			t.Fatalf("this process had %v of CPU in 20 s", selfCPU()-a.self)
		}
	}
	b, err := sampleCPU()
	if err != nil {
		t.Fatal(err)
	}
	c := cpuBetween(a, b, 1)
	// The machine's busy ticks hold this process's; they are counted in
	// 10 ms ticks, so half of it is a bound no rounding breaks.
	if c == nil || c.BenchCoreSeconds < spin.Seconds() || c.MachineCoreSeconds < c.BenchCoreSeconds/2 {
		t.Fatalf("a busy loop of %v is not seen: %+v", spin, c)
	}
}

func TestSampleCPUWithoutProcStat(t *testing.T) {
	old := procStat
	procStat = filepath.Join(t.TempDir(), "missing")
	defer func() { procStat = old }()
	if _, err := sampleCPU(); err == nil {
		t.Fatal("no error without /proc/stat")
	}
}
