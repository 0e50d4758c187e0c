package streamlog

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/brook-streams/brook/pkg/wire"
)

// BenchmarkDeleteConcurrent measures deletes of distinct copies by 1 and
// 16 concurrent deleters (a mass recovery deletes in bulk, issue 17): with
// the copy-set lock held across each delete's fsync they took one fsync
// each in turn; without it, concurrent deletes can share fsyncs. The
// copies are created (and the store's WAL synced) outside the timer.
func BenchmarkDeleteConcurrent(b *testing.B) {
	for _, deleters := range []int{1, 16} {
		b.Run(fmt.Sprintf("deleters=%d", deleters), func(b *testing.B) {
			s := openTest(b, b.TempDir(), nil)
			// run calls op for every copy, from workers goroutines.
			run := func(workers int, op func(i int) error) {
				var wg sync.WaitGroup
				var next atomic.Int64
				for range workers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := next.Add(1) - 1; i < int64(b.N); i = next.Add(1) - 1 {
							if err := op(int(i)); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
			}
			name := func(i int) string { return fmt.Sprintf("s%07d", i) }
			run(16, func(i int) error {
				_, err := s.Create(name(i), uint64(i+1), wire.Retention{})
				return err
			})
			b.ResetTimer()
			run(deleters, func(i int) error { return s.Delete(name(i)) })
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "deletes/s")
		})
	}
}
