package bench

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// CatchUpTarget is a system under test for the catch-up read: its stream
// is filled with records as fast as it confirms them, then one reader
// reads them all from the start of the stream.
type CatchUpTarget interface {
	// Name is shown in reports ("brook", "jetstream").
	Name() string
	// Fill publishes data(i) for every i in [0, n) on the empty stream
	// with the same promise as Publish (confirmed once durable on a
	// majority), with up to window publishes outstanding, and calls
	// confirmed(i, offset) once for each record it confirms, from any
	// goroutine. It returns once every record is confirmed.
	Fill(ctx context.Context, n, window int, data func(i int) []byte, confirmed func(i int, offset uint64)) error
	// Readers lists the reader settings read by default.
	Readers() []string
	// CheckReader says whether CatchUp takes the reader setting (any
	// setting of the target's syntax, not only the default ones).
	CheckReader(reader string) error
	// CatchUp reads the stream from its first record with one reader of
	// the given setting and delivers the first n records in order. The
	// data slice is valid only during fn.
	CatchUp(ctx context.Context, reader string, n int, fn func(offset uint64, data []byte)) error
}

// ServerProcesses is implemented by a catch-up target whose servers run
// as processes of their own (not in the bench's): the CPU time they spend
// while a reader catches up is counted per record read, beside the
// bench process's own.
type ServerProcesses interface {
	ServerPIDs() []int
}

// CatchUpConfig is the catch-up workload.
type CatchUpConfig struct {
	Records    int // how many records the stream is filled with (and read back)
	RecordSize int
	Window     int // outstanding publishes while filling
	// Readers are the reader settings read (nil: the target's default
	// ones). A setting the target does not take is an error.
	Readers []string
	Logger  *slog.Logger
	// Progress, if set, is told how many records are confirmed (filling)
	// or read (reading) about once a second.
	Progress func(phase string, done int)
}

// CatchUpResult is one run of the catch-up workload against one target.
type CatchUpResult struct {
	Target     string        `json:"target"`
	Records    int           `json:"records"`
	RecordSize int           `json:"record_size"`
	FillSecs   float64       `json:"fill_s"`
	FillPerSec float64       `json:"fill_records_per_s"`
	Reads      []CatchUpRead `json:"reads"`
}

// CatchUpRead is one reader setting's catch-up of the whole stream.
type CatchUpRead struct {
	Reader    string  `json:"reader"`
	Secs      float64 `json:"s"`
	PerSecond float64 `json:"records_per_s"`
	MBPerSec  float64 `json:"mb_per_s"` // payload megabytes (10^6 bytes) per second
	// ServerCPUus and BenchCPUus are the CPU time (user and system) the
	// target's server processes (ServerProcesses) and the bench's own
	// process (the reader's client, and whatever else the target runs in
	// it) spent over the read, in microseconds per record read.
	ServerCPUus float64 `json:"server_cpu_us_per_record,omitempty"`
	BenchCPUus  float64 `json:"bench_cpu_us_per_record,omitempty"`
	// OK: every record was delivered once, in offset order, with the
	// contents confirmed at that offset.
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// Best is the fastest verified read (nil if none verified).
func (r *CatchUpResult) Best() *CatchUpRead {
	var best *CatchUpRead
	for i := range r.Reads {
		x := &r.Reads[i]
		if x.OK && (best == nil || x.PerSecond > best.PerSecond) {
			best = x
		}
	}
	return best
}

// FillAsync is the loop of a Fill: it starts the publish of every record
// i in [0, n) in order with send, which may block while the publisher's
// window is full and returns a wait for the record's confirm (its
// offset), and waits for the confirms in order in another goroutine, up to
// window of them behind the publishes. A record whose publish fails, at
// send or at its wait, is published again with again (synchronously,
// with the same id, so that the system's deduplication keeps it once).
// confirmed is called once per confirmed record.
func FillAsync(ctx context.Context, n, window int, send func(i int) (wait func() (uint64, error), err error),
	again func(i int) (uint64, error), confirmed func(i int, offset uint64)) error {
	type sent struct {
		i    int
		wait func() (uint64, error)
	}
	waits := make(chan sent, window)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		failure error
	)
	settle := func(i int, off uint64, err error) {
		if err != nil && ctx.Err() == nil {
			off, err = again(i)
		}
		if err != nil {
			mu.Lock()
			failure = errors.Join(failure, fmt.Errorf("record %d: %w", i, err))
			mu.Unlock()
			return
		}
		confirmed(i, off)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for s := range waits {
			off, err := s.wait()
			settle(s.i, off, err)
		}
	}()
	for i := 0; i < n && ctx.Err() == nil; i++ {
		wait, err := send(i)
		if err != nil {
			settle(i, 0, err)
			continue
		}
		waits <- sent{i: i, wait: wait}
	}
	close(waits)
	wg.Wait()
	if failure != nil {
		return failure
	}
	return ctx.Err()
}

// catchUpExpect is what the fill confirmed: which record each offset holds.
type catchUpExpect struct {
	first uint64 // the lowest confirmed offset
	ids   []int  // ids[off-first] = the record index confirmed at off
	sum   uint32 // CRC-32C of every record's data in offset order
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// RunCatchUp fills t's stream with cfg.Records records and times one
// reader of each setting reading all of them from the start. Every read
// is verified: the records arrive at consecutive offsets from the first
// confirmed one, each holding the record confirmed there, and the CRC of
// their contents in order matches the fill's.
func RunCatchUp(ctx context.Context, t CatchUpTarget, cfg CatchUpConfig) (*CatchUpResult, error) {
	if cfg.Records < 1 || cfg.Window < 1 {
		return nil, errors.New("bench: catch-up records and window must be positive")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	readers := cfg.Readers
	if len(readers) == 0 {
		readers = t.Readers()
	}
	for _, r := range readers {
		if err := t.CheckReader(r); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
	}
	res := &CatchUpResult{Target: t.Name(), Records: cfg.Records, RecordSize: cfg.RecordSize}
	size := max(cfg.RecordSize, idLen)
	data := func(i int) []byte { return encodeRecord(recordID{seq: uint64(i)}, size) }

	offsets := make([]uint64, cfg.Records)
	seen := make([]bool, cfg.Records)
	var mu sync.Mutex
	var confirmedN atomic.Int64
	var twice int
	stop := progressEvery(cfg.Progress, "fill", &confirmedN)
	began := time.Now()
	err := t.Fill(ctx, cfg.Records, cfg.Window, data, func(i int, off uint64) {
		mu.Lock()
		if seen[i] {
			twice++
		}
		seen[i], offsets[i] = true, off
		mu.Unlock()
		confirmedN.Add(1)
	})
	stop()
	res.FillSecs = time.Since(began).Seconds()
	res.FillPerSec = float64(cfg.Records) / res.FillSecs
	if err != nil {
		return res, fmt.Errorf("bench: fill %s: %w", t.Name(), err)
	}
	exp, err := expectFromFill(offsets, seen, twice, data)
	if err != nil {
		return res, fmt.Errorf("bench: fill %s: %w", t.Name(), err)
	}
	log.Info("filled", "target", t.Name(), "records", cfg.Records, "s", res.FillSecs, "records_per_s", int(res.FillPerSec))

	var failed error
	for _, r := range readers {
		read, err := timeCatchUp(ctx, t, r, exp, size, cfg.Progress)
		res.Reads = append(res.Reads, read)
		log.Info("caught up", "target", t.Name(), "reader", r, "s", read.Secs, "records_per_s", int(read.PerSecond),
			"mb_per_s", read.MBPerSec, "ok", read.OK, "err", read.Error)
		if err != nil {
			failed = errors.Join(failed, err)
			if ctx.Err() != nil {
				break
			}
		}
	}
	return res, failed
}

// expectFromFill checks that the fill confirmed every record once at
// offsets that form one run, and computes what a reader must see.
func expectFromFill(offsets []uint64, seen []bool, twice int, data func(int) []byte) (*catchUpExpect, error) {
	n := len(offsets)
	if twice > 0 {
		return nil, fmt.Errorf("%d records confirmed twice", twice)
	}
	first := offsets[0]
	for i, off := range offsets {
		if !seen[i] {
			return nil, fmt.Errorf("record %d was never confirmed", i)
		}
		first = min(first, off)
	}
	exp := &catchUpExpect{first: first, ids: make([]int, n)}
	for i := range exp.ids {
		exp.ids[i] = -1
	}
	for i, off := range offsets {
		k := off - first
		if k >= uint64(n) || exp.ids[k] >= 0 {
			return nil, fmt.Errorf("record %d confirmed at offset %d: the %d records' offsets are not one run from %d", i, off, n, first)
		}
		exp.ids[k] = i
	}
	for _, id := range exp.ids {
		exp.sum = crc32.Update(exp.sum, castagnoli, data(id))
	}
	return exp, nil
}

// timeCatchUp times one reader of setting r reading every record and
// verifies what it delivered.
func timeCatchUp(ctx context.Context, t CatchUpTarget, r string, exp *catchUpExpect, size int, progress func(string, int)) (CatchUpRead, error) {
	read := CatchUpRead{Reader: r}
	n := len(exp.ids)
	var (
		got     atomic.Int64
		sum     uint32
		bad     error
		badSeen int
	)
	next := exp.first
	stop := progressEvery(progress, "read "+r, &got)
	var pids []int
	if sp, ok := t.(ServerProcesses); ok {
		pids = sp.ServerPIDs()
	}
	serverCPU, benchCPU := processesCPU(pids), selfCPU()
	began := time.Now()
	err := t.CatchUp(ctx, r, n, func(off uint64, data []byte) {
		k := int(got.Load())
		if bad == nil {
			id, ok := decodeRecord(data)
			switch {
			case off != next:
				bad = fmt.Errorf("record %d of the read at offset %d, want %d", k, off, next)
			case k >= n:
				bad = fmt.Errorf("more than the %d records asked for", n)
			case !ok || len(data) != size || id.seq != uint64(exp.ids[k]):
				bad = fmt.Errorf("offset %d holds %d bytes naming record %d, want %d bytes of record %d", off, len(data), id.seq, size, exp.ids[k])
			}
		}
		if bad != nil {
			badSeen++
		}
		sum = crc32.Update(sum, castagnoli, data)
		next = off + 1
		got.Add(1)
	})
	took := time.Since(began)
	serverCPU, benchCPU = processesCPU(pids)-serverCPU, selfCPU()-benchCPU
	stop()
	read.Secs = took.Seconds()
	delivered := int(got.Load())
	if delivered > 0 {
		if len(pids) > 0 {
			read.ServerCPUus = float64(serverCPU.Microseconds()) / float64(delivered)
		}
		read.BenchCPUus = float64(benchCPU.Microseconds()) / float64(delivered)
	}
	read.PerSecond = float64(delivered) / read.Secs
	read.MBPerSec = float64(delivered) * float64(size) / read.Secs / 1e6
	switch {
	case err != nil:
		err = fmt.Errorf("bench: %s reader %s: %w", t.Name(), r, err)
	case bad != nil:
		err = fmt.Errorf("bench: %s reader %s: %w (%d bad records)", t.Name(), r, bad, badSeen)
	case delivered != n:
		err = fmt.Errorf("bench: %s reader %s: delivered %d records, want %d", t.Name(), r, delivered, n)
	case sum != exp.sum:
		err = fmt.Errorf("bench: %s reader %s: CRC of the contents %08x, want %08x", t.Name(), r, sum, exp.sum)
	}
	if err != nil {
		read.Error = err.Error()
		return read, err
	}
	read.OK = true
	return read, nil
}

// selfCPU is the bench process's user and system CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// clockTicks is the unit of /proc/<pid>/stat's CPU times (USER_HZ, 100 on
// Linux).
const clockTicks = 100

// processesCPU is the user and system CPU time the processes pids spent so
// far, from /proc/<pid>/stat (0 for one that cannot be read).
func processesCPU(pids []int) time.Duration {
	var total time.Duration
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// The fields after the command name, which is in parentheses and
		// may hold spaces: state is field 3, utime and stime fields 14
		// and 15.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 13 {
			continue
		}
		ut, err1 := strconv.ParseInt(f[11], 10, 64)
		st, err2 := strconv.ParseInt(f[12], 10, 64)
		if err1 == nil && err2 == nil {
			total += time.Duration(ut+st) * time.Second / clockTicks
		}
	}
	return total
}

// progressEvery reports *n under phase about once a second until the
// returned stop is called.
func progressEvery(progress func(string, int), phase string, n *atomic.Int64) (stop func()) {
	if progress == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				progress(phase, int(n.Load()))
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// WriteCatchUpComparison writes a markdown table of the catch-up runs:
// per target, the fill rate and each reader setting's records/s and MB/s
// (medians of the runs, each run in parentheses), the fastest setting,
// and the ratio of the first target's fastest reader to each other's,
// per run (runs alternate, so run i of each target met the same machine)
// and of the medians.
func WriteCatchUpComparison(w io.Writer, targets []string, results map[string][]*CatchUpResult) error {
	var b strings.Builder
	n, size := 0, 0
	for _, t := range targets {
		for _, r := range results[t] {
			n, size = r.Records, r.RecordSize
		}
	}
	fmt.Fprintf(&b, "catch-up of %d records of %d bytes (median of runs; each run in parentheses)\n\n", n, size)
	writeTableHead(&b, "figure", targets, func(t string) int { return len(results[t]) })
	cell := func(vals []float64, unit string) string {
		if len(vals) == 0 {
			return " – |"
		}
		all := make([]string, len(vals))
		for i, v := range vals {
			all[i] = fmt.Sprintf(unit, v)
		}
		return fmt.Sprintf(" "+unit+" (%s) |", median(vals), strings.Join(all, ", "))
	}
	row := func(name string, get func(*CatchUpResult) (float64, bool), unit string) {
		fmt.Fprintf(&b, "| %s |", name)
		for _, t := range targets {
			var vals []float64
			for _, r := range results[t] {
				if v, ok := get(r); ok {
					vals = append(vals, v)
				}
			}
			b.WriteString(cell(vals, unit))
		}
		b.WriteString("\n")
	}
	row("fill: confirmed records/s", func(r *CatchUpResult) (float64, bool) { return r.FillPerSec, r.FillSecs > 0 }, "%.0f")
	// Every reader setting any target read, in the order first seen.
	var names []string
	for _, t := range targets {
		for _, r := range results[t] {
			for _, x := range r.Reads {
				if !containsString(names, t+"\x00"+x.Reader) {
					names = append(names, t+"\x00"+x.Reader)
				}
			}
		}
	}
	readOf := func(r *CatchUpResult, reader string) *CatchUpRead {
		for i := range r.Reads {
			if r.Reads[i].Reader == reader {
				return &r.Reads[i]
			}
		}
		return nil
	}
	for _, tn := range names {
		target, reader, _ := strings.Cut(tn, "\x00")
		fmt.Fprintf(&b, "| read %s: records/s; MB/s |", reader)
		for _, t := range targets {
			if t != target {
				b.WriteString(" |")
				continue
			}
			var rate, mb []float64
			fails := 0
			for _, r := range results[t] {
				x := readOf(r, reader)
				switch {
				case x == nil:
				case !x.OK:
					fails++
				default:
					rate, mb = append(rate, x.PerSecond), append(mb, x.MBPerSec)
				}
			}
			c := strings.TrimSuffix(cell(rate, "%.0f"), " |") + "; " + strings.TrimPrefix(cell(mb, "%.1f"), " ")
			if fails > 0 {
				c = strings.TrimSuffix(c, " |") + fmt.Sprintf("; %d runs FAILED verification |", fails)
			}
			b.WriteString(c)
		}
		b.WriteString("\n")
	}
	row("fastest verified reader: records/s", func(r *CatchUpResult) (float64, bool) {
		if x := r.Best(); x != nil {
			return x.PerSecond, true
		}
		return 0, false
	}, "%.0f")
	row("fastest verified reader: MB/s", func(r *CatchUpResult) (float64, bool) {
		if x := r.Best(); x != nil {
			return x.MBPerSec, true
		}
		return 0, false
	}, "%.1f")
	row("fastest verified reader: CPU µs per record, server processes", func(r *CatchUpResult) (float64, bool) {
		if x := r.Best(); x != nil && x.ServerCPUus > 0 {
			return x.ServerCPUus, true
		}
		return 0, false
	}, "%.2f")
	row("fastest verified reader: CPU µs per record, bench process", func(r *CatchUpResult) (float64, bool) {
		if x := r.Best(); x != nil {
			return x.BenchCPUus, true
		}
		return 0, false
	}, "%.2f")
	fmt.Fprintf(&b, "| fastest reader (per run) |")
	for _, t := range targets {
		var all []string
		for _, r := range results[t] {
			if x := r.Best(); x != nil {
				all = append(all, x.Reader)
			} else {
				all = append(all, "none verified")
			}
		}
		fmt.Fprintf(&b, " %s |", strings.Join(all, ", "))
	}
	b.WriteString("\n")
	if len(targets) > 1 {
		base := targets[0]
		fmt.Fprintf(&b, "| %s's fastest reader ÷ this target's, per run; of the medians |", base)
		for _, t := range targets {
			if t == base {
				b.WriteString(" |")
				continue
			}
			var ratios []string
			var bv, tv []float64
			for i, r := range results[t] {
				x := r.Best()
				if x != nil {
					tv = append(tv, x.PerSecond)
				}
				if i >= len(results[base]) {
					continue
				}
				y := results[base][i].Best()
				if y != nil {
					bv = append(bv, y.PerSecond)
				}
				if x != nil && y != nil {
					ratios = append(ratios, fmt.Sprintf("%.2f", y.PerSecond/x.PerSecond))
				}
			}
			if len(bv) == 0 || len(tv) == 0 {
				b.WriteString(" – |")
				continue
			}
			fmt.Fprintf(&b, " %s; **%.2f** |", strings.Join(ratios, ", "), median(bv)/median(tv))
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteText writes a person's summary of r.
func (r *CatchUpResult) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "== %s catch-up: %d records of %d bytes filled in %.1fs (%.0f confirmed/s)\n",
		r.Target, r.Records, r.RecordSize, r.FillSecs, r.FillPerSec)
	for _, x := range r.Reads {
		verdict := "OK"
		if !x.OK {
			verdict = "FAILED: " + x.Error
		}
		fmt.Fprintf(&b, "  read %-22s %7.2fs %10.0f rec/s %8.1f MB/s   CPU/record %5.2f µs servers, %5.2f µs bench   verification %s\n",
			x.Reader, x.Secs, x.PerSecond, x.MBPerSec, x.ServerCPUus, x.BenchCPUus, verdict)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
