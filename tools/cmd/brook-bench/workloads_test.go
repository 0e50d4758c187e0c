package main

import (
	"slices"
	"testing"

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
