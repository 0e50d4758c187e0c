package streamlog

import (
	"bytes"
	"context"
	"sync"
	"testing"
)

// BenchmarkAppendBatches appends 256-byte records 80 to an Append (an
// owner's share of a client batch) from 3 appenders, synced, and reports
// the process's CPU per record: the store's cost per record, memtable,
// flushes and compactions included, at the rate of a busy stream.
func BenchmarkAppendBatches(b *testing.B) {
	s := openTest(b, b.TempDir(), nil)
	c := mustCreate(b, s, "bench", 1)
	batch := make([][]byte, 80)
	for i := range batch {
		batch[i] = bytes.Repeat([]byte{'x'}, benchRecordSize)
	}
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
