package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestFirstAfterTimesEachStreamsFirstLineAfterTheKill: of the lines that
// carry the stage's message, only those after the kill and naming a
// stream asked for count, each stream's first; a line before the kill,
// another message, another stream, a later repeat and an unreadable time
// do not.
func TestFirstAfterTimesEachStreamsFirstLineAfterTheKill(t *testing.T) {
	kill := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	logs := strings.Join([]string{
		`time=2026-12-06T09:59:59.900Z level=WARN msg="recovery recorded" replica_id=1 stream=a transition=1`,
		`time=2026-12-06T10:00:00.700Z level=WARN msg="recovery recorded" replica_id=1 stream=a transition=2`,
		`time=2026-12-06T10:00:01.200Z level=WARN msg="recovery recorded" replica_id=2 stream=a transition=3`,
		`time=2026-12-06T10:00:00.800Z level=WARN msg="recovery committed" replica_id=1 stream=b`,
		`time=2026-12-06T10:00:00.900Z level=WARN msg="recovery recorded" replica_id=1 stream=c`,
		`time=2026-12-06T10:00:01.500Z level=WARN msg="recovery recorded" replica_id=1 stream=b old_stream=x`,
		`time=garbage level=WARN msg="recovery recorded" stream=d`,
		`level=WARN msg="recovery recorded" stream=d`,
	}, "\n")
	into := []map[string]time.Duration{{}}
	if err := firstAfter(strings.NewReader(logs), kill, map[string]bool{"a": true, "b": true, "d": true},
		[]failoverStage{{"recorded", `msg="recovery recorded"`}}, into); err != nil {
		t.Fatal(err)
	}
	got := into[0]
	want := map[string]time.Duration{"a": 700 * time.Millisecond, "b": 1500 * time.Millisecond}
	if len(got) != len(want) || got["a"] != want["a"] || got["b"] != want["b"] {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// TestStagesWrite: one line per stage with its count and quantiles; no
// stages, no lines.
func TestStagesWrite(t *testing.T) {
	var st stageTimes
	var b bytes.Buffer
	st.write(&b)
	if b.Len() != 0 {
		t.Fatalf("no stages wrote %q", b.String())
	}
	st.add("recorded", []time.Duration{300 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond})
	st.add("confirmed", []time.Duration{time.Second})
	st.write(&b)
	out := b.String()
	for _, want := range []string{"recorded       3  p10   100  p50   200  p99   200  max   300", "confirmed      1  p10  1000"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}
