package main

import (
	"math"
	"strings"
	"testing"
)

// TestParseSums reads the host metrics the timeline needs from a
// Prometheus page: counters and histograms summed over their series, the
// stage histogram keyed by stage, other metrics and prefixes of names
// ignored.
func TestParseSums(t *testing.T) {
	page := strings.Join([]string{
		`# HELP brook_host_append_records_total Records appended.`,
		`brook_host_append_records_total{otel_scope_name="x"} 100`,
		`brook_host_append_records_total_other 7`,
		`brook_host_store_fsync_duration_seconds_sum 0.5`,
		`brook_host_store_fsync_duration_seconds_count 50`,
		`brook_host_store_fsync_duration_seconds_bucket{le="0.1"} 50`,
		`brook_host_publish_duration_seconds_sum{otel_scope_name="x"} 2`,
		`brook_host_publish_duration_seconds_count{otel_scope_name="x"} 100`,
		`brook_host_publish_stage_duration_seconds_sum{brook_publish_stage="intake",otel_scope_name="x"} 0.3`,
		`brook_host_publish_stage_duration_seconds_count{brook_publish_stage="intake",otel_scope_name="x"} 100`,
		`brook_host_publish_stage_duration_seconds_sum{brook_publish_stage="append",otel_scope_name="x"} 1`,
		`brook_host_publish_stage_duration_seconds_count{brook_publish_stage="append",otel_scope_name="x"} 50`,
	}, "\n")
	s := parseSums(page)
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	near("appended", s[metricAppended], 100)
	near("fsync mean", s.mean(metricFsyncs), 0.01)
	near("confirm mean", s.mean(metricConfirm), 0.02)
	near("intake mean", s.stage(stageIntake), 0.003)
	near("append mean", s.stage(stageAppend), 0.02)
	near("follower poll mean (none)", s.stage(stageFollowerPoll), 0)
	d := diffSums(sums{metricAppended: 40}, s)
	near("appended over a window", d[metricAppended], 60)
}
