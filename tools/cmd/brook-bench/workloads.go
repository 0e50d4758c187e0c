package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/brook-streams/brook/tools/bench"
)

// parseWorkloads parses --workloads: comma-separated PUBLISHERSxWINDOW.
func parseWorkloads(s string) ([]bench.Workload, error) {
	var out []bench.Workload
	for _, f := range strings.Split(s, ",") {
		p, w, ok := strings.Cut(strings.TrimSpace(f), "x")
		np, perr := strconv.Atoi(p)
		nw, werr := strconv.Atoi(w)
		if !ok || perr != nil || werr != nil || np < 1 || nw < 1 {
			return nil, fmt.Errorf("--workloads: %q is not PUBLISHERSxWINDOW (e.g. 4x16)", f)
		}
		out = append(out, bench.Workload{Publishers: np, Window: nw})
	}
	return out, nil
}

// runWorkloads runs every workload of --workloads o.runs times per target
// (alternating targets), writes each workload's comparison, then one
// summary of all of them.
func runWorkloads(ctx context.Context, o options, targets []string, log *slog.Logger) error {
	wls, err := parseWorkloads(o.workloads)
	if err != nil {
		return err
	}
	var failed error
	all := make([]map[string][]*bench.Result, len(wls))
	for i, wl := range wls {
		wo := o
		wo.publishers, wo.window = wl.Publishers, wl.Window
		results := map[string][]*bench.Result{}
		wlTargets := workloadTargets(targets, wl)
		err := alternate(ctx, wo, wlTargets, "-"+wl.String(), func(ro options) error {
			res, err := runOne(ctx, ro, log)
			if res != nil {
				results[ro.target] = append(results[ro.target], res)
			}
			return err
		})
		failed = errors.Join(failed, err)
		all[i] = results
		if ctx.Err() != nil {
			return failed
		}
		fmt.Printf("\nworkload %s:\n", wl.Describe())
		_ = bench.WriteComparison(os.Stdout, wlTargets, results)
	}
	fmt.Println()
	_ = bench.WriteWorkloadSummary(os.Stdout, summaryTargets(targets, wls), wls, all)
	return failed
}

// workloadTargets are the targets a workload runs on: with JetStream
// among them and a window above 1, JetStream's two publish paths
// (synchronous Publish per window slot, and PublishAsync with the window
// outstanding), so that the comparison takes its faster in the same run.
func workloadTargets(targets []string, wl bench.Workload) []string {
	out := slices.Clone(targets)
	if wl.Window > 1 && slices.Contains(targets, "jetstream") && !slices.Contains(targets, bench.JetStreamAsync) {
		out = append(out, bench.JetStreamAsync)
	}
	return out
}

// summaryTargets are the summary's columns: every target any workload ran.
func summaryTargets(targets []string, wls []bench.Workload) []string {
	out := slices.Clone(targets)
	for _, wl := range wls {
		for _, t := range workloadTargets(targets, wl) {
			if !slices.Contains(out, t) {
				out = append(out, t)
			}
		}
	}
	return out
}
