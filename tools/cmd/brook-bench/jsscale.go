package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/brook-streams/brook/tools/bench"
)

// runJSMassFailover is runMassFailover against JetStream: n R3 file
// streams on a three-server cluster (each stream its own Raft group), one
// record each, the server leading the most streams SIGKILLed, a second
// record published to every stream and timed from the kill, and both
// records read back from every stream.
func runJSMassFailover(ctx context.Context, o options, n int, log *slog.Logger) (massResult, error) {
	res := massResult{Streams: n}
	bin := o.natsBin
	if bin == "" {
		var err error
		if bin, err = bench.BuildNATSServer(ctx, filepath.Join(o.workDir, "bin")); err != nil {
			return res, err
		}
	}
	js, err := bench.StartJetStream(ctx, bin, o.workDir)
	if err != nil {
		return res, err
	}
	defer js.Close()
	streams := make([]string, n)
	for i := range streams {
		streams[i] = fmt.Sprintf("MASS%05d", i)
	}
	res.Create, err = timeCreates(ctx, streams, max(o.createConcurrency, 1), func(ctx context.Context, s string) error {
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		return js.CreateScaleStream(cctx, s)
	})
	if err != nil {
		return res, fmt.Errorf("after %d streams: %w", len(res.Create.Slices)*createSlice, err)
	}
	log.Info("jetstream streams created", "streams", n, "seconds", res.Create.Total.Seconds(), "per_second", res.Create.Rate)
	var mu sync.Mutex
	leaders := map[string]string{}
	err = forEach(ctx, streams, 64, func(ctx context.Context, s string) error {
		pctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := js.PublishOnce(pctx, s, record(s, 1), s+"-1"); err != nil {
			return err
		}
		l, err := js.StreamLeader(pctx, s)
		if err != nil {
			return err
		}
		mu.Lock()
		leaders[s] = l
		mu.Unlock()
		return nil
	})
	if err != nil {
		return res, err
	}
	if o.idleWindow > 0 {
		var procs []namedPid
		for i, pid := range js.ServerPIDs() {
			procs = append(procs, namedPid{Name: js.ServerNames()[i], Pid: pid})
		}
		if res.Idle.Procs, err = sampleIdleAfter(ctx, procs, o.idleWindow); err != nil {
			return res, err
		}
		res.Idle.Window = o.idleWindow
	}
	res.pickVictim(leaders)
	log.Info("killing the jetstream server leading the most streams", "server", res.Killed, "leads", res.Owned, "streams", n)
	killed := time.Now()
	if err := js.KillServer(res.Killed); err != nil {
		return res, err
	}
	err = res.timeAfterKill(ctx, streams, leaders, killed, func(ctx context.Context, s string) error {
		return js.PublishOnce(ctx, s, record(s, 2), s+"-2")
	})
	if err != nil {
		return res, err
	}
	return res, forEach(ctx, streams, 64, func(ctx context.Context, s string) error {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		got, err := js.StreamRecords(rctx, s, 2)
		if err != nil {
			return err
		}
		want := [][]byte{record(s, 1), record(s, 2)}
		if !slices.EqualFunc(got, want, bytes.Equal) {
			return fmt.Errorf("%s holds %q, want %q", s, got, want)
		}
		return nil
	})
}

// sampleIdleAfter waits idleSettle, then samples procs over window.
func sampleIdleAfter(ctx context.Context, procs []namedPid, window time.Duration) ([]procUsage, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(idleSettle):
	}
	return sampleIdle(ctx, procs, window)
}
