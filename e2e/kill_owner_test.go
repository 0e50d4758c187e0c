package e2e

import (
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/brook-streams/brook/e2e/internal/workload"
	"github.com/brook-streams/brook/pkg/wire"
)

// TestKillOwner: SIGKILL the owner of a 3-copy majority_durable stream
// under a steady load of four publishers. The stream serves again at the
// next epoch without an operator; the old owner, restarted, rejoins as a
// follower without another recovery (same epoch, no new history start);
// every confirmed record is read back at its offset through a durable
// cursor that was reopened across the failover.
//
// It catches: a failover that loses confirmed records (a wrong seal
// threshold or a wrong choice of copy), a stream that waits for an
// operator, a returning owner that triggers a second recovery or keeps its
// unreplicated suffix, and a cursor that does not survive the failover.
func TestKillOwner(t *testing.T) {
	e := newEnv(t, opts{})
	const stream = "kill-owner"
	before := e.createStream(stream, 3)
	if before.W != 2 || before.R != 2 {
		t.Fatalf("3 copies under majority_durable: W=%d R=%d, want 2 and 2", before.W, before.R)
	}
	oldOwner := before.Assignment.Owner
	epoch := before.Assignment.Epoch

	led := workload.NewLedger()
	ld := e.load(stream, "ko", led)
	defer func() { _ = ld.Stop() }()
	e.waitConfirms(led, 200, epoch)

	// A reader consumes part of the stream and commits its cursor before
	// the failover; it resumes from that cursor after it.
	rd := workload.NewReader(e.cl, stream, "kill-owner-reader")
	if err := rd.ReadTo(e.ctx, 100); err != nil {
		t.Fatal(err)
	}
	if err := rd.Reopen(e.ctx); err != nil {
		t.Fatal(err)
	}

	killedAt := time.Now()
	e.signal(e.host(oldOwner), syscall.SIGKILL)
	e.waitConfirms(led, 200, epoch+1)
	after := e.waitServingAt(stream, epoch+1, oldOwner)
	var firstNew time.Time
	for _, o := range led.Outcomes() {
		if o.Confirmed && o.Confirm.Epoch == epoch+1 && (firstNew.IsZero() || o.Done.Before(firstNew)) {
			firstNew = o.Done
		}
	}
	e.logf("failover: %s -> %s at epoch %d; first confirm at the new epoch %v after the kill; starts %v",
		oldOwner, after.Assignment.Owner, after.Assignment.Epoch, firstNew.Sub(killedAt).Round(time.Millisecond), after.Starts)
	if after.Assignment.Includes(oldOwner) {
		t.Fatalf("the dead old owner %s is still in the assignment %+v", oldOwner, after.Assignment)
	}
	if len(after.Starts) == 0 || after.Starts[len(after.Starts)-1].Epoch != epoch+1 ||
		after.Starts[len(after.Starts)-1].Node != after.Assignment.Owner {
		t.Fatalf("no history start recorded for the new owner at epoch %d: %v", epoch+1, after.Starts)
	}
	starts := len(after.Starts)

	// The reader goes on through the failover from its committed cursor.
	if err := rd.ReadTo(e.ctx, rd.Position()+100); err != nil {
		t.Fatal(err)
	}

	// The old owner comes back and follows, under the load, without a
	// second recovery.
	e.restart(e.host(oldOwner))
	back := e.waitFollower(stream, oldOwner, epoch+1)
	if len(back.Starts) != starts {
		t.Fatalf("the rejoin appended a history start: %v", back.Starts)
	}
	if back.Recovery != nil {
		t.Fatalf("a recovery is pending after the rejoin: %+v", *back.Recovery)
	}
	if cs := back.Assignment.Copies(); len(cs) != 3 || !slices.Equal(cs[:2], after.Assignment.Copies()) {
		t.Fatalf("rejoin changed the assignment unexpectedly: before %v, after %v", after.Assignment.Copies(), back.Assignment.Copies())
	}
	e.logf("old owner %s follows at epoch %d: %v", oldOwner, back.Assignment.Epoch, back.Assignment.Copies())
	e.waitConfirms(led, 100, epoch+1)

	e.stopLoad(ld, led)
	e.waitCaughtUp(stream, oldOwner)
	e.verify(stream, led, rd, workload.CheckConfig{})

	final := e.info(stream)
	if final.Assignment.Epoch != epoch+1 || len(final.Starts) != starts || final.Status != wire.StatusServing {
		t.Fatalf("after the rejoin: %s; want epoch %d with %d starts", describe(final), epoch+1, starts)
	}
	if n := led.Count(func(o workload.Outcome) bool { return o.Confirmed && o.Confirm.Epoch > epoch+1 }); n != 0 {
		t.Fatalf("%d confirms past epoch %d", n, epoch+1)
	}
}
