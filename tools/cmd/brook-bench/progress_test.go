package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/brook-streams/brook/tools/bench"
)

// TestProgressAsLines: off a terminal the bench's progress is one line per
// report, without carriage returns; on a terminal it is redrawn with \r.
func TestProgressAsLines(t *testing.T) {
	reports := []bench.Progress{
		{Elapsed: time.Second, Confirmed: 1000},
		{Elapsed: 2 * time.Second, Confirmed: 2100, Errors: 3, Killed: true},
	}
	var b bytes.Buffer
	p := progressPrinter(&b, "brook", true)
	for _, r := range reports {
		p(r)
	}
	out := b.String()
	if strings.Contains(out, "\r") {
		t.Fatalf("line progress holds a carriage return: %q", out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "1000 confirmed") || !strings.Contains(lines[1], "2100 confirmed") ||
		!strings.Contains(lines[1], "(owner killed)") || strings.HasSuffix(lines[0], " ") {
		t.Fatalf("line progress %q, want one line per report", out)
	}

	b.Reset()
	p = progressPrinter(&b, "brook", false)
	for _, r := range reports {
		p(r)
	}
	if out := b.String(); strings.Count(out, "\r") != 2 || strings.Contains(out, "\n") {
		t.Fatalf("terminal progress %q, want two redraws on one line", out)
	}

	// A file is not a terminal.
	f, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	})
	if isTerminal(f) {
		t.Fatal("a file counted as a terminal")
	}
}
