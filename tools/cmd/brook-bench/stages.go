package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/brook-streams/brook/tools/bench"
	"github.com/brook-streams/brook/tools/cluster"
)

// failoverStage is one step of a stream's failover that a process logs,
// with the line that marks it: the leader records the recovery and
// commits it, and the new owner's host promotes its copy.
type failoverStage struct{ name, msg string }

var failoverStages = []failoverStage{
	{"recorded", `msg="recovery recorded"`},
	{"committed", `msg="recovery committed"`},
	{"promoted", `msg="promoted to owner"`},
}

// stageTimes holds, per failover stage and then for the confirms, how long
// after the kill each owned stream reached it, ascending.
type stageTimes struct {
	names []string
	times [][]time.Duration
}

// firstAfter reads log lines and records in into[i], for each stream in
// streams, how long after since the first line containing stages[i]'s
// message and naming it (stream=) was logged. Lines before since, of
// other streams, or without a readable time are skipped.
func firstAfter(r io.Reader, since time.Time, streams map[string]bool, stages []failoverStage, into []map[string]time.Duration) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		for i, st := range stages {
			if !bytes.Contains(line, []byte(st.msg)) {
				continue
			}
			stream := field(line, "stream=")
			if _, seen := into[i][stream]; seen || !streams[stream] {
				break
			}
			at, err := time.Parse(time.RFC3339Nano, field(line, "time="))
			if err == nil && !at.Before(since) {
				into[i][stream] = at.Sub(since)
			}
			break
		}
	}
	return sc.Err()
}

// field returns the value of key (with its "=") in a text log line, "" if
// it is not there: the line's first " key" or leading "key".
func field(line []byte, key string) string {
	i := bytes.Index(line, []byte(" "+key))
	switch {
	case bytes.HasPrefix(line, []byte(key)):
		i = 0
	case i >= 0:
		i++
	default:
		return ""
	}
	v := line[i+len(key):]
	if end := bytes.IndexByte(v, ' '); end >= 0 {
		v = v[:end]
	}
	return strings.Trim(string(v), `"`)
}

// readStages times the failover's stages of the streams the killed host
// owned from the processes' logs (confirms, from the bench, come last).
// A stage the logs do not show (a log level above it) is left out.
func readStages(cl *cluster.Cluster, killed time.Time, owned map[string]bool, confirms []time.Duration) (stageTimes, error) {
	var st stageTimes
	var paths []string
	for i := range cl.Coordinators() {
		paths = append(paths, cl.Coordinator(i).LogPath)
	}
	for i := range cl.Hosts() {
		paths = append(paths, cl.Host(i).LogPath)
	}
	got := make([]map[string]time.Duration, len(failoverStages))
	for i := range got {
		got[i] = map[string]time.Duration{}
	}
	for _, p := range paths {
		if err := firstAfterFile(p, killed, owned, got); err != nil {
			return st, err
		}
	}
	for i, s := range failoverStages {
		if len(got[i]) > 0 {
			st.add(s.name, slices.Collect(maps.Values(got[i])))
		}
	}
	st.add("confirmed", slices.Clone(confirms))
	return st, nil
}

// firstAfterFile is firstAfter over the log at path, for every stage.
func firstAfterFile(path string, since time.Time, streams map[string]bool, into []map[string]time.Duration) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("stages: %w", err)
	}
	defer func() { _ = f.Close() }()
	if err := firstAfter(f, since, streams, failoverStages, into); err != nil {
		return fmt.Errorf("stages: read %s: %w", path, err)
	}
	return nil
}

func (st *stageTimes) add(name string, ds []time.Duration) {
	slices.Sort(ds)
	st.names = append(st.names, name)
	st.times = append(st.times, ds)
}

// write prints one line per stage: how many owned streams reached it and
// when, p10 / p50 / p99 / max after the kill.
func (st stageTimes) write(w io.Writer) {
	if len(st.names) == 0 {
		return
	}
	ignoreWrite(fmt.Fprintf(w, "stages of the owned streams (from the logs; ms after the kill):\n"))
	for i, name := range st.names {
		ds := st.times[i]
		ignoreWrite(fmt.Fprintf(w, "  %-10s %5d  p10 %5d  p50 %5d  p99 %5d  max %5d\n", name, len(ds),
			bench.Quantile(ds, 0.1).Milliseconds(), bench.Quantile(ds, 0.5).Milliseconds(),
			bench.Quantile(ds, 0.99).Milliseconds(), bench.Quantile(ds, 1).Milliseconds()))
	}
}
