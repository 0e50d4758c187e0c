package bench

import (
	"testing"
	"time"
)

func TestLongestGap(t *testing.T) {
	t0 := time.Unix(100, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, c := range []struct {
		name string
		ts   []time.Time
		want time.Duration
		from int // ms: where the gap begins
	}{
		{"steady", []time.Time{at(10), at(20), at(30), at(40), at(50), at(60), at(70), at(80), at(90)}, 10 * time.Millisecond, 0},
		{"a hole", []time.Time{at(10), at(20), at(65), at(70), at(80), at(90)}, 45 * time.Millisecond, 20},
		{"outside the window ignored", []time.Time{at(-50), at(10), at(90), at(150)}, 80 * time.Millisecond, 10},
		{"nothing: the whole window", nil, 100 * time.Millisecond, 0},
	} {
		got, from := longestGap(c.ts, at(0), at(100))
		if got != c.want || !from.Equal(at(c.from)) {
			t.Errorf("%s: %v from %v, want %v from %v", c.name, got, from.Sub(t0), c.want, time.Duration(c.from)*time.Millisecond)
		}
	}
}
