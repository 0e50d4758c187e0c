package bench

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// WriteComparison writes a markdown table comparing targets side by side,
// each figure the median over that target's runs, except counts that must
// be zero in every run (lost, duplicated, cut records), which are totals.
func WriteComparison(w io.Writer, targets []string, results map[string][]*Result) error {
	type row struct {
		name string
		get  func(*Result) float64
		unit string
		sum  bool // a count that must be zero in every run: show the total, not the median
		// has, when set, says whether a run has the figure (CPU and disk
		// figures, which a machine may not give); runs without it are
		// left out.
		has func(*Result) bool
	}
	hasCPU := func(r *Result) bool { return r.CPU != nil }
	hasDisk := func(r *Result) bool { return r.Disk != nil }
	rows := []row{
		{"confirmed records/s before the kill", func(r *Result) float64 { return r.Before.PerSecond }, "%.0f", false, nil},
		{"confirmed records/s, whole run", func(r *Result) float64 { return r.Whole.PerSecond }, "%.0f", false, nil},
		{"p50 confirm latency before the kill (ms)", func(r *Result) float64 { return r.Before.P50MS }, "%.2f", false, nil},
		{"p99 confirm latency before the kill (ms)", func(r *Result) float64 { return r.Before.P99MS }, "%.2f", false, nil},
		{"machine CPU per confirmed record, whole run (µs)", func(r *Result) float64 { return r.CPU.MachineUSPerRecord }, "%.1f", false, hasCPU},
		{"machine busy while publishing (% of all cores)", func(r *Result) float64 { return r.CPU.MachineBusyPct }, "%.0f", false, hasCPU},
		{"disk: mean write while publishing (ms)", func(r *Result) float64 { return r.Disk.MeanWriteMS }, "%.2f", false, hasDisk},
		{"disk: bytes written per confirmed record", func(r *Result) float64 { return r.Disk.BytesPerRecord }, "%.0f", false, hasDisk},
		{"write unavailability after the kill (ms)", func(r *Result) float64 { return float64(r.UnavailableMS) }, "%.0f", false, nil},
		{"lost confirmed records", func(r *Result) float64 { return float64(r.Verify.Lost + r.Verify.Moved) }, "%.0f", true, nil},
		{"duplicates", func(r *Result) float64 { return float64(r.Verify.Duplicates) }, "%.0f", true, nil},
		{"delivered then cut", func(r *Result) float64 { return float64(r.Verify.Cut) }, "%.0f", true, nil},
	}
	var b strings.Builder
	writeTableHead(&b, "figure (median of runs; each run in parentheses)", targets, func(t string) int { return len(results[t]) })
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s |", r.name)
		for _, t := range targets {
			var vals []float64
			for _, res := range results[t] {
				if r.has != nil && !r.has(res) {
					continue
				}
				vals = append(vals, r.get(res))
			}
			if len(vals) == 0 {
				b.WriteString(" – |")
				continue
			}
			all := make([]string, len(vals))
			for i, v := range vals {
				all[i] = fmt.Sprintf(r.unit, v)
			}
			agg, how := median(vals), ""
			if r.sum {
				agg, how = 0, "total "
				for _, v := range vals {
					agg += v
				}
			}
			fmt.Fprintf(&b, " %s"+r.unit+" (%s) |", how, agg, strings.Join(all, ", "))
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeTableHead writes the head of a markdown table of targets side by
// side: the first column's title, then each target with its run count.
func writeTableHead(b *strings.Builder, first string, targets []string, runs func(target string) int) {
	fmt.Fprintf(b, "| %s |", first)
	for _, t := range targets {
		fmt.Fprintf(b, " %s (%d runs) |", t, runs(t))
	}
	b.WriteString("\n|---|")
	for range targets {
		b.WriteString("---|")
	}
	b.WriteString("\n")
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
