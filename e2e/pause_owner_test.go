package e2e

import (
	"syscall"
	"testing"
	"time"

	"github.com/brook-streams/brook/e2e/internal/workload"
)

// TestPauseOwner: SIGSTOP the owner for longer than the TTL; the stream
// fails over meanwhile. Then SIGCONT: the paused owner wakes up believing
// it still owns the stream at the old epoch, and still subscribed to its
// subjects, but it must not confirm anything: every confirm received after
// the SIGCONT is at the new epoch, and no record is confirmed at the old
// epoch after the failover's commit (which happened during the pause). It
// then rejoins as a follower, cut back to the new owner's history.
//
// It catches: a stale owner confirming at an old epoch (a follower or a
// sealed copy acknowledging an older epoch, or an owner confirming alone),
// and a woken owner that never notices it lost the stream.
func TestPauseOwner(t *testing.T) {
	e := newEnv(t, opts{})
	const stream = "pause-owner"
	before := e.createStream(stream, 3)
	epoch, oldOwner := before.Assignment.Epoch, before.Assignment.Owner

	led := workload.NewLedger()
	ld := e.load(stream, "po", led)
	defer func() { _ = ld.Stop() }()
	e.waitConfirms(led, 200, epoch)

	paused := time.Now()
	e.signal(e.host(oldOwner), syscall.SIGSTOP)
	after := e.waitServingAt(stream, epoch+1, oldOwner)
	// The commit happened before this, while the owner was paused; any
	// confirm its last moments sent is long delivered by now.
	committed := time.Now()
	e.waitConfirms(led, 100, epoch+1)
	if d := time.Since(paused); d <= ttl {
		t.Fatalf("the failover completed %v after the pause, within the ttl %v: the test did not pause for longer than the ttl", d, ttl)
	}
	e.logf("failed over to %s at epoch %d while %s was paused", after.Assignment.Owner, epoch+1, oldOwner)

	cont := time.Now()
	e.signal(e.host(oldOwner), syscall.SIGCONT)
	e.waitFollower(stream, oldOwner, epoch+1)
	e.logf("%s follows again", oldOwner)
	e.waitConfirms(led, 200, epoch+1)

	e.stopLoad(ld, led)
	e.waitCaughtUp(stream, oldOwner)

	var stale []workload.Outcome
	for _, o := range led.Outcomes() {
		if o.Confirmed && o.Done.After(cont) && o.Confirm.Epoch != epoch+1 {
			stale = append(stale, o)
		}
	}
	if len(stale) > 0 {
		t.Fatalf("%d confirms after the SIGCONT were not at the new epoch %d; first: %s at offset %d epoch %d",
			len(stale), epoch+1, stale[0].ID, stale[0].Confirm.Offset, stale[0].Confirm.Epoch)
	}
	if n := led.Count(func(o workload.Outcome) bool {
		return o.Confirmed && o.Confirm.Epoch == epoch && o.Done.After(committed)
	}); n != 0 {
		t.Fatalf("%d records were confirmed at the old epoch %d after the failover's commit", n, epoch)
	}
	rd := workload.NewReader(e.cl, stream, "pause-owner-reader")
	e.verify(stream, led, rd, workload.CheckConfig{})
	if final := e.info(stream); final.Assignment.Epoch != epoch+1 {
		t.Fatalf("the woken owner caused another ownership change: %s", describe(final))
	}
}
