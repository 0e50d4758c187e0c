package proctest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/policy"
	"github.com/brook-streams/brook/pkg/wire"
)

// benchArgs quiet the hosts' logs and use the production heartbeat
// interval, so that logging does not dominate what is measured.
var benchArgs = []string{"--log-level", "warn", "--heartbeat-interval", "500ms", "--max-payload", "1048576"}

// BenchmarkPublish measures confirmed publishes per second and the confirm
// latency on majority_durable with E=3, 256-byte records, three host
// processes: one synchronous publisher, and a window of 256 outstanding
// publishes whose replies arrive on one reply inbox.
//
//	go test ./proctest -run '^$' -bench Publish -benchtime 5s
func BenchmarkPublish(b *testing.B) {
	const stream, id = "bench", 100
	c := newCluster(b)
	c.assign(asg(stream, id, 1, "h1", []string{"h2", "h3"}, policy.MajorityDurable))
	for _, n := range three {
		c.start(n, benchArgs...)
	}
	c.waitCopy("h1", stream, "owner", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner })
	for _, n := range three[1:] {
		c.waitCopy(n, stream, "follower", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleFollower })
	}
	payload := make([]byte, 256)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}

	b.Run("sync", func(b *testing.B) {
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		start := time.Now()
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			r := c.publish(stream, payload, nil)
			if r.ok == nil {
				b.Fatalf("publish: %v", r)
			}
			lat = append(lat, time.Since(t0))
		}
		report(b, start, lat)
	})

	b.Run("async256", func(b *testing.B) {
		const window = 256
		inbox := nats.NewInbox()
		sent := make([]time.Time, b.N)
		lat := make([]time.Duration, b.N)
		sem := make(chan struct{}, window)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var failed []string
		sub, err := c.nc.Subscribe(inbox+".*", func(m *nats.Msg) {
			i, err := strconv.Atoi(m.Subject[strings.LastIndexByte(m.Subject, '.')+1:])
			if err == nil && i < len(sent) {
				lat[i] = time.Since(sent[i])
				var pc wire.PublishConfirm
				if e := errorOf(m); e != nil || json.Unmarshal(m.Data, &pc) != nil {
					mu.Lock()
					failed = append(failed, string(m.Data))
					mu.Unlock()
				}
			}
			<-sem
			wg.Done()
		})
		if err != nil {
			b.Fatal(err)
		}
		defer func() {
			if err := sub.Unsubscribe(); err != nil {
				b.Error(err)
			}
		}()
		_ = sub.SetPendingLimits(-1, -1)
		b.ResetTimer()
		start := time.Now()
		for i := 0; i < b.N; i++ {
			sem <- struct{}{}
			wg.Add(1)
			m := nats.NewMsg(wire.PublishSubject(stream))
			m.Reply = inbox + "." + strconv.Itoa(i)
			m.Data = payload
			sent[i] = time.Now()
			if err := c.nc.PublishMsg(m); err != nil {
				b.Fatal(err)
			}
		}
		wg.Wait()
		report(b, start, lat)
		if len(failed) > 0 {
			b.Fatalf("%d publishes not confirmed, first: %s", len(failed), failed[0])
		}
	})
}

// report adds confirms/s and latency percentiles to the benchmark result.
func report(b *testing.B, start time.Time, lat []time.Duration) {
	el := time.Since(start)
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(float64(len(lat))/el.Seconds(), "confirms/s")
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}

// BenchmarkIdleStreamsRSS places 1,000 idle streams (E=3, majority_durable,
// owners spread over three host processes, so each host holds 1,000 copies)
// and reports the hosts' resident memory from /proc/<pid>/status. The goal
// is below 200 MiB per host.
//
//	go test ./proctest -run '^$' -bench IdleStreamsRSS -benchtime 1x
func BenchmarkIdleStreamsRSS(b *testing.B) {
	const streams = 1000
	c := newCluster(b)
	var as []wire.AssignedStream
	for i := 0; i < streams; i++ {
		owner := three[i%3]
		var followers []string
		for _, n := range three {
			if n != owner {
				followers = append(followers, n)
			}
		}
		as = append(as, asg(fmt.Sprintf("idle-%04d", i), uint64(1000+i), 1, owner, followers, policy.MajorityDurable))
	}
	c.assign(as...)
	procs := map[string]*proc{}
	for _, n := range three {
		procs[n] = c.start(n, benchArgs...)
	}
	t0 := time.Now()
	c.waitFor(5*time.Minute, "every host playing its role on every stream", func() bool {
		for _, n := range three {
			hb := c.heartbeat(n)
			if len(hb.Copies) != streams {
				return false
			}
			for _, cs := range hb.Copies {
				if cs.Role == wire.RoleNone {
					return false
				}
			}
		}
		return true
	})
	b.Logf("1000 streams placed on 3 hosts in %v", time.Since(t0))
	// Let the follower long-polls reach their steady state (an idle
	// follower's wait grows 1, 2, 4 s), then measure memory, and CPU over
	// a quiet window of two of the longest waits.
	time.Sleep(10 * time.Second)
	cpu0 := map[string]float64{}
	for _, n := range three {
		cpu0[n] = cpuSeconds(b, procs[n].cmd.Process.Pid)
	}
	const window = 8 * time.Second
	time.Sleep(window)
	var worst, worstCPU float64
	for _, n := range three {
		pid := procs[n].cmd.Process.Pid
		rss, err := vmRSS(pid)
		if err != nil {
			b.Fatal(err)
		}
		cpu := 100 * (cpuSeconds(b, pid) - cpu0[n]) / window.Seconds()
		b.Logf("%s: VmRSS %.1f MiB, idle CPU %.1f%% of one core", n, rss, cpu)
		worst, worstCPU = max(worst, rss), max(worstCPU, cpu)
	}
	b.ReportMetric(worst, "max-RSS-MiB")
	b.ReportMetric(worstCPU, "max-idle-CPU-%")
}

// vmRSS reads a process's resident set size in MiB.
func vmRSS(pid int) (_ float64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				return 0, fmt.Errorf("parse VmRSS %q: %w", rest, err)
			}
			return kb / 1024, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// cpuSeconds reads a process's user+system CPU time from /proc/<pid>/stat
// (clock ticks of 1/100 s, the Linux USER_HZ).
func cpuSeconds(b *testing.B, pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name, which is in parentheses.
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100
}
