package wire

import (
	"math"
	"testing"
	"time"
)

// TestWaitUpTo: waits taken from requests are capped, never wrapped; near
// 2^63 milliseconds a plain conversion overflows into a negative or short
// duration.
func TestWaitUpTo(t *testing.T) {
	for _, c := range []struct {
		ms    int64
		limit time.Duration
		want  time.Duration
	}{
		{0, time.Second, 0},
		{-5, time.Second, 0},
		{math.MinInt64, time.Second, 0},
		{250, time.Second, 250 * time.Millisecond},
		{1000, time.Second, time.Second},
		{1001, time.Second, time.Second},
		{math.MaxInt64, MaxFetchWait, MaxFetchWait},
		{math.MaxInt64 / 1000, MaxFetchWait, MaxFetchWait},
		{1 << 62, MaxFetchWait, MaxFetchWait},
		{9223372036854, MaxFetchWait, MaxFetchWait}, // overflows time.Duration by a hair
		{500, 0, 0},
	} {
		if got := WaitUpTo(c.ms, c.limit); got != c.want {
			t.Errorf("WaitUpTo(%d, %v) = %v, want %v", c.ms, c.limit, got, c.want)
		}
	}
}
