package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
)

// WriteText writes a person's summary of r.
func (r *Result) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "== %s: %d confirmed, %d publish errors over %.1fs\n", r.Target, r.Confirmed, r.Errors, r.End.Sub(r.Start).Seconds())
	row := func(name string, p Phase) {
		fmt.Fprintf(&b, "  %-12s %8d records %10.0f rec/s   p50 %7.2f ms   p99 %7.2f ms   p99.9 %7.2f ms\n",
			name, p.Records, p.PerSecond, p.P50MS, p.P99MS, p.P999MS)
	}
	if r.Victim != "" || r.KillError != "" {
		row("before kill", r.Before)
		row("after kill", r.AfterKill)
		fmt.Fprintf(&b, "  killed %s at %.1fs; write unavailability %d ms (kill to the first confirm of a publish begun after it)\n",
			r.Victim, float64(r.KilledAtMS)/1000, r.UnavailableMS)
		if r.KillError != "" {
			fmt.Fprintf(&b, "  kill failed: %s\n", r.KillError)
		}
	}
	row("whole run", r.Whole)
	if c := r.CPU; c != nil {
		fmt.Fprintf(&b, "  cpu while publishing: machine %.0f%% busy of %d cores (%.2f core-s), %.1f µs per confirmed record; this process %.2f core-s, %.1f µs per record\n",
			c.MachineBusyPct, c.Cores, c.MachineCoreSeconds, c.MachineUSPerRecord, c.BenchCoreSeconds, c.BenchUSPerRecord)
	}
	if d := r.Disk; d != nil {
		flush := "no flushes counted"
		if d.Flushes > 0 {
			flush = fmt.Sprintf("mean flush %.2f ms", d.MeanFlushMS)
		}
		fmt.Fprintf(&b, "  disk while publishing (%s): %.0f%% busy, mean write %.2f ms, %s, %.0f bytes written per confirmed record\n",
			d.Device, d.BusyPct, d.MeanWriteMS, flush, d.BytesPerRecord)
	}
	v := r.Verify
	verdict := "OK"
	if !v.OK {
		verdict = "FAILED"
	}
	fmt.Fprintf(&b, "  verification %s: %d delivered; lost confirmed %d, moved %d, duplicates %d, delivered-then-cut %d, delivered unconfirmed %d (at-least-once), malformed %d\n",
		verdict, v.Delivered, v.Lost, v.Moved, v.Duplicates, v.Cut, v.Unconfirmed, v.Malformed)
	keys := make([]string, 0, len(r.After))
	for k := range r.After {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "  %s: %v\n", k, r.After[k])
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes r as indented JSON.
func (r *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteSVG draws confirms per 100 ms as bars with the kill and the first
// confirm after it marked.
func (r *Result) WriteSVG(w io.Writer) error {
	const width, height, left, bottom, top = 900, 300, 50, 30, 20
	n := len(r.Buckets)
	if n == 0 {
		n = 1
	}
	peak := 1
	for _, c := range r.Buckets {
		peak = max(peak, c)
	}
	plotW, plotH := float64(width-left-10), float64(height-bottom-top)
	bw := plotW / float64(n)
	x := func(ms int64) float64 { return float64(left) + float64(ms)/100*bw }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="14">%s: confirms per 100 ms (peak %d)</text>`+"\n", left, r.Target, peak)
	for i, c := range r.Buckets {
		h := plotH * float64(c) / float64(peak)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#4a7bd0"/>`+"\n",
			float64(left)+float64(i)*bw, float64(top)+plotH-h, max(bw-0.5, 0.5), h)
	}
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%.0f" stroke="black"/>`+"\n", left, height-bottom, width-10, float64(height-bottom))
	for s := 0; s*10 <= n; s += max(1, n/100) {
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%ds</text>`+"\n", x(int64(s)*1000), height-bottom+14, s)
	}
	if r.Victim != "" {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#d03030" stroke-width="2"/>`+"\n", x(r.KilledAtMS), top, x(r.KilledAtMS), height-bottom)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#d03030">kill %s</text>`+"\n", x(r.KilledAtMS)+3, top+12, r.Victim)
		if r.FirstAfterMS > 0 {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#20a040" stroke-width="2" stroke-dasharray="4 2"/>`+"\n", x(r.FirstAfterMS), top, x(r.FirstAfterMS), height-bottom)
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#20a040">first confirm after kill (+%d ms)</text>`+"\n", x(r.FirstAfterMS)+3, top+26, r.UnavailableMS)
		}
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
