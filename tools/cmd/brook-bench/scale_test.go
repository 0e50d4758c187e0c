package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/brook-streams/brook/tools/bench"
)

// TestScaleRatio is the scale mode, shortened: the mass failover at n and
// at 2n streams, each on a fresh local cluster, and the larger run must
// not be much worse than the smaller one: creation at least half as fast,
// and the killed host's streams (twice as many) serving again within 3.5
// times as long at the median (the p99 of one run moves with the machine's
// load: a Raft election in the middle of one failover is enough); a pair
// outside those bounds is measured once more, each size keeping its better
// run. Ratios within one test run, not absolute times: the machine is
// shared. docs/benchmarks.md ("Ten thousand streams") records the full
// runs.
func TestScaleRatio(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the process cluster in -short mode")
	}
	const n = 300
	run := func(streams int) massResult {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		var logs bytes.Buffer
		log := slog.New(slog.NewTextHandler(&logs, nil))
		res, err := runMassFailover(ctx, options{workDir: t.TempDir(), createConcurrency: 16}, streams, log)
		var text bytes.Buffer
		res.write(&text)
		t.Logf("%d streams:\n%s", streams, text.String())
		if err != nil {
			t.Fatalf("%d streams: %v\n%s", streams, err, logs.String())
		}
		if len(res.Serve) != res.Owned || len(res.Serve)+len(res.Others) != streams {
			t.Fatalf("%d streams: %d owned, %d and %d served again", streams, res.Owned, len(res.Serve), len(res.Others))
		}
		return res
	}
	// Load from outside (make test runs other packages' tests beside
	// this one) only ever adds time, and can land on one run of the
	// pair: within make test one pair measured 4.17 (280 vs 1,166 ms, the
	// larger run creating at 123 streams/s against 187), the same tree
	// alone 1.29. So a pair outside the bounds is measured again, and
	// each size keeps the better of its two runs: a cost that grows
	// faster than the streams fails both pairs.
	smallRate, largeRate, ps, pl := pairRatios(run(n), run(2*n))
	if largeRate/smallRate < 0.5 || float64(pl)/float64(ps) > 3.5 {
		t.Logf("outside the bounds (creation %.2f, failover p50 %.2f): measuring the pair again", largeRate/smallRate, float64(pl)/float64(ps))
		sr, lr, ps2, pl2 := pairRatios(run(n), run(2*n))
		smallRate, largeRate, ps, pl = max(smallRate, sr), max(largeRate, lr), min(ps, ps2), min(pl, pl2)
	}
	if r := largeRate / smallRate; r < 0.5 {
		t.Errorf("creation at %d streams is %.2f times as fast as at %d (%.0f vs %.0f streams/s), want at least 0.5",
			2*n, r, n, largeRate, smallRate)
	}
	// Twice the streams owned should cost at most about twice the time
	// (less, with the fixed detection in both); a cost quadratic in the
	// streams would be near four times. Within make test, beside other
	// packages' tests at load average 25, one run measured 3.24 (468 vs
	// 1,517 ms), so the bound is 3.5.
	if r := float64(pl) / float64(ps); r > 3.5 {
		t.Errorf("failover p50 at %d streams is %.2f times that at %d (%v vs %v), want at most 3.5", 2*n, r, n, pl, ps)
	}
}

// pairRatios returns a pair's creation rates and failover medians (the
// killed host's streams serving again), the smaller run's first.
func pairRatios(small, large massResult) (smallRate, largeRate float64, ps, pl time.Duration) {
	return small.Create.Rate, large.Create.Rate, bench.Quantile(small.Serve, 0.5), bench.Quantile(large.Serve, 0.5)
}

// The creation rates of each slice of the completions.
func TestSliceRates(t *testing.T) {
	start := time.Unix(100, 0)
	var done []time.Time
	for i := range 2500 {
		// The first 1,000 at 1 ms each, the rest at 2 ms.
		d := time.Duration(i+1) * time.Millisecond
		if i >= 1000 {
			d = time.Second + time.Duration(i+1-1000)*2*time.Millisecond
		}
		done = append(done, start.Add(d))
	}
	got := sliceRates(start, done)
	if len(got.Slices) != 3 || got.Slices[0] != 1000 || got.Slices[1] != 500 || got.Slices[2] != 500 {
		t.Fatalf("slices %v, want [1000 500 500]", got.Slices)
	}
	if got.Total != 4*time.Second || got.Rate != 625 {
		t.Fatalf("total %v rate %v", got.Total, got.Rate)
	}
}

// The bench reads its own process's CPU time and RSS as it reads the
// cluster's.
func TestSampleIdleReadsProc(t *testing.T) {
	got, err := sampleIdle(context.Background(), []namedPid{{Name: "self", Pid: os.Getpid()}}, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].RSSMiB <= 0 || got[0].CPU < 0 {
		t.Fatalf("sample %+v", got)
	}
}

// A sample of this process while it spins counts the spin (a share of a
// core well above nothing), and the machine's busy time grows by at least
// as much as this process took.
func TestCPUSampleCountsWork(t *testing.T) {
	busy0, err := machineBusy()
	if err != nil {
		t.Fatal(err)
	}
	s, err := startSample([]namedPid{{Name: "self", Pid: os.Getpid()}})
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
	}
	got, err := s.end()
	if err != nil {
		t.Fatal(err)
	}
	busy, err := machineBusy()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].CPU <= 5 {
		t.Fatalf("a spinning process measured %+v, want more than 5%% of a core", got)
	}
	// Ticks are counted in whole units per process and per machine; one
	// tick of slack each.
	self := got[0].CPU * clockTicks / 100 * time.Since(s.start).Seconds()
	if float64(busy-busy0)+2 < self {
		t.Fatalf("the machine was busy %d ticks, less than this process's %.0f", busy-busy0, self)
	}
}

func TestPerSecondCountsEachSecond(t *testing.T) {
	s := time.Second
	got := perSecond([]time.Duration{s / 2, 2*s + 1}, []time.Duration{s / 3, s / 2, 2 * s})
	if want := "<1s 1/2 <3s 1/1"; got != want {
		t.Fatalf("perSecond = %q, want %q", got, want)
	}
	if got := perSecond(nil, nil); got != "none" {
		t.Fatalf("perSecond of nothing = %q", got)
	}
}

// TestWriteTimesNamesEachStream: --failover-times writes one line per
// stream, sorted by name, with whether the killed host owned it and its
// milliseconds after the kill.
func TestWriteTimesNamesEachStream(t *testing.T) {
	r := massResult{Killed: "h2", PerStream: map[string]time.Duration{
		"s2": 1500 * time.Millisecond, "s1": 250 * time.Millisecond, "s3": 3 * time.Second,
	}}
	path := filepath.Join(t.TempDir(), "times.txt")
	if err := r.writeTimes(path, map[string]string{"s1": "h1", "s2": "h2", "s3": "h2"}); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "s1 other 250\ns2 owned 1500\ns3 owned 3000\n"; string(got) != want {
		t.Fatalf("times file:\n%s\nwant:\n%s", got, want)
	}
}
