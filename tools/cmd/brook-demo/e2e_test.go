package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for the demo's writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The demo end to end, with short publishing phases: it builds the
// services, starts the cluster as processes, kills the owner, and must
// reach a PASS verdict with every step of the failover on screen.
func TestDemoEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the process cluster in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	var out syncBuffer
	began := time.Now()
	sum, err := run(ctx, config{Dir: dir, Before: 2 * time.Second, After: 2 * time.Second, Publishers: 8}, &out)
	text := strings.ReplaceAll(out.String(), "\r", "\n")
	t.Logf("demo took %v; output:\n%s", time.Since(began).Round(time.Millisecond), text)
	if err != nil {
		t.Fatalf("demo: %v", err)
	}
	if !sum.Pass() {
		t.Errorf("verdict FAIL: %v", sum.Problems())
		if logs, _ := filepath.Glob(filepath.Join(dir, "logs", "*.log")); len(logs) > 0 {
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				t.Logf("----- %s (last 2000 bytes)\n%s", l, tailBytes(b, 2000))
			}
		}
	}
	if sum.Records == 0 || sum.Verify.Read < sum.Records {
		t.Errorf("%d confirmed, %d read back", sum.Records, sum.Verify.Read)
	}
	if sum.Unavailable <= 0 || sum.Unavailable > 10*time.Second {
		t.Errorf("write unavailability %v", sum.Unavailable)
	}
	if sum.Victim == "" || sum.NewOwner == "" || sum.NewOwner == sum.Victim || sum.Epoch != sum.OldEpoch+1 {
		t.Errorf("failover %s (epoch %d) -> %s (epoch %d)", sum.Victim, sum.OldEpoch, sum.NewOwner, sum.Epoch)
	}
	if len(sum.TraceID) != 32 {
		t.Errorf("failover trace id %q, want 32 hex digits", sum.TraceID)
	}
	for _, want := range []string{
		"SIGKILL " + sum.Victim,
		"new assignment committed: owner " + sum.NewOwner,
		"chose " + sum.NewOwner,
		"failover trace id " + sum.TraceID,
		"writes were unavailable for",
		"restarted " + sum.Victim,
		"assignment changed without recovery",
		"rejoined without another recovery",
		"confirmed  ", // the progress line
		"verdict      PASS",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// The seals are shown from the hosts' heartbeats; a recovery that
	// commits before any sealed copy beats (seen: 17 ms from pending to
	// commit) leaves none to show, and the watcher must then say so.
	if !strings.Contains(text, "sealed its copy") && !strings.Contains(text, "no sealed copy reported its tails in time") {
		t.Error("output shows neither a sealed copy nor that none was seen in time")
	}
	// A recovery can be recorded and committed between two polls; the
	// watcher must then say so rather than stay silent.
	if !strings.Contains(text, "pending recovery committed") && !strings.Contains(text, "between two polls") {
		t.Error("output shows neither the pending recovery nor that it was missed")
	}
}

func tailBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
