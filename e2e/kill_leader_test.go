package e2e

import (
	"context"
	"syscall"
	"testing"

	"github.com/brook-streams/brook/e2e/internal/workload"
	"github.com/brook-streams/brook/pkg/wire"
)

// TestKillLeaderDuringRecovery: SIGKILL the coordinator Raft leader in the
// middle of a recovery; the next leader finishes it.
//
// Phase 1: the owner and one follower die, so the recovery waits for seal
// answers (R=2, one copy left); the leader's worker records the wait; the
// leader is killed; the follower comes back; the new leader's worker seals
// it and commits. Phase 2: the new owner and the (new) leader are killed at
// once; the next leader records the recovery and finishes it. The killed
// coordinators and hosts come back; the stream holds every confirmed
// record.
//
// It catches: a pending recovery that lives only in the leader's memory, a
// worker that does not resume on a new leader, a stale worker committing
// twice, and a controller that needs the old leader's liveness view.
func TestKillLeaderDuringRecovery(t *testing.T) {
	e := newEnv(t, opts{})
	const stream = "kill-leader"
	before := e.createStream(stream, 3)
	epoch := before.Assignment.Epoch
	owner, f1, f2 := before.Assignment.Owner, before.Assignment.Followers[0], before.Assignment.Followers[1]

	led := workload.NewLedger()
	ld := e.load(stream, "kl", led)
	defer func() { _ = ld.Stop() }()
	e.waitConfirms(led, 150, epoch)

	// Phase 1: a recovery that waits for answers, its leader killed.
	e.signal(e.host(owner), syscall.SIGKILL)
	e.signal(e.host(f1), syscall.SIGKILL)
	waiting := e.waitInfo(stream, "the recovery waiting for seal answers", func(i wire.StreamInfo) (bool, error) {
		return i.Recovery != nil && i.Recovery.Wait != nil && i.Recovery.Wait.Kind == "answers", nil
	})
	transition := waiting.Recovery.Transition
	if w := waiting.Recovery.Wait; w.Answered != 1 || w.Needed != 2 {
		t.Fatalf("wait %+v: want 1 of 2 answers (only %s lives)", *w, f2)
	}
	leader := e.leader()
	e.logf("recovery %d waits for answers under leader %s", transition, leader.Name)
	e.signal(leader, syscall.SIGKILL)
	e.restart(e.host(f1))
	after := e.waitServingAt(stream, epoch+1, owner)
	next := e.leader()
	if next == leader {
		t.Fatalf("%s leads again although it was killed", leader.Name)
	}
	e.logf("leader %s finished the recovery: %s owns at epoch %d, starts %v", next.Name, after.Assignment.Owner, epoch+1, after.Starts)
	if len(after.Starts) != len(before.Starts)+1 {
		t.Fatalf("history starts %v after one recovery from %v", after.Starts, before.Starts)
	}
	e.waitConfirms(led, 100, epoch+1)
	e.restart(leader)
	e.restart(e.host(owner))
	e.waitFollower(stream, owner, epoch+1)

	// Phase 2: the owner and the leader die together.
	owner2 := after.Assignment.Owner
	leader2 := e.leader()
	e.signal(e.host(owner2), syscall.SIGKILL)
	e.signal(leader2, syscall.SIGKILL)
	again := e.waitServingAt(stream, epoch+2, owner2)
	e.logf("leader %s finished the second recovery: %s owns at epoch %d", e.leader().Name, again.Assignment.Owner, epoch+2)
	e.waitConfirms(led, 100, epoch+2)
	e.restart(leader2)
	e.restart(e.host(owner2))
	e.waitFollower(stream, owner2, epoch+2)
	e.poll("every coordinator healthy", waitLong, func(ctx context.Context) (bool, string, error) {
		for i := range e.c.Coordinators() {
			if p := e.c.Coordinator(i); !p.Healthy(ctx) {
				return false, p.Name + " not healthy", nil
			}
		}
		return true, "", nil
	})

	e.stopLoad(ld, led)
	for _, n := range again.Assignment.Copies() {
		e.waitCaughtUp(stream, n)
	}
	e.waitCaughtUp(stream, owner2)
	rd := workload.NewReader(e.cl, stream, "kill-leader-reader")
	e.verify(stream, led, rd, workload.CheckConfig{})
	if final := e.info(stream); final.Assignment.Epoch != epoch+2 || len(final.Starts) != len(before.Starts)+2 {
		t.Fatalf("two recoveries should leave epoch %d and two more starts: %s", epoch+2, describe(final))
	}
}
