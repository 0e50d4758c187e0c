package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/brook-streams/brook/pkg/client"
	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/tools/bench"
	"github.com/brook-streams/brook/tools/cmd/brook-demo/brookload"
)

// brookReaders are the catch-up reader settings of the brook target,
// "consumer-<max records>-p<prefetch>" (client.Consumer.Next on a new
// durable cursor, which starts at the retained head, keeping up to
// prefetch fetches in flight: ConsumerConfig.Prefetch) or
// "fetch-<max records>" (a loop of client.Fetch by offset from "earliest",
// one at a time); max records is each fetch's MaxRecords (the owner caps
// it, and MaxBytes, which the readers set to the largest the owner
// allows).
var brookReaders = []string{"consumer-10000-p4", "consumer-1000-p4", "consumer-10000-p1", "fetch-10000"}

// catchUpMaxBytes is what the brook readers ask as MaxBytes: the owner caps
// it by its limit and by what one NATS message carries.
const catchUpMaxBytes = 8 << 20

// runCatchUps runs the catch-up workload against each target, alternating
// targets run after run, and prints each run and the comparison.
func runCatchUps(ctx context.Context, o options, targets []string, log *slog.Logger) error {
	var readers map[string][]string
	if o.catchupReaders != "" {
		readers = map[string][]string{}
		for _, r := range strings.Split(o.catchupReaders, ",") {
			r = strings.TrimSpace(r)
			target := "brook"
			if _, _, _, err := parseBrookReader(r); err != nil {
				target = "jetstream"
			}
			readers[target] = append(readers[target], r)
		}
	}
	results := map[string][]*bench.CatchUpResult{}
	failed := alternate(ctx, o, targets, "-catchup", func(ro options) error {
		res, err := runCatchUpOne(ctx, ro, readers[ro.target], log)
		if res != nil {
			results[ro.target] = append(results[ro.target], res)
			_ = res.WriteText(os.Stdout)
		}
		return err
	})
	if ctx.Err() != nil {
		return failed
	}
	fmt.Println()
	_ = bench.WriteCatchUpComparison(os.Stdout, targets, results)
	return failed
}

// runCatchUpOne runs the catch-up workload once against a fresh cluster.
func runCatchUpOne(ctx context.Context, o options, readers []string, log *slog.Logger) (*bench.CatchUpResult, error) {
	t, closer, err := startTarget(ctx, o, log)
	if err != nil {
		return nil, err
	}
	var target bench.CatchUpTarget = t
	defer closer()
	if o.catchupProfile != "" {
		target = &profiledTarget{CatchUpTarget: target, prefix: o.catchupProfile + "." + filepath.Base(o.workDir), log: log}
	}
	lines := !isTerminal(os.Stderr)
	return bench.RunCatchUp(ctx, target, bench.CatchUpConfig{
		Records: o.catchupRecords, RecordSize: o.recordSize, Window: o.catchupWindow, Readers: readers, Logger: log,
		Progress: func(phase string, done int) {
			line := fmt.Sprintf("%s %s: %d records", o.target, phase, done)
			if lines {
				ignoreWrite(fmt.Fprintln(os.Stderr, line))
				return
			}
			ignoreWrite(fmt.Fprintf(os.Stderr, "\r%s   ", line))
		},
	})
}

// Fill implements bench.CatchUpTarget with an AsyncPublisher of window
// outstanding publishes, each with the run's producer id and the record's
// index as its sequence (as the write bench publishes), a failed publish
// sent again with the same id and sequence, which the owner's duplicate
// window makes safe.
func (t *brookTarget) Fill(ctx context.Context, n, window int, data func(int) []byte, confirmed func(int, uint64)) error {
	ap, err := t.c.NewAsyncPublisher(t.stream, client.AsyncConfig{Window: window})
	if err != nil {
		return fmt.Errorf("brook: fill: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = ap.Close(cctx)
	}()
	producer := "catchup-" + runTag()
	err = bench.FillAsync(ctx, n, window, func(i int) (func() (uint64, error), error) {
		fut, err := ap.PublishAsync(ctx, data(i), client.WithProducer(producer, uint64(i)+1))
		if err != nil {
			return nil, err
		}
		return func() (uint64, error) {
			pc, err := fut.Wait(ctx)
			return pc.Offset, err
		}, nil
	}, func(i int) (uint64, error) {
		pc, err := t.c.Publish(ctx, t.stream, data(i), client.WithProducer(producer, uint64(i)+1))
		return pc.Offset, err
	}, confirmed)
	if err != nil {
		return fmt.Errorf("brook: fill: %w", err)
	}
	return nil
}

// Readers implements bench.CatchUpTarget.
func (t *brookTarget) Readers() []string { return brookReaders }

// ServerPIDs implements bench.ServerProcesses: the local cluster's stream
// hosts (its nats-servers and the hosts' proxies run in the bench's own
// process; none for a cluster the bench did not start).
func (t *brookTarget) ServerPIDs() []int {
	local, ok := t.nodes.(brookload.LocalNodes)
	if !ok {
		return nil
	}
	var pids []int
	for i := range local.C.Hosts() {
		if pid := local.C.Host(i).Pid(); pid != 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}

// CheckReader implements bench.CatchUpTarget.
func (t *brookTarget) CheckReader(r string) error {
	_, _, _, err := parseBrookReader(r)
	return err
}

// CatchUp implements bench.CatchUpTarget.
func (t *brookTarget) CatchUp(ctx context.Context, reader string, n int, fn func(uint64, []byte)) error {
	api, maxRecords, prefetch, err := parseBrookReader(reader)
	if err != nil {
		return err
	}
	if api == "consumer" {
		cn, err := t.c.NewConsumer(t.stream, client.ConsumerConfig{
			Cursor: "catchup-" + runTag(), MaxRecords: maxRecords, MaxBytes: catchUpMaxBytes, Wait: time.Second, Prefetch: prefetch,
		})
		if err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			r, err := cn.Next(ctx)
			if err != nil {
				return fmt.Errorf("brook: consumer after %d records: %w", i, err)
			}
			fn(r.Offset, r.Data)
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return cn.Close(cctx)
	}
	req := wire.FetchRequest{Start: "earliest", MaxRecords: maxRecords, MaxBytes: catchUpMaxBytes, WaitMS: 1000}
	for delivered := 0; delivered < n; {
		b, err := t.c.Fetch(ctx, t.stream, req)
		if err != nil {
			return fmt.Errorf("brook: fetch after %d records: %w", delivered, err)
		}
		for _, r := range recordsFrom(b, req) {
			if delivered == n {
				break
			}
			fn(r.Offset, r.Data)
			delivered++
		}
		req = wire.FetchRequest{Start: "offset", Offset: b.Next, MaxRecords: maxRecords, MaxBytes: catchUpMaxBytes, WaitMS: 1000}
	}
	return nil
}

// recordsFrom drops records below the offset an offset fetch asked from
// (never deliver an offset twice).
func recordsFrom(b *frame.Batch, req wire.FetchRequest) []frame.Record {
	recs := b.Records
	if req.Start == "offset" {
		for len(recs) > 0 && recs[0].Offset < req.Offset {
			recs = recs[1:]
		}
	}
	return recs
}

// parseBrookReader splits a brookReaders setting.
func parseBrookReader(s string) (api string, maxRecords, prefetch int, err error) {
	parts := strings.Split(s, "-")
	ok := len(parts) == 2 && parts[0] == "fetch" ||
		len(parts) == 3 && parts[0] == "consumer" && strings.HasPrefix(parts[2], "p")
	if ok {
		api = parts[0]
		maxRecords, err = strconv.Atoi(parts[1])
		if err == nil && api == "consumer" {
			prefetch, err = strconv.Atoi(parts[2][1:])
		}
	}
	if !ok || err != nil || maxRecords < 1 || api == "consumer" && prefetch < 1 {
		return "", 0, 0, fmt.Errorf("brook: reader %q: want consumer-<max records>-p<prefetch> or fetch-<max records>", s)
	}
	return api, maxRecords, prefetch, nil
}

// profiledTarget writes a CPU profile of the bench's own process (the
// reader's client) over each catch-up read, to prefix.<reader>.pprof (a
// reader read again: prefix.<reader>.<n>.pprof).
type profiledTarget struct {
	bench.CatchUpTarget
	prefix string
	log    *slog.Logger
	reads  map[string]int
}

// ServerPIDs implements bench.ServerProcesses for the target profiled.
func (p *profiledTarget) ServerPIDs() []int {
	if sp, ok := p.CatchUpTarget.(bench.ServerProcesses); ok {
		return sp.ServerPIDs()
	}
	return nil
}

// CatchUp implements bench.CatchUpTarget.
func (p *profiledTarget) CatchUp(ctx context.Context, reader string, n int, fn func(uint64, []byte)) error {
	if p.reads == nil {
		p.reads = map[string]int{}
	}
	path := p.prefix + "." + reader + ".pprof"
	if n := p.reads[reader]; n > 0 {
		path = fmt.Sprintf("%s.%s.%d.pprof", p.prefix, reader, n)
	}
	p.reads[reader]++
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		return errors.Join(err, f.Close())
	}
	err = p.CatchUpTarget.CatchUp(ctx, reader, n, fn)
	pprof.StopCPUProfile()
	if cerr := f.Close(); cerr != nil {
		p.log.Warn("write the client's CPU profile", "file", path, "err", cerr)
	}
	return err
}
