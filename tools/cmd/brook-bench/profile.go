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
// prefix.client.pprof of t over the middle half of d from now; it returns
// once the three are written, ctx ended, or a failure was logged.
func profileRun(ctx context.Context, t *brookTarget, prefix string, d time.Duration, log *slog.Logger) {
	start, length := profileWindow(d)
	select {
	case <-ctx.Done():
		return
	case <-time.After(start):
	}
	local, ok := t.nodes.(brookload.LocalNodes)
	if !ok {
		log.Warn("--cpuprofile: the hosts are profiled only on a local cluster")
		return
	}
	info, err := t.info(ctx)
	if err != nil || len(info.Assignment.Followers) == 0 {
		log.Warn("--cpuprofile: no owner and follower to profile", "err", err)
		return
	}
	roles := map[string]string{"owner": info.Assignment.Owner, "follower": info.Assignment.Followers[0]}
	var wg sync.WaitGroup
	for role, node := range roles {
		p := local.C.HostByNode(node)
		if p == nil || p.HTTPAddr == "" {
			log.Warn("--cpuprofile: no HTTP address", "node", node)
			continue
		}
		url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", p.HTTPAddr, int(length.Seconds()))
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
	ownerMetrics := ""
	if p := local.C.HostByNode(info.Assignment.Owner); p != nil && p.HTTPAddr != "" {
		ownerMetrics = "http://" + p.HTTPAddr + "/metrics"
	}
	b0, r0 := t.c.BatchStats()
	m0 := scrapeSums(ctx, ownerMetrics)
	if err := profileSelf(ctx, prefix+".client.pprof", length); err != nil {
		log.Warn("--cpuprofile: client profile", "err", err)
	}
	b1, r1 := t.c.BatchStats()
	m1 := scrapeSums(ctx, ownerMetrics)
	wg.Wait()
	// What the batches looked like over the window: records per publish
	// batch frame (the client's), per synced group commit of the owner's
	// store, and the owner's mean fsync.
	batches, records := b1-b0, r1-r0
	appended := m1[metricAppended] - m0[metricAppended]
	fsyncs := m1[metricFsyncs] - m0[metricFsyncs]
	fsyncSecs := m1[metricFsyncSecs] - m0[metricFsyncSecs]
	line := fmt.Sprintf("window %v: %d publish batches of %d records (%.1f per batch); owner appended %.0f records in %.0f group commits (%.1f per commit), mean fsync %.2f ms\n",
		length, batches, records, ratio(float64(records), float64(batches)), appended, fsyncs,
		ratio(appended, fsyncs), 1000*ratio(fsyncSecs, fsyncs))
	log.Info("--cpuprofile: batches", "stats", line)
	if err := os.WriteFile(prefix+".batches.txt", []byte(line), 0o644); err != nil {
		log.Warn("--cpuprofile: batch stats", "err", err)
	}
}

// The owner's metrics the profile window reads (Prometheus names of the
// host's instruments, metrics.go in the stream host).
const (
	metricAppended  = "brook_host_append_records_total"
	metricFsyncs    = "brook_host_store_fsync_duration_seconds_count"
	metricFsyncSecs = "brook_host_store_fsync_duration_seconds_sum"
)

// scrapeSums reads url (a Prometheus text page) and returns, for each of
// the metrics above, the sum of its series; nil if it cannot be read.
func scrapeSums(ctx context.Context, url string) map[string]float64 {
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
	out := map[string]float64{}
	for _, l := range strings.Split(string(body), "\n") {
		for _, name := range []string{metricAppended, metricFsyncs, metricFsyncSecs} {
			if rest, ok := strings.CutPrefix(l, name); ok && (strings.HasPrefix(rest, "{") || strings.HasPrefix(rest, " ")) {
				f := strings.Fields(rest[strings.LastIndex(rest, "}")+1:])
				if len(f) > 0 {
					if v, err := strconv.ParseFloat(f[0], 64); err == nil {
						out[name] += v
					}
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
