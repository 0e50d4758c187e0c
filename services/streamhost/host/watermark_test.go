package host

import (
	"testing"

	"pgregory.net/rapid"
)

func TestWthHighest(t *testing.T) {
	cases := []struct {
		tails []uint64
		w     int
		want  uint64
	}{
		{[]uint64{10, 0, 0}, 1, 10},
		{[]uint64{10, 0, 0}, 2, 0},
		{[]uint64{10, 7, 3}, 2, 7},
		{[]uint64{10, 7, 3}, 3, 3},
		{[]uint64{10, 10, 3}, 2, 10},
		{[]uint64{5}, 1, 5},
		{[]uint64{5}, 2, 0}, // fewer copies than W confirm nothing
		{[]uint64{5, 6}, 0, 0},
	}
	for _, c := range cases {
		if got := wthHighest(c.tails, c.w); got != c.want {
			t.Errorf("wthHighest(%v, %d) = %d, want %d", c.tails, c.w, got, c.want)
		}
	}
}

// TestWatermarkHeldByW checks the defining property: every offset below the
// watermark is held by at least w copies, and the offset at the watermark
// (if any copy holds it) by fewer.
func TestWatermarkHeldByW(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tails := rapid.SliceOfN(rapid.Uint64Range(0, 50), 1, 7).Draw(t, "tails")
		w := rapid.IntRange(1, len(tails)).Draw(t, "w")
		wm := wthHighest(tails, w)
		if wm > 0 && holders(tails, wm-1) < w {
			t.Fatalf("offset %d below watermark held by %d < %d copies", wm-1, holders(tails, wm-1), w)
		}
		if holders(tails, wm) >= w {
			t.Fatalf("offset %d at watermark held by %d >= %d copies", wm, holders(tails, wm), w)
		}
	})
}
