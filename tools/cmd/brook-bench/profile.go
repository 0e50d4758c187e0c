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
	if err := profileSelf(ctx, prefix+".client.pprof", length); err != nil {
		log.Warn("--cpuprofile: client profile", "err", err)
	}
	wg.Wait()
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
