package streamlog

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

const benchRecordSize = 256

// benchRecords returns n records of benchRecordSize bytes, for one Append.
func benchRecords(n int) [][]byte {
	recs := make([][]byte, n)
	for i := range recs {
		recs[i] = bytes.Repeat([]byte{'x'}, benchRecordSize)
	}
	return recs
}

var benchAppenders = []int{1, 16, 256}

// BenchmarkAppendSynced measures synced append throughput of 256-byte
// records, one record per Append call, with 1, 16 and 256 concurrent
// appenders sharing group commits. Compare records/s with
// BenchmarkBareWriteFsync at the same batch size.
func BenchmarkAppendSynced(b *testing.B) {
	for _, n := range benchAppenders {
		b.Run(fmt.Sprintf("appenders=%d", n), func(b *testing.B) {
			s := openTest(b, b.TempDir(), nil)
			c := mustCreate(b, s, "bench", 1)
			rec := [][]byte{bytes.Repeat([]byte{'x'}, benchRecordSize)}
			ctx := context.Background()
			g0, r0 := s.stats.groups.Load(), s.stats.requests.Load()
			var issued atomic.Int64
			var wg sync.WaitGroup
			b.SetBytes(benchRecordSize)
			b.ResetTimer()
			start := time.Now()
			for range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for issued.Add(1) <= int64(b.N) {
						if _, err := c.Append(ctx, rec); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			groups, reqs := s.stats.groups.Load()-g0, s.stats.requests.Load()-r0
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
			if groups > 0 {
				b.ReportMetric(float64(reqs)/float64(groups), "records/group")
			}
		})
	}
}

// BenchmarkBareWriteFsync is the baseline: a loop that appends a batch of
// 256-byte records to a file and fsyncs it, on the same disk (the
// benchmark's temp dir), with batches as large as the appender counts of
// BenchmarkAppendSynced (the best case for its group commits).
func BenchmarkBareWriteFsync(b *testing.B) {
	for _, n := range benchAppenders {
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
			f, err := os.Create(filepath.Join(b.TempDir(), "bare"))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() {
				if err := f.Close(); err != nil {
					b.Error(err)
				}
			})
			buf := bytes.Repeat([]byte{'x'}, n*benchRecordSize)
			rounds := (b.N + n - 1) / n
			b.SetBytes(benchRecordSize)
			b.ResetTimer()
			start := time.Now()
			for range rounds {
				if _, err := f.Write(buf); err != nil {
					b.Fatal(err)
				}
				if err := f.Sync(); err != nil {
					b.Fatal(err)
				}
			}
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(rounds*n)/elapsed.Seconds(), "records/s")
		})
	}
}

// BenchmarkSealLatency measures Seal on a copy holding 64 MiB, and 1 GiB
// with BROOK_BENCH_BIG=1: a seal reads metadata only, so its latency does
// not depend on the log's size.
func BenchmarkSealLatency(b *testing.B) {
	for _, size := range []int64{64 << 20, 1 << 30} {
		b.Run(fmt.Sprintf("size=%dMiB", size>>20), func(b *testing.B) {
			if size > 64<<20 && os.Getenv("BROOK_BENCH_BIG") != "1" {
				b.Skip("set BROOK_BENCH_BIG=1 to fill a 1 GiB copy")
			}
			s := openTest(b, b.TempDir(), nil)
			c := mustCreate(b, s, "big", 1)
			rec := bytes.Repeat([]byte{'y'}, 4096)
			batch := make([][]byte, 256) // 1 MiB per append
			for i := range batch {
				batch[i] = rec
			}
			for filled := int64(0); filled < size; filled += int64(len(batch) * len(rec)) {
				mustAppend(b, c, batch)
			}
			if err := c.BeginEpoch(1); err != nil {
				b.Fatal(err)
			}
			// Let the fill's flushes and compactions finish: they compete
			// for the disk's fsyncs and would bill the bigger copy for its
			// own background work, not for the seal.
			if err := s.db.Flush(); err != nil {
				b.Fatal(err)
			}
			for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				if m := s.db.Metrics(); m.Compact.NumInProgress == 0 && m.Flush.NumInProgress == 0 {
					break
				}
			}
			tail := c.Tails().Record
			b.ResetTimer()
			for i := range b.N {
				// Each seal is at a higher fence, so each one persists a
				// new seal (synced) without growing the metadata.
				st, err := c.Seal(uint64(i+2), 1)
				if err != nil || st.Tails.Record != tail {
					b.Fatalf("seal: %v %+v", err, st.Tails)
				}
			}
		})
	}
}

// BenchmarkAppendVsBare interleaves, in short rounds, four loops that each
// make records of 256 bytes durable in groups of up to N, so that a noisy
// machine affects them alike, and reports the median of the per-round
// ratios to the bare loop:
//
//   - bare: one goroutine writes N records to a file and fsyncs it (the
//     physical limit the issue measures against);
//   - append: N goroutines each append one record at a time to the store,
//     sharing group commits (median-ratio, the figure the goal is about);
//   - ideal: N goroutines each hand one record at a time to the smallest
//     in-process group commit over a plain file (idealCommitter): what any
//     store that answers synchronous callers in one process pays for
//     handing records between goroutines and waking the callers;
//   - pebble: one goroutine commits batches of N records straight to the
//     store's Pebble database with a synced commit, no callers at all:
//     what the engine's write path costs on its own;
//   - batched: one goroutine appends N records per Append call to another
//     copy, as the stream host's appender does with the publishes queued
//     for a copy: the store without the hand-off of one record per caller.
//
// So median-ratio is roughly ideal-ratio times what the store adds on top
// of it (append-vs-ideal), and pebble-ratio bounds the engine's share.
func BenchmarkAppendVsBare(b *testing.B) {
	for _, n := range benchAppenders {
		b.Run(fmt.Sprintf("appenders=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			s := openTest(b, filepath.Join(dir, "store"), nil)
			c := mustCreate(b, s, "bench", 1)
			cb := mustCreate(b, s, "batched", 2)
			f, err := os.Create(filepath.Join(dir, "bare"))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() {
				if err := f.Close(); err != nil {
					b.Error(err)
				}
			})
			ideal, err := newIdealCommitter(filepath.Join(dir, "ideal"))
			if err != nil {
				b.Fatal(err)
			}
			defer ideal.close()
			data := bytes.Repeat([]byte{'x'}, benchRecordSize)
			rec := [][]byte{data}
			buf := bytes.Repeat([]byte{'x'}, n*benchRecordSize)
			ctx := context.Background()
			const rounds = 20
			per := max(b.N/rounds, n)
			var appendTime, bareTime time.Duration
			var appended, bared int
			var ratios, idealRatios, pebbleRatios, batchedRatios, vsIdeal []float64
			many := make([][]byte, n)
			for i := range many {
				many[i] = data
			}
			// closedLoop runs n goroutines that each call one until per
			// calls were made in all, and returns how long that took.
			closedLoop := func(one func() error) time.Duration {
				var issued atomic.Int64
				var wg sync.WaitGroup
				start := time.Now()
				for range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for issued.Add(1) <= int64(per) {
							if err := one(); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				return time.Since(start)
			}
			pebbleOff := uint64(0)
			value := make([]byte, recordHeaderLen+benchRecordSize)
			b.ResetTimer()
			for range rounds {
				start := time.Now()
				for i := 0; i < per; i += n {
					if _, err := f.Write(buf); err != nil {
						b.Fatal(err)
					}
					if err := f.Sync(); err != nil {
						b.Fatal(err)
					}
					bared += n
				}
				bare := time.Since(start)
				bareTime += bare

				app := closedLoop(func() error { _, err := c.Append(ctx, rec); return err })
				appendTime += app
				appended += per

				idl := closedLoop(func() error { return ideal.append(data) })

				start = time.Now()
				for i := 0; i < per; i += n {
					batch := s.db.NewBatch()
					for range n {
						// A copy id no copy gets: the keys are the store's
						// record keys, written where no copy reads.
						_ = batch.Set(batchKey(1<<62, pebbleOff), value, nil)
						pebbleOff++
					}
					if err := batch.Commit(pebble.Sync); err != nil {
						b.Fatal(err)
					}
					_ = batch.Close()
				}
				peb := time.Since(start)

				start = time.Now()
				for i := 0; i < per; i += n {
					if _, err := cb.Append(ctx, many); err != nil {
						b.Fatal(err)
					}
				}
				bat := time.Since(start)

				ratios = append(ratios, bare.Seconds()/app.Seconds())
				idealRatios = append(idealRatios, bare.Seconds()/idl.Seconds())
				pebbleRatios = append(pebbleRatios, bare.Seconds()/peb.Seconds())
				batchedRatios = append(batchedRatios, bare.Seconds()/bat.Seconds())
				vsIdeal = append(vsIdeal, idl.Seconds()/app.Seconds())
			}
			b.StopTimer()
			ar, br := float64(appended)/appendTime.Seconds(), float64(bared)/bareTime.Seconds()
			b.ReportMetric(ar, "append-records/s")
			b.ReportMetric(br, "bare-records/s")
			b.ReportMetric(median(ratios), "median-ratio")
			b.ReportMetric(median(idealRatios), "ideal-ratio")
			b.ReportMetric(median(pebbleRatios), "pebble-ratio")
			b.ReportMetric(median(batchedRatios), "batched-ratio")
			b.ReportMetric(median(vsIdeal), "append-vs-ideal")
		})
	}
}

func median(xs []float64) float64 {
	xs = slices.Clone(xs)
	slices.Sort(xs)
	return xs[len(xs)/2]
}

// idealCommitter is the smallest in-process group commit, the yardstick of
// BenchmarkAppendVsBare: callers add a record and wait; one goroutine
// writes everything added since its last write with one write and one
// fsync, then wakes all of that group's callers with one channel close.
// Like the store it holds a group back (up to defaultHoldMax) until as many
// callers as the last group had are back. It has no engine, keys, offsets
// or digests, so what it loses against the bare loop is only the handing
// of records between goroutines and the waking of callers.
type idealCommitter struct {
	f    *os.File
	kick chan struct{}
	stop chan struct{}
	done chan struct{} // closed when run returns

	mu    sync.Mutex
	buf   []byte
	n     int
	want  int
	group chan struct{} // closed when the records added so far are durable
	err   error
}

func newIdealCommitter(path string) (*idealCommitter, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	ic := &idealCommitter{f: f, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}), want: 1, group: make(chan struct{})}
	go ic.run()
	return ic, nil
}

func (ic *idealCommitter) append(rec []byte) error {
	ic.mu.Lock()
	ic.buf = append(ic.buf, rec...)
	ic.n++
	g := ic.group
	if ic.n == 1 || ic.n >= ic.want {
		select {
		case ic.kick <- struct{}{}:
		default:
		}
	}
	ic.mu.Unlock()
	<-g
	ic.mu.Lock()
	defer ic.mu.Unlock()
	return ic.err
}

func (ic *idealCommitter) run() {
	defer close(ic.done)
	hold := 1
	var spare []byte
	for {
		ic.mu.Lock()
		var timer <-chan time.Time
		for ic.n < hold {
			ic.want = hold
			if ic.n > 0 && timer == nil {
				timer = time.After(defaultHoldMax)
			}
			ic.mu.Unlock()
			select {
			case <-ic.kick:
			case <-timer:
				hold = 1
			case <-ic.stop:
				return
			}
			ic.mu.Lock()
		}
		buf, n, g := ic.buf, ic.n, ic.group
		ic.buf, ic.n, ic.group = spare[:0], 0, make(chan struct{})
		ic.mu.Unlock()
		_, err := ic.f.Write(buf)
		if err == nil {
			err = ic.f.Sync()
		}
		if err != nil {
			ic.mu.Lock()
			ic.err = err
			ic.mu.Unlock()
		}
		close(g)
		spare, hold = buf, n
	}
}

func (ic *idealCommitter) close() {
	close(ic.stop)
	<-ic.done
	_ = ic.f.Close()
}

// BenchmarkAppendWrittenPipelined measures an owner's appender on its own:
// one goroutine writes batches of 64 records of 256 bytes with
// AppendWritten and keeps up to 6 written and not yet durable, waiting for
// the oldest when it has 6 (the stream host's appender and completer,
// maxWrittenAhead).
// With one copy and one writer, every group commit holds one or a few of
// its batches, so the rate shows how close the committer's fsyncs run to
// each other.
func BenchmarkAppendWrittenPipelined(b *testing.B) {
	const batch, ahead = 64, 6
	s := openTest(b, b.TempDir(), nil)
	c := mustCreate(b, s, "bench", 1)
	data := benchRecords(batch)
	ctx := context.Background()
	var queued []func(context.Context) error
	g0 := s.stats.groups.Load()
	b.SetBytes(batch * benchRecordSize)
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		if len(queued) == ahead {
			if err := queued[0](ctx); err != nil {
				b.Fatal(err)
			}
			queued = queued[1:]
		}
		_, durable, err := c.AppendWritten(ctx, data)
		if err != nil {
			b.Fatal(err)
		}
		queued = append(queued, durable)
	}
	for _, d := range queued {
		if err := d(ctx); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N*batch)/elapsed.Seconds(), "records/s")
	if groups := s.stats.groups.Load() - g0; groups > 0 {
		b.ReportMetric(float64(b.N)/float64(groups), "batches/group")
	}
}

// BenchmarkAppendBatches appends 256-byte records 80 to an Append (an
// owner's share of a client batch) from 3 appenders, synced, and reports
// the process's CPU per record: the store's cost per record, memtable,
// flushes and compactions included, at the rate of a busy stream.
func BenchmarkAppendBatches(b *testing.B) {
	s := openTest(b, b.TempDir(), nil)
	c := mustCreate(b, s, "bench", 1)
	batch := benchRecords(80)
	ctx := context.Background()
	calls := (b.N + len(batch) - 1) / len(batch)
	var wg sync.WaitGroup
	var mu sync.Mutex
	b.ResetTimer()
	cpu0 := cpuTime(b)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if calls == 0 {
					mu.Unlock()
					return
				}
				calls--
				mu.Unlock()
				if _, err := c.Append(ctx, batch); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64((cpuTime(b)-cpu0).Nanoseconds())/1000/float64(b.N), "cpu-µs/record")
}
