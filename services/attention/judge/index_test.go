package judge

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/brook-streams/brook/pkg/wire"
)

// copyInScan is the lookup the index replaced: the first copy of stream in
// the heartbeat's order whose id matches (0 on either side matches).
func copyInScan(copies []wire.CopyStatus, stream string, id uint64) *wire.CopyStatus {
	for i := range copies {
		c := &copies[i]
		if c.Stream == stream && (id == 0 || c.StreamID == 0 || c.StreamID == id) {
			return c
		}
	}
	return nil
}

// The index finds, for any heartbeat (sorted as a watcher rebuilds it, or
// in any order with repeated names and unknown ids, as a test or an older
// host may send it) and any lookup, the very copy a scan finds.
func TestCopyIndexFindsWhatAScanFinds(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 25))
		copies := make([]wire.CopyStatus, rng.IntN(30))
		for i := range copies {
			copies[i] = wire.CopyStatus{Stream: fmt.Sprintf("s%d", rng.IntN(12)), StreamID: uint64(rng.IntN(3)), RecordTail: uint64(i)}
		}
		if seed%2 == 0 {
			slices.SortStableFunc(copies, func(a, b wire.CopyStatus) int { return cmpString(a.Stream, b.Stream) })
		}
		x := newCopyIndex(copies)
		for q := range 40 {
			stream, id := fmt.Sprintf("s%d", rng.IntN(14)), uint64(rng.IntN(3))
			want, got := copyInScan(copies, stream, id), x.find(stream, id)
			if want != got {
				t.Fatalf("seed %d lookup %d (%s, id %d) in %v: index finds %v, a scan %v", seed, q, stream, id, copies, got, want)
			}
		}
	}
}
