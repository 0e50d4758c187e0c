package bench

import (
	"context"
	"slices"
	"sync"
	"time"
)

// MoveOwner wraps t for the planned-move mode (brook-bench
// --move-owner-at-secs): the bench's kill at Config.KillAt instead moves
// the stream's ownership with move (a planned move, stream.move), and the
// target measures the move's write gap: the longest time without a
// confirm from one second before the move began to one second after it
// answered. Under a steady load confirms come every few milliseconds, so
// that is how long writes stood still. It is reported in After as
// move_write_gap_ms, with the move's own time (move_took_ms) and what
// move answered (move).
func MoveOwner(t Target, move func(ctx context.Context) (string, error)) Target {
	return &movingTarget{Target: t, move: move}
}

type movingTarget struct {
	Target
	move func(ctx context.Context) (string, error)

	mu       sync.Mutex
	done     []time.Time // when each confirm arrived
	began    time.Time   // the move's request
	answered time.Time   // its answer
	said     string
	err      error
}

// Publish records when each confirm arrives.
func (m *movingTarget) Publish(ctx context.Context, data []byte) (uint64, error) {
	off, err := m.Target.Publish(ctx, data)
	if err == nil {
		now := time.Now()
		m.mu.Lock()
		m.done = append(m.done, now)
		m.mu.Unlock()
	}
	return off, err
}

// Kill moves the ownership instead; the bench calls it once, at KillAt.
func (m *movingTarget) Kill(ctx context.Context) (string, error) {
	began := time.Now()
	said, err := m.move(ctx)
	m.mu.Lock()
	m.began, m.answered, m.said, m.err = began, time.Now(), said, err
	m.mu.Unlock()
	return said, err
}

// After adds the move's figures to the target's.
func (m *movingTarget) After(ctx context.Context) map[string]any {
	out := m.Target.After(ctx)
	if out == nil {
		out = map[string]any{}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.began.IsZero() {
		return out
	}
	out["move"] = m.said
	if m.err != nil {
		out["move"] = "failed: " + m.err.Error()
	}
	out["move_took_ms"] = m.answered.Sub(m.began).Milliseconds()
	gap, at := longestGap(m.done, m.began.Add(-time.Second), m.answered.Add(time.Second))
	out["move_write_gap_ms"] = gap.Milliseconds()
	// Where the gap lies against the move's request (its last confirm
	// before, its first after), and the wall clock of its start, so that
	// it can be laid against the hosts' and coordinators' logs.
	out["move_write_gap_from_ms"] = at.Sub(m.began).Milliseconds()
	out["move_write_gap_to_ms"] = at.Add(gap).Sub(m.began).Milliseconds()
	out["move_write_gap_began_at"] = at.UTC().Format("15:04:05.000")
	return out
}

// longestGap is the longest time between two consecutive times of ts
// within [from, to], the window's ends counting as times, and when it
// began (the earlier of the two).
func longestGap(ts []time.Time, from, to time.Time) (gap time.Duration, at time.Time) {
	in := []time.Time{from, to}
	for _, t := range ts {
		if t.After(from) && t.Before(to) {
			in = append(in, t)
		}
	}
	slices.SortFunc(in, func(a, b time.Time) int { return a.Compare(b) })
	at = from
	for i := 1; i < len(in); i++ {
		if d := in[i].Sub(in[i-1]); d > gap {
			gap, at = d, in[i-1]
		}
	}
	return gap, at
}
