package streamlog

import (
	"bytes"
	"context"
	"sync"
	"syscall"
	"testing"
	"time"
)

// processCPU is the process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

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
	cpu0 := processCPU()
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
	b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/1000/float64(b.N), "cpu-µs/record")
}
