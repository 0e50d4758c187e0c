package main

import (
	"slices"
	"testing"
	"time"

	"github.com/brook-streams/brook/tools/bench"
)

func TestParseWorkloads(t *testing.T) {
	got, err := parseWorkloads("4x16, 1x256,1x1")
	if want := []bench.Workload{{Publishers: 4, Window: 16}, {Publishers: 1, Window: 256}, {Publishers: 1, Window: 1}}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("parse: %v %v, want %v", got, err, want)
	}
	for _, bad := range []string{"", "4", "4x", "x16", "0x1", "1x0", "ax2"} {
		if _, err := parseWorkloads(bad); err == nil {
			t.Fatalf("parse %q: no error", bad)
		}
	}
}

// The profiles cover the middle half of the publishing, at least a second.
func TestProfileWindow(t *testing.T) {
	for _, c := range []struct{ d, start, length time.Duration }{
		{8 * time.Second, 2 * time.Second, 4 * time.Second},
		{time.Second, 250 * time.Millisecond, time.Second},
	} {
		if start, length := profileWindow(c.d); start != c.start || length != c.length {
			t.Errorf("profileWindow(%v) = %v, %v; want %v, %v", c.d, start, length, c.start, c.length)
		}
	}
}

// JetStream's PublishAsync path joins the workloads with a window, not the
// synchronous one, and the summary has a column for it.
func TestWorkloadTargets(t *testing.T) {
	both := []string{"brook", "jetstream"}
	if got := workloadTargets(both, bench.Workload{Publishers: 1, Window: 256}); !slices.Equal(got, []string{"brook", "jetstream", bench.JetStreamAsync}) {
		t.Fatalf("window 256: %v", got)
	}
	if got := workloadTargets(both, bench.Workload{Publishers: 1, Window: 1}); !slices.Equal(got, both) {
		t.Fatalf("synchronous: %v", got)
	}
	if got := workloadTargets([]string{"brook"}, bench.Workload{Publishers: 4, Window: 16}); !slices.Equal(got, []string{"brook"}) {
		t.Fatalf("brook only: %v", got)
	}
	if got := summaryTargets(both, []bench.Workload{{Publishers: 1, Window: 1}, {Publishers: 4, Window: 16}}); !slices.Equal(got, []string{"brook", "jetstream", bench.JetStreamAsync}) {
		t.Fatalf("summary: %v", got)
	}
}
