package bench

import (
	"fmt"
	"io"
	"strings"
)

// Workload is one publish workload of a peer comparison: Publishers
// publishers, each with Window publishes outstanding (1: synchronous).
type Workload struct {
	Publishers, Window int
}

// String is the workload as PUBLISHERSxWINDOW.
func (w Workload) String() string { return fmt.Sprintf("%dx%d", w.Publishers, w.Window) }

// Describe is the workload in words.
func (w Workload) Describe() string {
	pubs := "publishers"
	if w.Publishers == 1 {
		pubs = "publisher"
	}
	if w.Window == 1 {
		return fmt.Sprintf("%d synchronous %s", w.Publishers, pubs)
	}
	return fmt.Sprintf("%d %s x %d outstanding", w.Publishers, pubs, w.Window)
}

// WriteWorkloadSummary writes one markdown table of every workload: per
// target its median confirmed records/s and p50/p99 confirm latency before
// the kill, the machine's CPU per confirmed record (CPU; when every run
// has it), and, with two targets or more, the first's records/s over the
// fastest other's (named when there are more than two, e.g. JetStream's
// faster publish path). results[i] holds workload i's runs by target.
func WriteWorkloadSummary(w io.Writer, targets []string, wls []Workload, results []map[string][]*Result) error {
	var b strings.Builder
	b.WriteString("| workload |")
	for _, t := range targets {
		fmt.Fprintf(&b, " %s |", t)
	}
	if len(targets) >= 2 {
		b.WriteString(" ratio |")
	}
	b.WriteString("\n|---|")
	for range targets {
		b.WriteString("---|")
	}
	if len(targets) >= 2 {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for i, wl := range wls {
		fmt.Fprintf(&b, "| %s |", wl.Describe())
		rates := make([]float64, len(targets))
		for j, t := range targets {
			rs := results[i][t]
			if len(rs) == 0 {
				b.WriteString(" – |")
				continue
			}
			var rate, p50, p99, cpu []float64
			for _, r := range rs {
				rate = append(rate, r.Before.PerSecond)
				p50 = append(p50, r.Before.P50MS)
				p99 = append(p99, r.Before.P99MS)
				if r.CPU != nil {
					cpu = append(cpu, r.CPU.MachineUSPerRecord)
				}
			}
			rates[j] = median(rate)
			fmt.Fprintf(&b, " %.0f rec/s, p50 %.2f ms, p99 %.2f ms", rates[j], median(p50), median(p99))
			if len(cpu) == len(rs) {
				fmt.Fprintf(&b, ", %.0f µs CPU/rec", median(cpu))
			}
			b.WriteString(" |")
		}
		if len(targets) >= 2 {
			best := 1
			for j := 2; j < len(targets); j++ {
				if rates[j] > rates[best] {
					best = j
				}
			}
			switch {
			case rates[best] <= 0:
				b.WriteString(" – |")
			case len(targets) == 2:
				fmt.Fprintf(&b, " %.2f |", rates[0]/rates[best])
			default:
				fmt.Fprintf(&b, " %.2f (vs %s) |", rates[0]/rates[best], targets[best])
			}
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
