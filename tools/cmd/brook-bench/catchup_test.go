package main

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/brook-streams/brook/tools/bench"
)

// The catch-up workload end to end on both targets: each fills its stream
// and every reader setting it offers reads it all back, verified.
func TestCatchUpBothTargets(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the process clusters in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, target := range []string{"brook", "jetstream"} {
		t.Run(target, func(t *testing.T) {
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			o := options{target: target, stream: "durable", workDir: t.TempDir()}
			tgt, closer, err := startTarget(ctx, o, log)
			if err != nil {
				t.Fatalf("start %s: %v\n%s", target, err, logs.String())
			}
			defer closer()
			res, err := bench.RunCatchUp(ctx, tgt, bench.CatchUpConfig{Records: 3000, RecordSize: 100, Window: 64, Logger: log})
			if err != nil {
				t.Fatalf("catch-up: %v\n%s", err, logs.String())
			}
			var text bytes.Buffer
			_ = res.WriteText(&text)
			t.Logf("%s", text.String())
			if len(res.Reads) != len(tgt.Readers()) || res.Best() == nil {
				t.Fatalf("reads %+v, want every one of %v verified", res.Reads, tgt.Readers())
			}
			for _, r := range res.Reads {
				if !r.OK {
					t.Errorf("reader %s: %s", r.Reader, r.Error)
				}
			}
		})
	}
}
