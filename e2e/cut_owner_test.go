package e2e

import (
	"testing"

	"github.com/brook-streams/brook/e2e/internal/workload"
)

// TestCutOwner: cut the owner off NATS (its process keeps running, with
// whatever it appended last) and heal it after the failover. The old owner
// rejoins as a follower and, after catching up, holds exactly the new
// owner's records: no divergent suffix of its own survives. Its content is
// read back directly, by making it the only copy (the others killed,
// recovery.accept-loss onto it) and reading it from offset 0.
//
// It catches: a partitioned owner that keeps serving or confirming, a
// returning copy that is not cut back onto the new owner's history (its
// tail would still match, its bytes would not), and a follower that asks
// from a tail that is not a prefix of the owner's log.
func TestCutOwner(t *testing.T) {
	e := newEnv(t, opts{})
	const stream = "cut-owner"
	before := e.createStream(stream, 3)
	epoch, oldOwner := before.Assignment.Epoch, before.Assignment.Owner

	led := workload.NewLedger()
	ld := e.load(stream, "co", led)
	defer func() { _ = ld.Stop() }()
	e.waitConfirms(led, 200, epoch)

	e.c.CutHost(e.hostIndex(oldOwner))
	e.logf("cut %s off NATS", oldOwner)
	after := e.waitServingAt(stream, epoch+1, oldOwner)
	e.waitConfirms(led, 200, epoch+1)
	e.logf("failed over to %s at epoch %d, starts %v", after.Assignment.Owner, epoch+1, after.Starts)

	e.c.HealHost(e.hostIndex(oldOwner))
	e.logf("healed %s", oldOwner)
	e.waitFollower(stream, oldOwner, epoch+1)
	e.waitConfirms(led, 150, epoch+1)

	e.stopLoad(ld, led)
	e.waitCaughtUp(stream, oldOwner)
	rd := workload.NewReader(e.cl, stream, "cut-owner-reader")
	e.verify(stream, led, rd, workload.CheckConfig{})
	e.checkCopyContent(stream, oldOwner, rd.Delivered())
}
