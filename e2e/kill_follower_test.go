package e2e

import (
	"syscall"
	"testing"
	"time"

	"github.com/brook-streams/brook/e2e/internal/workload"
	"github.com/brook-streams/brook/pkg/wire"
)

// TestKillFollower: SIGKILL a follower of a 3-copy majority_durable stream
// under load. Publishing keeps confirming at the same epoch without a
// single failed publish (the owner and the other follower are W=2); the
// follower restarts and catches up. To show it really holds the records
// and acknowledges new ones, the other follower is then killed: confirms
// go on, and now need the restarted one.
//
// It catches: an owner that waits for every copy instead of W, a follower
// loss that triggers a recovery, a restarted follower that does not resume
// from its own tails or never acknowledges again.
func TestKillFollower(t *testing.T) {
	e := newEnv(t, opts{})
	const stream = "kill-follower"
	before := e.createStream(stream, 3)
	epoch := before.Assignment.Epoch
	owner := before.Assignment.Owner
	victim, other := before.Assignment.Followers[0], before.Assignment.Followers[1]

	led := workload.NewLedger()
	ld := e.load(stream, "kf", led)
	defer func() { _ = ld.Stop() }()
	e.waitConfirms(led, 150, epoch)

	killedAt := time.Now()
	e.signal(e.host(victim), syscall.SIGKILL)
	e.waitConfirms(led, 200, epoch)
	// Long enough for the coordinators to expire the dead follower: its
	// loss must not move the stream.
	e.waitInfo(stream, victim+" silent for a ttl", func(i wire.StreamInfo) (bool, error) {
		if i.Assignment.Epoch != epoch || i.Recovery != nil {
			return false, errUnexpectedMove(i, epoch)
		}
		ct, ok := copyTail(i, victim)
		return !ok || !ct.Published || time.Duration(ct.AgeMS)*time.Millisecond > 2*ttl, nil
	})
	e.waitConfirms(led, 100, epoch)
	if n := led.Count(workload.FailedAfter(killedAt.Add(-time.Second))); n != 0 {
		t.Fatalf("%d publishes failed after a follower was killed: %v", n, led.Stats())
	}

	e.restart(e.host(victim))
	e.waitFollower(stream, victim, epoch)
	// Caught up under load: its tail reaches what the owner had when it
	// came back.
	ownerTail := func(i wire.StreamInfo) uint64 { ct, _ := copyTail(i, owner); return ct.RecordTail }
	target := ownerTail(e.info(stream))
	e.waitInfo(stream, victim+" past "+owner+"'s tail", func(i wire.StreamInfo) (bool, error) {
		if i.Assignment.Epoch != epoch || i.Recovery != nil {
			return false, errUnexpectedMove(i, epoch)
		}
		ct, _ := copyTail(i, victim)
		return ct.RecordTail >= target, nil
	})
	e.logf("%s caught up past %d", victim, target)

	// Now only the restarted follower can make W=2 with the owner.
	secondKill := time.Now()
	e.signal(e.host(other), syscall.SIGKILL)
	e.waitConfirms(led, 200, epoch)
	if n := led.Count(workload.FailedAfter(secondKill.Add(-time.Second))); n != 0 {
		t.Fatalf("%d publishes failed with only %s and the restarted %s: %v", n, owner, victim, led.Stats())
	}
	e.restart(e.host(other))
	e.waitFollower(stream, other, epoch)

	e.stopLoad(ld, led)
	e.waitCaughtUp(stream, victim)
	e.waitCaughtUp(stream, other)
	rd := workload.NewReader(e.cl, stream, "kill-follower-reader")
	e.verify(stream, led, rd, workload.CheckConfig{})

	final := e.info(stream)
	if final.Assignment.Epoch != epoch || final.Assignment.Owner != owner || len(final.Starts) != len(before.Starts) {
		t.Fatalf("the follower kills moved the stream: %s", describe(final))
	}
	if s := led.Stats(); s.Failed != 0 || len(s.Epochs) != 1 {
		t.Fatalf("a follower kill was visible to publishers: %v", s)
	}
}
