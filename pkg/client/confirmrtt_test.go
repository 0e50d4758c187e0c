package client

import (
	"testing"
	"time"
)

const (
	testFloor   = 250 * time.Millisecond
	testCeiling = 6 * time.Second
)

func TestProbeDelayIsTheFloorWithoutSamples(t *testing.T) {
	var r confirmRTT
	if d := r.probeDelay(testFloor, testCeiling, time.Now()); d != testFloor {
		t.Fatalf("delay %v with no confirm seen, want the floor %v", d, testFloor)
	}
}

// Owners confirming in milliseconds leave the configured delay alone.
func TestProbeDelayStaysAtTheFloorForFastConfirms(t *testing.T) {
	var r confirmRTT
	now := time.Now()
	for i := range 1000 {
		now = now.Add(time.Millisecond)
		r.observe(time.Duration(1+i%5)*time.Millisecond, now)
	}
	if d := r.probeDelay(testFloor, testCeiling, now); d != testFloor {
		t.Fatalf("delay %v after confirms of 1-5 ms, want the floor %v", d, testFloor)
	}
}

// A burst: every attempt went out at once, so each confirm's round trip is
// the time since the burst began. The delay stays ahead of the round trips
// the client sees, so attempts of the burst are not probed for waiting
// their turn; and it never passes the ceiling.
func TestProbeDelayStaysAheadOfABurst(t *testing.T) {
	var r confirmRTT
	start := time.Now()
	for ms := 20; ms <= 8000; ms += 2 {
		now := start.Add(time.Duration(ms) * time.Millisecond)
		r.observe(time.Duration(ms)*time.Millisecond, now)
		d := r.probeDelay(testFloor, testCeiling, now)
		want := min(time.Duration(ms)*time.Millisecond, testCeiling)
		if d < want || d > testCeiling {
			t.Fatalf("at %d ms into the burst: delay %v, want between %v and the ceiling %v", ms, d, want, testCeiling)
		}
	}
}

// Once no confirm came for as long as the estimate, it no longer counts:
// a client whose owner died after a slow spell probes at the floor again.
func TestProbeDelayFallsBackAfterSilence(t *testing.T) {
	var r confirmRTT
	now := time.Now()
	for range 20 {
		now = now.Add(10 * time.Millisecond)
		r.observe(time.Second, now)
	}
	d := r.probeDelay(testFloor, testCeiling, now)
	if d <= time.Second {
		t.Fatalf("delay %v right after confirms of 1 s, want more than 1 s", d)
	}
	if got := r.probeDelay(testFloor, testCeiling, now.Add(d+time.Millisecond)); got != testFloor {
		t.Fatalf("delay %v once no confirm came for %v, want the floor %v", got, d, testFloor)
	}
	// One fast confirm after the silence starts a new estimate: the
	// slow spell's does not come back whole (review: it did, at 5.6 s
	// after a 3 s burst and ten minutes of silence).
	later := now.Add(10 * time.Minute)
	r.observe(2*time.Millisecond, later)
	if got := r.probeDelay(testFloor, testCeiling, later); got != testFloor {
		t.Fatalf("delay %v after one 2 ms confirm that followed ten minutes of silence, want the floor %v", got, testFloor)
	}
	now = later
	for range 20 {
		now = now.Add(10 * time.Millisecond)
		r.observe(time.Second, now)
	}
	// Fast confirms pull the estimate back down too.
	for range 100 {
		now = now.Add(time.Millisecond)
		r.observe(2*time.Millisecond, now)
	}
	if got := r.probeDelay(testFloor, testCeiling, now); got != testFloor {
		t.Fatalf("delay %v after 100 confirms of 2 ms, want the floor %v", got, testFloor)
	}
}
