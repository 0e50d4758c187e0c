package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
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
		err := alternate(ctx, wo, targets, "-"+wl.String(), func(ro options) error {
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
		_ = bench.WriteComparison(os.Stdout, targets, results)
	}
	fmt.Println()
	_ = bench.WriteWorkloadSummary(os.Stdout, targets, wls, all)
	return failed
}
