package bench

import (
	"strings"
	"testing"
)

func TestWriteWorkloadSummary(t *testing.T) {
	wls := []Workload{{4, 16}, {1, 1}}
	res := func(rate, p50, p99 float64) *Result {
		return &Result{Before: Phase{PerSecond: rate, P50MS: p50, P99MS: p99}}
	}
	results := []map[string][]*Result{
		{"brook": {res(300, 1, 5), res(100, 3, 9), res(200, 2, 7)}, "jetstream": {res(100, 2, 8)}},
		{"brook": {res(50, 1, 2)}},
	}
	var b strings.Builder
	if err := WriteWorkloadSummary(&b, []string{"brook", "jetstream"}, wls, results); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| 4 publishers x 16 outstanding | 200 rec/s, p50 2.00 ms, p99 7.00 ms | 100 rec/s, p50 2.00 ms, p99 8.00 ms | 2.00 |",
		"| 1 synchronous publisher | 50 rec/s, p50 1.00 ms, p99 2.00 ms | – | – |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("summary lacks %q:\n%s", want, b.String())
		}
	}
}

// With JetStream's two publish paths, the ratio is over the faster one,
// named; a workload only one of them ran compares with that one.
func TestWriteWorkloadSummaryFastestPeer(t *testing.T) {
	wls := []Workload{{1, 256}, {1, 1}}
	res := func(rate float64) *Result { return &Result{Before: Phase{PerSecond: rate, P50MS: 1, P99MS: 2}} }
	results := []map[string][]*Result{
		{"brook": {res(300)}, "jetstream": {res(100)}, JetStreamAsync: {res(150)}},
		{"brook": {res(50)}, "jetstream": {res(100)}},
	}
	var b strings.Builder
	if err := WriteWorkloadSummary(&b, []string{"brook", "jetstream", JetStreamAsync}, wls, results); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| 2.00 (vs jetstream-async) |", "| – | 0.50 (vs jetstream) |"} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("summary lacks %q:\n%s", want, b.String())
		}
	}
}

// The machine's CPU per record joins a target's cell only when every run
// of it has one.
func TestWriteWorkloadSummaryCPU(t *testing.T) {
	wls := []Workload{{1, 256}}
	res := func(rate, us float64) *Result {
		r := &Result{Before: Phase{PerSecond: rate, P50MS: 1, P99MS: 2}}
		if us > 0 {
			r.CPU = &CPU{MachineUSPerRecord: us}
		}
		return r
	}
	results := []map[string][]*Result{
		{"brook": {res(300, 90), res(200, 70), res(100, 80)}, "jetstream": {res(100, 60), res(100, 0)}},
	}
	var b strings.Builder
	if err := WriteWorkloadSummary(&b, []string{"brook", "jetstream"}, wls, results); err != nil {
		t.Fatal(err)
	}
	want := "| 1 publisher x 256 outstanding | 200 rec/s, p50 1.00 ms, p99 2.00 ms, 80 µs CPU/rec | 100 rec/s, p50 1.00 ms, p99 2.00 ms | 2.00 |"
	if !strings.Contains(b.String(), want) {
		t.Fatalf("summary lacks %q:\n%s", want, b.String())
	}
}
