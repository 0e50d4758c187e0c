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
)

const benchRecordSize = 256

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
			defer f.Close()
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

// BenchmarkAppendVsBare interleaves the two loops above in short rounds, so
// that a noisy machine (other processes, a shared disk) affects both alike;
// it reports both overall rates and the median of the per-round ratios.
func BenchmarkAppendVsBare(b *testing.B) {
	for _, n := range benchAppenders {
		b.Run(fmt.Sprintf("appenders=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			s := openTest(b, filepath.Join(dir, "store"), nil)
			c := mustCreate(b, s, "bench", 1)
			f, err := os.Create(filepath.Join(dir, "bare"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			rec := [][]byte{bytes.Repeat([]byte{'x'}, benchRecordSize)}
			buf := bytes.Repeat([]byte{'x'}, n*benchRecordSize)
			ctx := context.Background()
			const rounds = 20
			per := max(b.N/rounds, n)
			var appendTime, bareTime time.Duration
			var appended, bared int
			var ratios []float64
			b.ResetTimer()
			for range rounds {
				bare0, append0 := bareTime, appendTime
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
				bareTime += time.Since(start)

				var issued atomic.Int64
				var wg sync.WaitGroup
				start = time.Now()
				for range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for issued.Add(1) <= int64(per) {
							if _, err := c.Append(ctx, rec); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				appendTime += time.Since(start)
				appended += per
				ratios = append(ratios, (bareTime-bare0).Seconds()/(appendTime-append0).Seconds())
			}
			slices.Sort(ratios)
			b.StopTimer()
			ar, br := float64(appended)/appendTime.Seconds(), float64(bared)/bareTime.Seconds()
			b.ReportMetric(ar, "append-records/s")
			b.ReportMetric(br, "bare-records/s")
			b.ReportMetric(ratios[len(ratios)/2], "median-ratio")
		})
	}
}
