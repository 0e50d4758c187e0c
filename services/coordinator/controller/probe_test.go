package controller

import (
	"testing"
	"time"
)

// A TTL expiry waits for the host's answer to a probe: no responders (its
// subscriptions are gone) and no answer within the bound expire it; an
// answer from the incarnation being expired withdraws the expiry; one from
// another incarnation means the registered process is gone.
func TestExpireAfterProbe(t *testing.T) {
	for _, c := range []struct {
		what     string
		outcome  ProbeOutcome
		answered uint64
		want     bool
	}{
		{"no responders", ProbeNoResponders, 0, true},
		{"answer from the incarnation expired", ProbeAnswered, 7, false},
		{"no answer within the bound", ProbeTimedOut, 0, true},
		{"answer from another incarnation", ProbeAnswered, 8, true},
		{"probe aborted", ProbeAborted, 0, false},
	} {
		if got := ExpireAfterProbe(c.outcome, 7, c.answered); got != c.want {
			t.Errorf("%s (%s): expire %v, want %v", c.what, c.outcome, got, c.want)
		}
	}
}

// A node whose TTL expiry waits for a probe is not expired by TTL (nor
// are its streams failed over) while the probe runs; a disconnect
// advisory about it still expires it.
func TestProbingNodeIsNotExpiredByTTL(t *testing.T) {
	f := newFixture(t, "h1", "h2")
	f.create("s", 2, "h1", "h2")
	f.beat("h2", t0.Add(time.Second))
	if a := find(f.plan(t0.Add(2*time.Second)), ActExpire, "h1"); a == nil || a.Reason != DetectTTL {
		t.Fatalf("no TTL expiry without a probe")
	}
	f.live.Probing = map[string]bool{"h1": true}
	if acts := f.plan(t0.Add(2 * time.Second)); len(acts) != 0 {
		t.Fatalf("while probing: %s", kinds(acts))
	}
	if l := Losing(f.s, f.live, t0.Add(2*time.Second), params); len(l) != 0 {
		t.Fatalf("losing while probing: %v", l)
	}
	seen := f.live.Nodes["h1"]
	seen.DisconnectedAt = t0.Add(1500 * time.Millisecond)
	f.live.Nodes["h1"] = seen
	acts := f.plan(t0.Add(2 * time.Second))
	if a := find(acts, ActExpire, "h1"); a == nil || a.Reason != DetectAdvisory || find(acts, ActRecover, "s") == nil {
		t.Fatalf("advisory while probing: %s", kinds(acts))
	}
}

// The probe's wait: the floor on a quiet machine, twice the recent
// lateness on a loaded one, never past the bound.
func TestProbeWait(t *testing.T) {
	for _, c := range []struct {
		late, bound, want time.Duration
	}{
		{0, time.Second, ProbeWaitFloor},
		{ProbeWaitFloor / 2, time.Second, ProbeWaitFloor},
		{300 * time.Millisecond, time.Second, 600 * time.Millisecond},
		{700 * time.Millisecond, time.Second, time.Second},
		{5 * time.Second, 3 * time.Second, 3 * time.Second},
		{0, 50 * time.Millisecond, 50 * time.Millisecond},
	} {
		if got := ProbeWait(c.late, c.bound); got != c.want {
			t.Errorf("ProbeWait(%v, %v) = %v, want %v", c.late, c.bound, got, c.want)
		}
	}
}

func TestAdvisoryGrace(t *testing.T) {
	for _, c := range []struct {
		grace, late, bound, want time.Duration
	}{
		{100 * time.Millisecond, 0, time.Second, 100 * time.Millisecond},
		{100 * time.Millisecond, 30 * time.Millisecond, time.Second, 100 * time.Millisecond},
		{100 * time.Millisecond, 200 * time.Millisecond, time.Second, 400 * time.Millisecond},
		{100 * time.Millisecond, 2 * time.Second, time.Second, time.Second},
		{2 * time.Second, 2 * time.Second, time.Second, 2 * time.Second}, // never under the configured grace
	} {
		if got := AdvisoryGrace(c.grace, c.late, c.bound); got != c.want {
			t.Errorf("AdvisoryGrace(%v, %v, %v) = %v, want %v", c.grace, c.late, c.bound, got, c.want)
		}
	}
}
