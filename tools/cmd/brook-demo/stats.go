package main

import (
	"sync"
	"time"

	"github.com/brook-streams/brook/tools/bench"
	"github.com/brook-streams/brook/tools/cmd/brook-demo/brookload"
)

// confirmed is one confirmed publish.
type confirmed struct {
	Offset   uint64
	Sent, At time.Time
	// Resolved: found in the new owner's log after a failover left the
	// attempt unanswered.
	Resolved bool
}

// recorder collects the confirms of the publishers, the figures of the
// progress line and the first confirm of a publish begun after the kill.
type recorder struct {
	mu         sync.Mutex
	start      time.Time
	killAt     time.Time
	confirms   map[brookload.ID]confirmed
	errors     int
	firstAfter time.Time
	// recent holds the latencies of the last few progress ticks, for a
	// rate and p50 of the last second rather than of the whole run.
	recent [][]time.Duration
	// onFirstAfter is called once, outside the lock, with the first
	// confirm of a publish begun after the kill.
	onFirstAfter func(at, killAt time.Time)
}

const recentTicks = 4

func newRecorder(start time.Time) *recorder {
	return &recorder{start: start, confirms: map[brookload.ID]confirmed{}, recent: [][]time.Duration{nil}}
}

// markKill records the moment of the kill.
func (r *recorder) markKill(at time.Time) {
	r.mu.Lock()
	r.killAt = at
	r.mu.Unlock()
}

func (r *recorder) confirm(id brookload.ID, c confirmed) {
	r.mu.Lock()
	r.confirms[id] = c
	r.recent[len(r.recent)-1] = append(r.recent[len(r.recent)-1], c.At.Sub(c.Sent))
	var first func(time.Time, time.Time)
	killAt := r.killAt
	if !killAt.IsZero() && c.Sent.After(killAt) && r.firstAfter.IsZero() {
		r.firstAfter = c.At
		first = r.onFirstAfter
	}
	r.mu.Unlock()
	if first != nil {
		first(c.At, killAt)
	}
}

func (r *recorder) failed() {
	r.mu.Lock()
	r.errors++
	r.mu.Unlock()
}

// progress is what the progress line shows.
type progress struct {
	Elapsed   time.Duration
	Confirmed int
	Errors    int
	Rate      float64       // confirms per second over the last ticks
	P50       time.Duration // of the confirms of the last ticks
	SinceKill time.Duration // 0 before the kill
	Killed    bool
}

// tick closes the current tick and returns the progress figures.
func (r *recorder) tick(now time.Time, every time.Duration) progress {
	r.mu.Lock()
	defer r.mu.Unlock()
	var lat []time.Duration
	for _, b := range r.recent {
		lat = append(lat, b...)
	}
	p := progress{Elapsed: now.Sub(r.start), Confirmed: len(r.confirms), Errors: r.errors}
	if span := time.Duration(len(r.recent)) * every; span > 0 {
		p.Rate = float64(len(lat)) / span.Seconds()
	}
	p.P50 = bench.Quantile(lat, 0.5)
	if !r.killAt.IsZero() {
		p.Killed, p.SinceKill = true, now.Sub(r.killAt)
	}
	r.recent = append(r.recent, nil)
	if len(r.recent) > recentTicks {
		r.recent = r.recent[1:]
	}
	return p
}

// snapshot returns a copy of the confirms and the error count.
func (r *recorder) snapshot() (map[brookload.ID]confirmed, int, time.Time, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[brookload.ID]confirmed, len(r.confirms))
	for id, c := range r.confirms {
		out[id] = c
	}
	return out, r.errors, r.killAt, r.firstAfter
}
