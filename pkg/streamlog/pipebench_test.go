package streamlog

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkAppendStaggered measures synced appends of batches of 32
// records by appenders that come back after a random pause (up to
// twice pause) instead of at once, as an owner's client batches and a
// follower's replicated ones arrive: spread over the fsync before them
// rather than all together behind it. It reports records/s and the mean
// latency of an append.
func BenchmarkAppendStaggered(b *testing.B) {
	for _, appenders := range []int{4, 16} {
		for _, pause := range []time.Duration{250 * time.Microsecond, time.Millisecond} {
			b.Run(fmt.Sprintf("appenders=%d/pause=%v", appenders, pause), func(b *testing.B) {
				s := openTest(b, b.TempDir(), nil)
				c := mustCreate(b, s, "bench", 1)
				batch := benchRecords(32)
				ctx := context.Background()
				var issued, latency atomic.Int64
				var wg sync.WaitGroup
				b.SetBytes(int64(len(batch) * benchRecordSize))
				b.ResetTimer()
				start := time.Now()
				for range appenders {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for issued.Add(1) <= int64(b.N) {
							t := time.Now()
							if _, err := c.Append(ctx, batch); err != nil {
								b.Error(err)
								return
							}
							latency.Add(int64(time.Since(t)))
							time.Sleep(time.Duration(rand.Int64N(int64(2 * pause))))
						}
					}()
				}
				wg.Wait()
				elapsed := time.Since(start)
				b.StopTimer()
				b.ReportMetric(float64(b.N*len(batch))/elapsed.Seconds(), "records/s")
				b.ReportMetric(float64(latency.Load())/float64(b.N)/1e6, "ms/append")
			})
		}
	}
}
