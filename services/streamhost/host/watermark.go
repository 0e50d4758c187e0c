package host

import "slices"

// wthHighest returns the w-th highest of tails (w counted from 1), or 0 when
// fewer than w tails are given. With tails = {owner durable tail, each
// follower's acked tail} that is the confirmed watermark: every offset below
// it is held durably by at least w copies, because each copy holds a prefix.
func wthHighest(tails []uint64, w int) uint64 {
	if w < 1 || w > len(tails) {
		return 0
	}
	s := slices.Clone(tails)
	slices.Sort(s)
	return s[len(s)-w]
}

// holders counts how many of tails hold offset off (tail > off).
func holders(tails []uint64, off uint64) int {
	n := 0
	for _, t := range tails {
		if t > off {
			n++
		}
	}
	return n
}
