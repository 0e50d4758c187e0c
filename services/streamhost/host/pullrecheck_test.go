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
	f, ownerOfP := ownerOfOneStream(t)
	// The role stops (as in trouble) and asks for a re-apply; that pull
	// fails.
	stopRoleOfP(f)
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

// TestRecheckSurvivesAStaleSnapshot: a re-apply asked for (requestPull)
// whose pull is answered with an older snapshot than the one applied (a
// coordinator behind the leader serves pulls too) did not happen either:
// the ask must stay for the next pull. The stale answer was ignored as
// a success, the ask was lost, and the role stayed stopped until some
// later full pull.
func TestRecheckSurvivesAStaleSnapshot(t *testing.T) {
	f, ownerOfP := ownerOfOneStream(t)
	f.set(2, map[string]uint64{"p": 5}, one("p", 5, 1, []wire.HistoryStart{}, ""))
	for deadline := time.Now().Add(10 * time.Second); ; {
		f.host.mu.Lock()
		applied := f.host.applied
		f.host.mu.Unlock()
		if applied == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("version %d applied, want 2", applied)
		}
		time.Sleep(5 * time.Millisecond)
	}
	stopRoleOfP(f)
	// The coordinator that answers next is behind: it serves version 1.
	f.mu.Lock()
	current, pages := f.snap, f.pages
	lagging := current
	lagging.Version = 1
	f.snap = lagging
	f.mu.Unlock()
	f.host.requestPull()
	for deadline := time.Now().Add(10 * time.Second); ; {
		f.mu.Lock()
		served := f.pages > pages
		f.mu.Unlock()
		if served {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no pull after requestPull")
		}
		time.Sleep(time.Millisecond)
	}
	f.mu.Lock()
	f.snap = current
	f.mu.Unlock()
	// The next pull, asked by a notice of nothing new, re-applies p.
	f.host.requestNoticePull()
	f.waitHB("owner of p again after the stale snapshot", ownerOfP)
}

// ownerOfOneStream starts a host that pulls only when asked and owns
// stream p (version 1), and returns it with a heartbeat test of that.
func ownerOfOneStream(t *testing.T) (*fixture, func(wire.Heartbeat) bool) {
	f := newFixtureWith(t, fixtureOptions{pullInterval: time.Hour})
	f.set(1, map[string]uint64{"p": 5}, one("p", 5, 1, []wire.HistoryStart{}, ""))
	ownerOfP := func(hb wire.Heartbeat) bool {
		cs, ok := find(hb, "p")
		return ok && cs.Role == wire.RoleOwner && f.host.Ready()
	}
	f.waitHB("owner of p", ownerOfP)
	return f, ownerOfP
}

// stopRoleOfP stops p's role, as a role in trouble does, and waits until
// the heartbeat shows it stopped.
func stopRoleOfP(f *fixture) {
	r := f.host.replica("p")
	r.mu.Lock()
	r.stopRole(wire.CodeShuttingDown)
	r.mu.Unlock()
	f.waitHB("p's role stopped", func(hb wire.Heartbeat) bool {
		cs, ok := find(hb, "p")
		return ok && cs.Role == wire.RoleNone
	})
}
