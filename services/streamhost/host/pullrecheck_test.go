package host

import (
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
)

// TestRecheckSurvivesAFailedPull: a role in trouble asks for a pull that
// re-applies every known assignment (requestPull). When that pull fails,
// the ask must stay for the next pull: it was lost, and a following pull
// of changes (which names no change of the stream) left the role stopped
// until some later full pull.
func TestRecheckSurvivesAFailedPull(t *testing.T) {
	f := newFixtureWith(t, fixtureOptions{pullInterval: time.Hour})
	f.set(1, map[string]uint64{"p": 5}, one("p", 5, 1, []wire.HistoryStart{}, ""))
	ownerOfP := func(hb wire.Heartbeat) bool {
		cs, ok := find(hb, "p")
		return ok && cs.Role == wire.RoleOwner && f.host.Ready()
	}
	f.waitHB("owner of p", ownerOfP)
	// The role stops (as in trouble) and asks for a re-apply; that pull
	// fails.
	r := f.host.replica("p")
	r.mu.Lock()
	r.stopRole(wire.CodeShuttingDown)
	r.mu.Unlock()
	f.waitHB("p's role stopped", func(hb wire.Heartbeat) bool {
		cs, ok := find(hb, "p")
		return ok && cs.Role == wire.RoleNone
	})
	f.mu.Lock()
	f.failPulls = 1
	f.mu.Unlock()
	f.host.requestPull()
	select {
	case <-f.pullFailed:
	case <-time.After(10 * time.Second):
		t.Fatal("no pull after requestPull")
	}
	// The next pull, asked by a notice of nothing new, re-applies p.
	f.host.requestNoticePull()
	f.waitHB("owner of p again after the failed pull", ownerOfP)
}
