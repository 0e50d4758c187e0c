package server

import (
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/internal/testutil"
)

// TestStoppedReplicaTakesNoRequests: once a coordinator's shutdown
// returns, the NATS server routes no admin request to it: its
// subscriptions are gone at the server, not only in its client. Shutdown
// used to unsubscribe and close the connection without waiting for the
// server to read the UNSUBs or the close, so a request sent right after
// could still be routed to the stopped replica's queue subscription, and
// was lost: the caller waited out its whole timeout instead of reaching
// another replica (TestMoverDeathWaitsGraceOnLeaderClock's stream.info
// right after the mover's kill timed out at 10 s in about one run in ten,
// on main too). The window is short, so without the fix this fails only
// in some runs; the rounds make that likelier.
func TestStoppedReplicaTakesNoRequests(t *testing.T) {
	c := newCluster(t, 3, nil)
	acc, err := c.nats.Server.LookupAccount("BROOK")
	if err != nil {
		t.Fatal(err)
	}
	subj := wire.AdminSubject(wire.VerbStreamInfo)
	want := acc.Interest(subj)
	if want != len(c.servers) {
		t.Fatalf("%d subscriptions to %s with %d replicas", want, subj, len(c.servers))
	}
	for round := range 10 {
		id := c.notLeader()
		c.kill(id)
		if n := acc.Interest(subj); n != want-1 {
			t.Fatalf("round %d: %d subscriptions to %s right after replica %d stopped, want %d", round, n, subj, id, want-1)
		}
		c.start(id)
		testutil.Eventually(t, 5*time.Second, "the restarted replica subscribed", func() bool {
			return acc.Interest(subj) == want
		})
	}
}
