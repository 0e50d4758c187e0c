package server

import (
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/internal/testutil"
)

// TestStreamUpdate drives stream.update through a coordinator and three
// fake hosts: retention and min_copies change in place and reach the hosts
// with the assignment; a policy that needs no more copies to confirm is
// stamped at once (no seal, same epoch); one that needs more is answered
// with a pending recovery (reason policy) that seals the copies and commits
// the new stamp at the next epoch; bad requests are refused with codes.
func TestStreamUpdate(t *testing.T) {
	c := newCluster(t, 1, func(o *Options) { o.NATSSystemURL = "" })
	hosts := map[string]*host{}
	for _, n := range []string{"h1", "h2", "h3"} {
		hosts[n] = c.host(n)
	}
	c.liveHosts(3)

	for body, code := range map[string]string{
		`{"stream":"s","copies":3,"min_copies":4}`:  wire.CodeBadRequest,
		`{"stream":"s","copies":3,"min_copies":-1}`: wire.CodeBadRequest,
	} {
		if e := c.admin(wire.VerbStreamCreate, body, nil); e == nil || e.Code != code {
			t.Fatalf("create %s: %v, want %s", body, e, code)
		}
	}
	var info wire.StreamInfo
	if e := c.admin(wire.VerbStreamCreate, wire.StreamCreate{Stream: "s", Copies: 3, MinCopies: 2}, &info); e != nil {
		t.Fatal(e)
	}
	if info.MinCopies != 2 || info.UnderReplicated != nil || info.W != 2 {
		t.Fatalf("created %+v", info)
	}
	epoch := info.Assignment.Epoch

	for body, code := range map[string]string{
		`{"stream":"s"}`:                               wire.CodeBadRequest, // nothing to change
		`{"stream":"s","min_copies":4}`:                wire.CodeBadRequest,
		`{"stream":"s","policy":"most"}`:               wire.CodeBadRequest,
		`{"stream":"s","copies":5}`:                    wire.CodeBadRequest, // not a field of the verb
		`{"stream":"nope","min_copies":1}`:             wire.CodeNotFound,
		`{"stream":"s","retention":{"max_age_ms":-5}}`: wire.CodeBadRequest,
	} {
		if e := c.admin(wire.VerbStreamUpdate, body, nil); e == nil || e.Code != code {
			t.Fatalf("update %s: %v, want %s", body, e, code)
		}
	}

	ret := wire.Retention{MaxRecords: 500}
	if e := c.admin(wire.VerbStreamUpdate, `{"stream":"s","retention":{"max_records":500},"min_copies":3}`, &info); e != nil {
		t.Fatal(e)
	}
	if info.Retention != ret || info.MinCopies != 3 || info.Assignment.Epoch != epoch || info.Recovery != nil {
		t.Fatalf("after the retention and floor update: %+v", info)
	}
	testutil.Eventually(t, 5*time.Second, "the hosts take the new retention and floor", func() bool {
		snap := hosts["h2"].snapshot()
		return len(snap.Assignments) == 1 && snap.Assignments[0].Retention == ret && snap.Assignments[0].MinCopies == 3
	})

	// majority (W=2) to every copy (W=3): through a recovery.
	if e := c.admin(wire.VerbStreamUpdate, wire.StreamUpdate{Stream: "s", Policy: "local_durable"}, &info); e != nil {
		t.Fatal(e)
	}
	switch r := info.Recovery; {
	case r != nil && r.Reason == "policy" && r.Proposal.Policy == "local_durable" && info.Assignment.Policy == "majority_durable":
		// The reply shows the recovery pending, the old stamp in force.
	case r == nil && info.Assignment.Epoch == epoch+1 && info.Assignment.Policy == "local_durable":
		// The recovery was quick enough to commit before the reply.
	default:
		t.Fatalf("an update needing more copies to confirm: %+v", info)
	}
	info = c.waitInfo("s", "the policy recovery committed", 10*time.Second, func(i wire.StreamInfo) bool {
		return i.Recovery == nil && i.Assignment.Epoch == epoch+1
	})
	if info.Policy != "local_durable" || info.W != 3 || info.R != 1 || len(info.Assignment.Copies()) != 3 || len(info.Starts) != 1 {
		t.Fatalf("after the policy recovery: %+v", info)
	}
	sealed := 0
	for _, h := range hosts {
		for _, s := range h.sealsSeen() {
			if s.Stream == "s" && s.FenceEpoch == epoch+1 {
				sealed++
			}
		}
	}
	if sealed < 3 {
		t.Fatalf("%d copies sealed for the policy change, want every copy of the old assignment", sealed)
	}

	// Every copy (W=3) to a majority (W=2): stamped at once.
	if e := c.admin(wire.VerbStreamUpdate, wire.StreamUpdate{Stream: "s", Policy: " majority_durable"}, &info); e != nil {
		t.Fatal(e)
	}
	if info.Recovery != nil || info.Assignment.Epoch != epoch+1 || info.Policy != "majority_durable" || info.W != 2 {
		t.Fatalf("an update needing fewer copies: %+v", info)
	}
	for n, h := range hosts {
		for _, s := range h.sealsSeen() {
			if s.FenceEpoch > epoch+1 {
				t.Fatalf("%s sealed at %d for a policy needing fewer copies", n, s.FenceEpoch)
			}
		}
	}
	testutil.Eventually(t, 5*time.Second, "the hosts take the new stamp", func() bool {
		snap := hosts["h3"].snapshot()
		return len(snap.Assignments) == 1 && snap.Assignments[0].Assignment.Policy == "majority_durable"
	})

	// Lose a copy: stream.info says it is under-replicated, by the same
	// rule as the metrics and attention.
	hosts[info.Assignment.Owner].kill()
	info = c.waitInfo("s", "the failover", 15*time.Second, func(i wire.StreamInfo) bool {
		return i.Recovery == nil && i.Assignment.Epoch == epoch+2
	})
	u := info.UnderReplicated
	if u == nil || u.Copies != 2 || u.W != 2 || u.LossLosesConfirmed || !u.PublishesRefused || u.SinceMS == 0 {
		t.Fatalf("2 of 3 copies under min_copies 3: %+v", u)
	}
}
