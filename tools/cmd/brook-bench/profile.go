package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/brook-streams/brook/tools/cmd/brook-demo/brookload"
)

// Profiles of a brook workload (--cpuprofile): the stream's owner, one of
// its followers (both from their /debug/pprof/profile, which --pprof
// turns on) and the bench process (the client) are profiled over the same
// window in the middle of the publishing, so the three profiles describe
// the same records.

// profileWindow returns when, from the start of publishing, the profiles
// begin and how long they run: the middle half of d, at least a second.
func profileWindow(d time.Duration) (start, length time.Duration) {
	length = max(d/2, time.Second)
	return d / 4, length
}

// profileRun writes prefix.owner.pprof, prefix.follower.pprof and
// prefix.client.pprof of t over the middle half of d from now (with
// profiles set; otherwise only the timeline), and prefix.batches.txt: the
// batches and the timeline of a confirm over the same window (timeline).
// It returns once all are written, ctx ended, or a failure was logged.
func profileRun(ctx context.Context, t *brookTarget, prefix string, d time.Duration, profiles bool, log *slog.Logger) {
	start, length := profileWindow(d)
	select {
	case <-ctx.Done():
		return
	case <-time.After(start):
	}
	local, ok := t.nodes.(brookload.LocalNodes)
	if !ok {
		log.Warn("--cpuprofile/--timeline: the hosts are read only on a local cluster")
		return
	}
	info, err := t.info(ctx)
	if err != nil || len(info.Assignment.Followers) == 0 {
		log.Warn("--cpuprofile/--timeline: no owner and follower to read", "err", err)
		return
	}
	roles := map[string]string{"owner": info.Assignment.Owner, "follower": info.Assignment.Followers[0]}
	metricsURL := map[string]string{}
	var wg sync.WaitGroup
	for role, node := range roles {
		p := local.C.HostByNode(node)
		if p == nil || p.HTTPAddr() == "" {
			log.Warn("--cpuprofile/--timeline: no HTTP address", "node", node)
			continue
		}
		metricsURL[role] = "http://" + p.HTTPAddr() + "/metrics"
		if !profiles {
			continue
		}
		url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", p.HTTPAddr(), int(length.Seconds()))
		path := fmt.Sprintf("%s.%s.pprof", prefix, role)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fetchProfile(ctx, url, path); err != nil {
				log.Warn("--cpuprofile: host profile", "node", node, "role", role, "err", err)
				return
			}
			log.Info("profile written", "role", role, "node", node, "path", path)
		}()
	}
	b0, r0 := t.c.BatchStats()
	q0, rtt0 := t.c.BatchRoundTrips()
	o0, f0 := scrapeSums(ctx, metricsURL["owner"]), scrapeSums(ctx, metricsURL["follower"])
	if profiles {
		if err := profileSelf(ctx, prefix+".client.pprof", length); err != nil {
			log.Warn("--cpuprofile: client profile", "err", err)
		}
	} else {
		select {
		case <-ctx.Done():
			return
		case <-time.After(length):
		}
	}
	b1, r1 := t.c.BatchStats()
	q1, rtt1 := t.c.BatchRoundTrips()
	o1, f1 := scrapeSums(ctx, metricsURL["owner"]), scrapeSums(ctx, metricsURL["follower"])
	wg.Wait()
	// What the batches looked like over the window: records per publish
	// batch frame (the client's), per synced group commit of the owner's
	// store, and the owner's mean group commit (its write and fsync).
	batches, records := b1-b0, r1-r0
	od, fd := diffSums(o0, o1), diffSums(f0, f1)
	appended, fsyncs := od[metricAppended], od[metricFsyncs+"_count"]
	line := fmt.Sprintf("window %v: %d publish batches of %d records (%.1f per batch); owner appended %.0f records in %.0f group commits (%.1f per commit), mean commit (write and fsync) %.2f ms\n",
		length, batches, records, ratio(float64(records), float64(batches)), appended, fsyncs,
		ratio(appended, fsyncs), 1000*od.mean(metricFsyncs))
	line += timeline(float64(q1-q0), (rtt1 - rtt0).Seconds(), od, fd)
	log.Info("--cpuprofile/--timeline: batches", "stats", line)
	if err := os.WriteFile(prefix+".batches.txt", []byte(line), 0o644); err != nil {
		log.Warn("--cpuprofile/--timeline: batch stats", "err", err)
	}
}

// timeline says where a publish batch's confirm went over the window, as
// means in ms: the client's round trip (replies of them, rttSecs in all),
// the owner's stages (od) and a follower's (fd). The owner's confirm
// (brook_host_publish_duration) runs from its append's start, so the wait
// after its own fsync is the confirm less the append; the rest of the
// round trip, less the owner's intake and confirm, is NATS (the batch to
// the owner, the reply back) and the client.
func timeline(replies, rttSecs float64, od, fd sums) string {
	ms := func(v float64) float64 { return 1000 * v }
	rtt := ratio(rttSecs, replies)
	intake, appendT, confirm := od.stage(stageIntake), od.stage(stageAppend), od.mean(metricConfirm)
	return fmt.Sprintf("timeline (means, ms): client batch round trip %.2f (%.0f replies) = owner intake %.2f + owner append to confirm %.2f [append %.2f (group commits' write and fsync %.2f), then waiting for a follower %.2f] + NATS and client %.2f; follower: poll %.2f (%.0f with records), apply %.2f (its write and fsync %.2f, %.0f group commits)\n",
		ms(rtt), replies, ms(intake), ms(confirm), ms(appendT), ms(od.mean(metricFsyncs)), ms(confirm-appendT),
		ms(rtt-intake-confirm), ms(fd.stage(stageFollowerPoll)), fd[metricStage+"_count|"+stageFollowerPoll],
		ms(fd.stage(stageFollowerApply)), ms(fd.mean(metricFsyncs)), fd[metricFsyncs+"_count"])
}

// The host's metrics the profile window reads (Prometheus names of the
// host's instruments, metrics.go in the stream host); a histogram's are
// its name plus _sum and _count, and the stage histogram's are further
// keyed by |stage.
const (
	metricAppended = "brook_host_append_records_total"
	metricFsyncs   = "brook_host_store_fsync_duration_seconds"
	metricConfirm  = "brook_host_publish_duration_seconds"
	metricStage    = "brook_host_publish_stage_duration_seconds"
	labelStage     = `brook_publish_stage="`
)

// The stages of brook_host_publish_stage_duration (the stream host's
// brook.publish.stage values).
const (
	stageIntake        = "intake"
	stageAppend        = "append"
	stageFollowerPoll  = "follower_poll"
	stageFollowerApply = "follower_apply"
)

// sums are the scraped metrics, each summed over its series.
type sums map[string]float64

// mean is the mean of histogram name.
func (s sums) mean(name string) float64 { return ratio(s[name+"_sum"], s[name+"_count"]) }

// stage is the mean of stage st of the stage histogram.
func (s sums) stage(st string) float64 {
	return ratio(s[metricStage+"_sum|"+st], s[metricStage+"_count|"+st])
}

// diffSums is b less a, key by key.
func diffSums(a, b sums) sums {
	out := sums{}
	for k, v := range b {
		out[k] = v - a[k]
	}
	return out
}

// scrapeSums reads url (a Prometheus text page) and returns, for each of
// the metrics above, the sum of its series; nil if it cannot be read.
func scrapeSums(ctx context.Context, url string) sums {
	if url == "" {
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil
	}
	return parseSums(string(body))
}

// parseSums sums the series of the metrics the profile window reads in a
// Prometheus text page.
func parseSums(page string) sums {
	out := sums{}
	names := []string{metricAppended}
	for _, h := range []string{metricFsyncs, metricConfirm, metricStage} {
		names = append(names, h+"_sum", h+"_count")
	}
	for _, l := range strings.Split(page, "\n") {
		for _, name := range names {
			rest, ok := strings.CutPrefix(l, name)
			if !ok || (!strings.HasPrefix(rest, "{") && !strings.HasPrefix(rest, " ")) {
				continue
			}
			key := name
			if _, after, ok := strings.Cut(rest, labelStage); ok && strings.HasPrefix(name, metricStage) {
				st, _, _ := strings.Cut(after, `"`)
				key += "|" + st
			}
			f := strings.Fields(rest[strings.LastIndex(rest, "}")+1:])
			if len(f) > 0 {
				if v, err := strconv.ParseFloat(f[0], 64); err == nil {
					out[key] += v
				}
			}
		}
	}
	return out
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// fetchProfile GETs url and writes the body to path.
func fetchProfile(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s (is the host run with --pprof?)", url, resp.Status)
	}
	return writeFile(path, func(w io.Writer) error {
		_, err := io.Copy(w, resp.Body)
		return err
	})
}

// profileSelf writes a CPU profile of this process over length to path.
func profileSelf(ctx context.Context, path string, length time.Duration) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return err
	}
	select {
	case <-ctx.Done():
	case <-time.After(length):
	}
	pprof.StopCPUProfile()
	return f.Close()
}
