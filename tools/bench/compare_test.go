package bench

import (
	"strings"
	"testing"
	"time"
)

func TestWriteComparisonQuotesMedians(t *testing.T) {
	mk := func(rate float64, unavail int64, lost int, us ...float64) *Result {
		r := &Result{UnavailableMS: unavail}
		if len(us) > 0 {
			r.CPU = &CPU{MachineUSPerRecord: us[0]}
		}
		r.Before.PerSecond = rate
		r.Verify.Lost = lost
		return r
	}
	var b strings.Builder
	err := WriteComparison(&b, []string{"brook", "jetstream"}, map[string][]*Result{
		"brook":     {mk(100, 300, 0, 70), mk(300, 900, 0, 90), mk(200, 350, 0, 80)},
		"jetstream": {withDisk(mk(50, 5000, 0), 4), mk(70, 6000, 1)},
	})
	if err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"| confirmed records/s before the kill | 200 (100, 300, 200) | 60 (50, 70) |",
		"| write unavailability after the kill (ms) | 350 (300, 900, 350) | 5500 (5000, 6000) |",
		"| lost confirmed records | total 0 (0, 0, 0) | total 1 (0, 1) |",
		// Runs without CPU figures are left out, not read as zero.
		"| machine CPU per confirmed record, whole run (µs) | 80.0 (70.0, 90.0, 80.0) | – |",
		// So are runs without disk figures.
		"| disk: mean write while publishing (ms) | – | 4.00 (4.00) |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}

func withDisk(r *Result, writeMS float64) *Result {
	r.Disk = &Disk{MeanWriteMS: writeMS}
	return r
}

func TestQuantile(t *testing.T) {
	if Quantile(nil, 0.5) != 0 {
		t.Error("no samples: want 0")
	}
	lat := []time.Duration{5, 1, 4, 2, 3}
	if p := Quantile(lat, 0.5); p != 3 {
		t.Errorf("p50 %v, want 3", p)
	}
	if p := Quantile(lat, 1); p != 5 {
		t.Errorf("p100 %v, want 5", p)
	}
}
