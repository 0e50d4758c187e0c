package server

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/brook-streams/brook/pkg/wire"
)

func entries(kind string, n int) []wire.AttentionEntry {
	out := make([]wire.AttentionEntry, n)
	for i := range out {
		out[i] = wire.AttentionEntry{Kind: kind, Severity: wire.SeverityCritical, Stream: fmt.Sprintf("s%05d", i),
			Headline: fmt.Sprintf("s%05d is below its confirm policy", i)}
	}
	return out
}

// logLines runs logChanges over each list in turn and returns the log
// lines each call wrote.
func logLines(t *testing.T, lists ...[]wire.AttentionEntry) [][]string {
	t.Helper()
	var buf bytes.Buffer
	s := New(nil, Options{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	var out [][]string
	for _, l := range lists {
		buf.Reset()
		s.logChanges(l)
		out = append(out, strings.Split(strings.TrimSpace(buf.String()), "\n"))
	}
	return out
}

// A few entries that appear or clear are logged a line each, as before.
func TestLogChangesSmallPerEntry(t *testing.T) {
	few := entries(wire.AttentionBelowPolicy, 3)
	got := logLines(t, few, few[:1])
	if len(got[0]) != 3 || !strings.Contains(got[0][0], "event=listed") || !strings.Contains(got[0][0], "stream=s00000") ||
		!strings.Contains(got[0][0], `headline="s00000 is below`) {
		t.Errorf("listed: %q", got[0])
	}
	if len(got[1]) != 2 || !strings.Contains(got[1][0], "event=cleared") {
		t.Errorf("cleared: %q", got[1])
	}
}

// Thousands of entries appearing or clearing in one judging (a mass
// failover) are logged as one line per event and kind: the count, a few
// examples, whatever the number.
func TestLogChangesMassSummarised(t *testing.T) {
	below := entries(wire.AttentionBelowPolicy, 5000)
	lag := entries(wire.AttentionFollowerLag, 3000)
	for i := range lag {
		lag[i].Node = "h4"
	}
	both := append(append([]wire.AttentionEntry{}, below...), lag...)
	got := logLines(t, both, lag, nil)
	if len(got[0]) != 2 {
		t.Fatalf("listing 8000 entries of 2 kinds: %d lines: %q", len(got[0]), got[0])
	}
	for _, want := range []string{"event=listed", "kind=follower_not_catching_up", "count=3000", "examples=\"[s00000/h4 s00001/h4 s00002/h4]\"", "listed_now=8000"} {
		if !strings.Contains(got[0][0], want) {
			t.Errorf("summary %q lacks %q", got[0][0], want)
		}
	}
	if !strings.Contains(got[0][1], "kind=stream_below_confirm_policy") || !strings.Contains(got[0][1], "count=5000") ||
		!strings.Contains(got[0][1], `headline="s00000 is below`) {
		t.Errorf("summary %q", got[0][1])
	}
	if len(got[1]) != 1 || !strings.Contains(got[1][0], "event=cleared") || !strings.Contains(got[1][0], "count=5000") ||
		!strings.Contains(got[1][0], "examples=\"[s00000 s00001 s00002]\"") {
		t.Errorf("clearing 5000: %q", got[1])
	}
	if len(got[2]) != 1 || !strings.Contains(got[2][0], "count=3000") || !strings.Contains(got[2][0], "listed_now=0") {
		t.Errorf("clearing the rest: %q", got[2])
	}
}
