package workload

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
)

// Outcome is how one publish ended, as its producer saw it.
type Outcome struct {
	ID   ID
	Data []byte
	// Sent is when the publish began, Done when it returned.
	Sent, Done time.Time
	// Confirmed says the owner confirmed it; Confirm is the confirm.
	Confirmed bool
	Confirm   wire.PublishConfirm
	// Err is why it was not confirmed. An unconfirmed record may or may
	// not have been kept.
	Err error
	// Stopped says the publish was cut short because its load stopped.
	Stopped bool
}

// Ledger records the outcome of every publish. It is safe for concurrent
// use.
type Ledger struct {
	mu       sync.Mutex
	outcomes []Outcome
	ids      map[ID]int // index in outcomes
	changed  chan struct{}
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{ids: make(map[ID]int), changed: make(chan struct{})}
}

// Record adds an outcome. An id is published once (the client retries
// inside one publish), so recording an id twice is a bug of the caller.
func (l *Ledger) Record(o Outcome) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, dup := l.ids[o.ID]; dup {
		return fmt.Errorf("ledger: %s recorded twice", o.ID)
	}
	l.ids[o.ID] = len(l.outcomes)
	l.outcomes = append(l.outcomes, o)
	close(l.changed)
	l.changed = make(chan struct{})
	return nil
}

// Outcomes returns a copy of every outcome, in the order they were recorded.
func (l *Ledger) Outcomes() []Outcome {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Outcome(nil), l.outcomes...)
}

// Lookup returns the outcome of id.
func (l *Ledger) Lookup(id ID) (Outcome, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i, ok := l.ids[id]
	if !ok {
		return Outcome{}, false
	}
	return l.outcomes[i], true
}

// Count returns how many outcomes match pred (all of them if pred is nil).
func (l *Ledger) Count(pred func(Outcome) bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, o := range l.outcomes {
		if pred == nil || pred(o) {
			n++
		}
	}
	return n
}

// WaitCount waits until at least n outcomes match pred, or ctx ends.
// Outcomes are only ever appended, so each wake scans just those recorded
// since the last one: a long run's waits cost what arrived, not what the
// ledger holds (a rescan under the lock on every record starved the
// in-process nats-servers of a 30-minute chaos run).
func (l *Ledger) WaitCount(ctx context.Context, n int, pred func(Outcome) bool) error {
	got, seen := 0, 0
	for {
		l.mu.Lock()
		ch := l.changed
		for _, o := range l.outcomes[seen:] {
			if pred == nil || pred(o) {
				got++
			}
		}
		seen = len(l.outcomes)
		l.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %d matching publish outcomes (have %d): %w", n, got, ctx.Err())
		case <-ch:
		}
	}
}

// Predicates for Count and WaitCount.

// ConfirmedAt matches confirms at epoch minEpoch or later.
func ConfirmedAt(minEpoch uint64) func(Outcome) bool {
	return func(o Outcome) bool { return o.Confirmed && o.Confirm.Epoch >= minEpoch }
}

// ConfirmedAfter matches confirms received after t.
func ConfirmedAfter(t time.Time) func(Outcome) bool {
	return func(o Outcome) bool { return o.Confirmed && o.Done.After(t) }
}

// FailedAfter matches publishes that failed after t, other than those cut
// short by stopping their load.
func FailedAfter(t time.Time) func(Outcome) bool {
	return func(o Outcome) bool { return !o.Confirmed && !o.Stopped && o.Done.After(t) }
}

// Stats summarizes a ledger.
type Stats struct {
	Published, Confirmed, Failed int
	// Stopped counts publishes cut short by stopping the load (not
	// counted in Failed).
	Stopped int
	// Epochs counts confirms per epoch.
	Epochs map[uint64]int
	// Errors counts failures by error code (wire.CodeOf).
	Errors map[string]int
}

// Stats returns the ledger's summary.
func (l *Ledger) Stats() Stats {
	s := Stats{Epochs: map[uint64]int{}, Errors: map[string]int{}}
	for _, o := range l.Outcomes() {
		s.Published++
		switch {
		case o.Confirmed:
			s.Confirmed++
			s.Epochs[o.Confirm.Epoch]++
		case o.Stopped:
			s.Stopped++
		default:
			s.Failed++
			s.Errors[wire.CodeOf(o.Err)]++
		}
	}
	return s
}

func (s Stats) String() string {
	return fmt.Sprintf("%d published, %d confirmed (by epoch %v), %d not confirmed (by code %v), %d cut short by the stop",
		s.Published, s.Confirmed, s.Epochs, s.Failed, s.Errors, s.Stopped)
}
