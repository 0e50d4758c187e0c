package main

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
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

// JetStream's PublishAsync path end to end: a short window-32 run on a
// real three-server JetStream confirms records and verifies them (none
// lost, none twice), under its own target name.
func TestJetStreamAsyncTarget(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the process cluster in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	tgt, closer, err := startTarget(ctx, options{target: bench.JetStreamAsync, stream: "durable", workDir: t.TempDir()}, log)
	if err != nil {
		t.Fatalf("start: %v\n%s", err, logs.String())
	}
	defer closer()
	if tgt.Name() != bench.JetStreamAsync {
		t.Fatalf("target %q, want %q", tgt.Name(), bench.JetStreamAsync)
	}
	res, err := bench.Run(ctx, tgt, bench.Config{Duration: 2 * time.Second, RecordSize: 64, Publishers: 1, Window: 32,
		FollowReaders: 1, Logger: log, SettleAfterStop: 500 * time.Millisecond})
	if err != nil {
		t.Fatalf("run: %v\n%s", err, logs.String())
	}
	if !res.Verify.OK || res.Whole.Records == 0 {
		t.Fatalf("verify %+v, %d records confirmed", res.Verify, res.Whole.Records)
	}
}

// A run that fails keeps its temporary work directory (data and logs) for
// the post-mortem; here it fails before starting anything, on a bad
// --workloads, so the directory is empty but must still be there.
func TestFailedRunKeepsItsWorkDir(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	o := options{target: "brook", workloads: "not-a-workload"}
	if err := run(context.Background(), o, slog.New(slog.DiscardHandler)); err == nil {
		t.Fatal("a bad --workloads ran")
	}
	kept, err := filepath.Glob(filepath.Join(tmp, "brook-bench-*"))
	if err != nil || len(kept) != 1 {
		t.Fatalf("work directories after a failed run: %v (%v); want the one it made", kept, err)
	}
}
