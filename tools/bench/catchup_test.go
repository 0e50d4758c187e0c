package bench

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// memCatchUp is an in-memory CatchUpTarget whose stream starts at offset
// first; corrupt, if set, changes what a reader is given.
type memCatchUp struct {
	first   uint64
	records [][]byte
	corrupt func(off uint64, data []byte) (uint64, []byte, bool) // false: skip the record
}

func (m *memCatchUp) Name() string      { return "mem" }
func (m *memCatchUp) Readers() []string { return []string{"one", "two"} }

func (m *memCatchUp) CheckReader(r string) error {
	if r != "one" && r != "two" {
		return errors.New("no such reader")
	}
	return nil
}

func (m *memCatchUp) Fill(ctx context.Context, n, window int, data func(int) []byte, confirmed func(int, uint64)) error {
	// Confirmed out of order, as an async publisher's retries may be.
	order := make([]int, n)
	for i := range order {
		order[i] = n - 1 - i
	}
	m.records = make([][]byte, n)
	return FillAsync(ctx, n, window, func(k int) (func() (uint64, error), error) {
		i := order[k]
		m.records[k] = data(i)
		return func() (uint64, error) {
			if k == 3 {
				return 0, errors.New("lost the reply")
			}
			return m.first + uint64(k), nil
		}, nil
	}, func(k int) (uint64, error) { return m.first + uint64(k), nil }, func(k int, off uint64) { confirmed(order[k], off) })
}

func (m *memCatchUp) CatchUp(_ context.Context, _ string, n int, fn func(uint64, []byte)) error {
	for k, d := range m.records[:n] {
		off := m.first + uint64(k)
		if m.corrupt != nil {
			var ok bool
			if off, d, ok = m.corrupt(off, d); !ok {
				continue
			}
		}
		fn(off, d)
	}
	return nil
}

func TestRunCatchUpVerifies(t *testing.T) {
	ctx := context.Background()
	cfg := CatchUpConfig{Records: 50, RecordSize: 64, Window: 4}
	res, err := RunCatchUp(ctx, &memCatchUp{first: 1}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Reads) != 2 || !res.Reads[0].OK || !res.Reads[1].OK || res.Best() == nil {
		t.Fatalf("reads %+v", res.Reads)
	}
	for name, bad := range map[string]func(uint64, []byte) (uint64, []byte, bool){
		"a missing record": func(off uint64, d []byte) (uint64, []byte, bool) { return off, d, off != 7 },
		"another record's contents": func(off uint64, d []byte) (uint64, []byte, bool) {
			if off == 9 {
				d = encodeRecord(recordID{seq: 1}, 64)
			}
			return off, d, true
		},
		"a changed byte": func(off uint64, d []byte) (uint64, []byte, bool) {
			if off == 9 {
				d = slices.Clone(d)
				d[40]++
			}
			return off, d, true
		},
		"an offset out of order": func(off uint64, d []byte) (uint64, []byte, bool) {
			if off == 9 {
				off = 11
			}
			return off, d, true
		},
	} {
		res, err := RunCatchUp(ctx, &memCatchUp{first: 1, corrupt: bad}, CatchUpConfig{Records: 50, RecordSize: 64, Window: 4, Readers: []string{"two"}})
		if err == nil || len(res.Reads) != 1 || res.Reads[0].OK || res.Best() != nil {
			t.Errorf("%s: not caught (err %v, reads %+v)", name, err, res.Reads)
		}
	}
	if _, err := RunCatchUp(ctx, &memCatchUp{}, CatchUpConfig{Records: 5, Window: 1, Readers: []string{"three"}}); err == nil {
		t.Error("a reader the target does not offer was accepted")
	}
}

func TestWriteCatchUpComparison(t *testing.T) {
	mk := func(target string, rates ...float64) *CatchUpResult {
		r := &CatchUpResult{Target: target, Records: 1000, RecordSize: 256, FillSecs: 1, FillPerSec: 1000}
		for i, v := range rates {
			r.Reads = append(r.Reads, CatchUpRead{Reader: []string{"a", "b"}[i], PerSecond: v, MBPerSec: v * 256 / 1e6, OK: v > 0})
		}
		return r
	}
	var b strings.Builder
	err := WriteCatchUpComparison(&b, []string{"brook", "jetstream"}, map[string][]*CatchUpResult{
		"brook":     {mk("brook", 400000, 300000), mk("brook", 200000, 100000), mk("brook", 300000, 0)},
		"jetstream": {mk("jetstream", 100000), mk("jetstream", 50000), mk("jetstream", 100000)},
	})
	if err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"| read a: records/s; MB/s | 300000 (400000, 200000, 300000); 76.8 (102.4, 51.2, 76.8) | |",
		"| read b: records/s; MB/s | 200000 (300000, 100000); 51.2 (76.8, 25.6); 1 runs FAILED verification | |",
		"| fastest verified reader: records/s | 300000 (400000, 200000, 300000) | 100000 (100000, 50000, 100000) |",
		"| brook's fastest reader ÷ this target's, per run; of the medians | | 4.00, 4.00, 3.00; **3.00** |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}

// A process's CPU time is read from /proc: this one's grows as it works,
// and an unknown process counts nothing.
func TestProcessesCPU(t *testing.T) {
	before := processesCPU([]int{os.Getpid()})
	for x, end := 0, time.Now().Add(100*time.Millisecond); time.Now().Before(end); x++ {
		_ = x * x
	}
	if after := processesCPU([]int{os.Getpid()}); after <= before {
		t.Fatalf("CPU time %v after working, %v before", after, before)
	}
	if got := processesCPU([]int{1 << 30}); got != 0 {
		t.Fatalf("a process that does not exist spent %v", got)
	}
}
