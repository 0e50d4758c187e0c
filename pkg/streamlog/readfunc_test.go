package streamlog

import (
	"errors"
	"slices"
	"testing"
)

// ReadFunc visits what Read returns, bound for bound, and stops at the
// first error of its visitor.
func TestReadFuncVisitsWhatReadReturns(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	c := mustCreate(t, s, "orders", 7)
	mustAppend(t, c, payloads("a", 0, 8))
	for _, q := range []struct {
		from             uint64
		maxRecords, maxB int
		below            uint64
	}{{2, 3, 0, 100}, {0, 0, 17, 100}, {0, 0, 1, 100}, {5, 0, 0, 6}, {8, 0, 0, 100}, {0, 0, 0, 100}} {
		want, err := c.Read(q.from, q.maxRecords, q.maxB, q.below)
		if err != nil {
			t.Fatal(err)
		}
		var got []Record
		n, err := c.ReadFunc(q.from, q.maxRecords, q.maxB, q.below, func(off uint64, timeNS int64, data []byte) error {
			got = append(got, Record{Offset: off, TimeNS: timeNS, Data: slices.Clone(data)})
			return nil
		})
		if err != nil || n != len(want) || !slices.EqualFunc(got, want, func(a, b Record) bool {
			return a.Offset == b.Offset && a.TimeNS == b.TimeNS && string(a.Data) == string(b.Data)
		}) {
			t.Fatalf("ReadFunc%+v: %d records %+v, %v; Read gave %+v", q, n, got, err, want)
		}
	}
	stop := errors.New("stop")
	n, err := c.ReadFunc(0, 0, 0, 100, func(off uint64, _ int64, _ []byte) error {
		if off == 3 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 3 {
		t.Fatalf("visitor error at offset 3: %d visited, %v", n, err)
	}
}
