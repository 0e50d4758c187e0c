package streamlog

import (
	"fmt"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's user and system CPU time so far: on a shared
// machine it measures the work a benchmark did better than its wall time.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// patterned returns n records of size bytes, each a different pattern.
func patterned(n, size int) [][]byte {
	data := make([][]byte, n)
	for i := range data {
		data[i] = make([]byte, size)
		for j := range data[i] {
			data[i][j] = byte(i + j)
		}
	}
	return data
}

// BenchmarkReadCatchUp reads a copy of 200,000 records of 256 bytes from
// its head in fetch-sized batches of 10,000, as an owner serves a reader
// catching up, once with Read (a copy of every record) and once with
// ReadFunc (visiting the store's bytes). The records are flushed to
// tables first, so the reads load their blocks as a cold catch-up does.
// cpu-ns/record is the process's CPU time (all threads) per record.
//
//	go test -run '^$' -bench ReadCatchUp ./streamlog/
func BenchmarkReadCatchUp(b *testing.B) {
	const n, batch, size = 200_000, 10_000, 256
	s := openTest(b, b.TempDir(), nil)
	c := mustCreate(b, s, "catchup", 1)
	data := patterned(1000, size)
	for i := 0; i < n; i += len(data) {
		mustAppend(b, c, data)
	}
	if err := s.db.Flush(); err != nil {
		b.Fatal(err)
	}
	readAllIn := func(b *testing.B, read func(from uint64) int) {
		b.SetBytes(n * size)
		cpu := cpuTime(b)
		for b.Loop() {
			for from := uint64(0); from < n; {
				k := read(from)
				if k == 0 {
					b.Fatalf("nothing read at %d", from)
				}
				from += uint64(k)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/record")
		b.ReportMetric(float64((cpuTime(b)-cpu).Nanoseconds())/float64(b.N)/n, "cpu-ns/record")
	}
	b.Run("Read", func(b *testing.B) {
		readAllIn(b, func(from uint64) int {
			recs, err := c.Read(from, batch, 8<<20, n)
			if err != nil {
				b.Fatal(err)
			}
			return len(recs)
		})
	})
	b.Run("ReadFunc", func(b *testing.B) {
		sum := 0
		readAllIn(b, func(from uint64) int {
			k, err := c.ReadFunc(from, batch, 8<<20, n, func(_ uint64, _ int64, d []byte) error {
				sum += len(d)
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			return k
		})
	})
}

// BenchmarkReadTail reads the last 100 records of a copy, as an owner
// serves a reader that follows the tail: the records are in the memtable,
// the copy's older records (and every other copy's, as on a host) in the
// tables of earlier flushes. cpu-ns/read is the process's CPU per read.
//
//	go test -run '^$' -bench ReadTail ./streamlog/
func BenchmarkReadTail(b *testing.B) {
	const copies, flushes, perFlush, size, tail = 4, 12, 4000, 256, 100
	s := openTest(b, b.TempDir(), nil)
	cs := make([]*Copy, copies)
	for i := range cs {
		cs[i] = mustCreate(b, s, fmt.Sprintf("tail-%d", i), uint64(i+1))
	}
	data := patterned(100, size)
	for f := 0; f < flushes; f++ {
		for i := 0; i < perFlush; i += len(data) {
			for _, c := range cs {
				mustAppend(b, c, data)
			}
		}
		if err := s.db.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	c := cs[0]
	from := mustAppend(b, c, data)
	time.Sleep(time.Second) // let compactions the flushes started finish
	b.Logf("L0 files %d, tables %d", s.db.Metrics().Levels[0].TablesCount, s.db.Metrics().Total().TablesCount)
	cpu := cpuTime(b)
	sum := 0
	for b.Loop() {
		k, err := c.ReadFunc(from, tail, 8<<20, from+tail, func(_ uint64, _ int64, d []byte) error {
			sum += len(d)
			return nil
		})
		if err != nil || k != tail {
			b.Fatalf("read %d records: %v", k, err)
		}
	}
	b.ReportMetric(float64((cpuTime(b)-cpu).Nanoseconds())/float64(b.N), "cpu-ns/read")
}
