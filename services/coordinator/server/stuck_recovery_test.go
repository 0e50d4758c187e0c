package server

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
)

// TestStuckRecoveriesDoNotDelayOthers: two of five hosts die; the streams
// that had copies on both get fewer than R answers and wait for good,
// while every other stream they owned recovers, whatever the order of
// their names (R2: with a bound on the workers, waiting recoveries held
// every slot and starved the rest).
func TestStuckRecoveriesDoNotDelayOthers(t *testing.T) {
	c := newCluster(t, 3, func(o *Options) { o.Balance.Off = true })
	var names []string
	for i := range 20 {
		names = append(names, fmt.Sprintf("s%02d", i))
	}
	hs := []string{"h1", "h2", "h3", "h4", "h5"}
	hosts := c.scriptedStreams(hs, names, 3, 0)
	// Two hosts to kill such that some owned streams are stuck (a copy on
	// each) and some recoverable, a stuck one named before a recoverable.
	var stuck, ok []string
	var ka, kb string
pairs:
	for x := range hs {
		for y := x + 1; y < len(hs); y++ {
			stuck, ok = nil, nil
			for _, n := range names {
				a := c.info(n).Assignment
				if a.Owner != hs[x] && a.Owner != hs[y] {
					continue
				}
				if cp := a.Copies(); slices.Contains(cp, hs[x]) && slices.Contains(cp, hs[y]) {
					stuck = append(stuck, n)
				} else {
					ok = append(ok, n)
				}
			}
			if len(stuck) > 0 && len(ok) > 0 && stuck[0] < ok[len(ok)-1] {
				ka, kb = hs[x], hs[y]
				break pairs
			}
		}
	}
	if ka == "" {
		t.Skip("no two hosts give both stuck and recoverable streams in this layout")
	}
	t.Logf("kill %s %s: stuck %v, recoverable %v", ka, kb, stuck, ok)
	hosts[ka].kill()
	hosts[kb].kill()
	for _, n := range ok {
		c.waitInfo(n, "its failover", 25*time.Second, func(i wire.StreamInfo) bool {
			return i.Recovery == nil && i.Assignment.Owner != ka && i.Assignment.Owner != kb
		})
	}
}
