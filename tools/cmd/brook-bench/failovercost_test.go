package main

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/client"
)

// withoutProc points the bench's /proc at an empty directory for the test.
func withoutProc(t *testing.T) {
	old := procRoot
	procRoot = t.TempDir()
	t.Cleanup(func() { procRoot = old })
}

// countingStats is a client's Stats that counts one more publish attempt
// at each call.
func countingStats() func() client.Stats {
	var n uint64
	return func() client.Stats {
		n++
		return client.Stats{PublishAttempts: n}
	}
}

// Without /proc the failover cost warns and measures the client's
// requests alone: the mass failover went on to its serving times instead
// of aborting.
func TestFailoverCostWithoutProc(t *testing.T) {
	withoutProc(t)
	var logged bytes.Buffer
	m, err := startCost([]namedPid{{Name: "self", Pid: os.Getpid()}}, countingStats(), "", slog.New(slog.NewTextHandler(&logged, nil)))
	if err != nil {
		t.Fatalf("start without /proc: %v", err)
	}
	if !strings.Contains(logged.String(), "no CPU figures") {
		t.Errorf("no warning logged: %q", logged.String())
	}
	f, err := m.measure(slog.New(slog.DiscardHandler), func() error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if f.NoCPU == "" || f.Procs != nil || f.Client.PublishAttempts != 1 || f.Window <= 0 {
		t.Fatalf("cost without /proc: %+v, want no CPU figures (and why), one publish attempt and the window", f)
	}
	var out bytes.Buffer
	f.write(&out)
	if s := out.String(); !strings.Contains(s, "no CPU figures") || !strings.Contains(s, "1 publish attempts") || strings.Contains(s, "machine:") {
		t.Fatalf("written:\n%s", s)
	}
}

// The CPU profile stops whatever the failover window returns: a failed
// kill left it running (and the next profile could not start).
func TestFailoverCostStopsTheProfileOnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.pprof")
	m, err := startCost([]namedPid{{Name: "self", Pid: os.Getpid()}}, countingStats(), path, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	killFailed := errors.New("kill failed")
	if _, err := m.measure(slog.New(slog.DiscardHandler), func() error { return killFailed }); !errors.Is(err, killFailed) {
		t.Fatalf("measure: %v, want the window's error", err)
	}
	if err := pprof.StartCPUProfile(io.Discard); err != nil {
		t.Fatalf("the failover's CPU profile still runs: %v", err)
	}
	pprof.StopCPUProfile()
	if st, err := os.Stat(path); err != nil || st.Size() == 0 {
		t.Fatalf("profile %s not written: %v", path, err)
	}
	if err := m.stop(); err != nil {
		t.Fatalf("a second stop: %v", err)
	}
}

// An idle sample without /proc says so (errProc, which the mass failover
// only warns about) after taking its window, so the heartbeats counted
// beside it still cover the window.
func TestSampleIdleWithoutProc(t *testing.T) {
	withoutProc(t)
	const window = 50 * time.Millisecond
	start := time.Now()
	_, err := sampleIdle(t.Context(), []namedPid{{Name: "self", Pid: os.Getpid()}}, window)
	if !errors.Is(err, errProc) {
		t.Fatalf("sample without /proc: %v, want errProc", err)
	}
	if took := time.Since(start); took < window {
		t.Fatalf("returned after %v, before its %v window", took, window)
	}
}

// The failover's cost says why the client's retries went.
func TestFailoverCostWritesTheRetriesByReason(t *testing.T) {
	f := failoverCost{Window: time.Second, NoCPU: "test", Client: client.Stats{Retries: 10, RetriesNoResponders: 5, RetriesTimedOut: 2, RetriesOwnerLost: 1, RetriesOther: 2}}
	var out bytes.Buffer
	f.write(&out)
	want := "client retries after: 5 no responders, 2 timeouts, 1 attempts abandoned for a newer owner, 2 refusals or reconnects"
	if !strings.Contains(out.String(), want) {
		t.Fatalf("written:\n%s\nwant a line with %q", out.String(), want)
	}
	// A Stats not from the client may hold more reasons than retries:
	// each is written as it is.
	f.Client = client.Stats{Retries: 2, RetriesNoResponders: 3}
	out.Reset()
	f.write(&out)
	if want := "3 no responders, 0 timeouts, 0 attempts abandoned for a newer owner, 0 refusals or reconnects"; !strings.Contains(out.String(), want) {
		t.Fatalf("written:\n%s\nwant a line with %q", out.String(), want)
	}
}
