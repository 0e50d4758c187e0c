package e2e

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/brook-streams/brook/e2e/internal/workload"
	"github.com/brook-streams/brook/pkg/wire"
)

// acceptLoss runs recovery.accept-loss through the client, retrying while
// the coordinators do not yet see the chosen copy live.
func (e *env) acceptLoss(stream, node string) {
	e.t.Helper()
	var ok wire.OK
	e.poll(fmt.Sprintf("accept-loss of %s onto %q", stream, node), waitLong, func(ctx context.Context) (bool, string, error) {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		r, err := e.c.Client().AcceptLoss(cctx, stream, node)
		if err != nil {
			return false, err.Error(), nil
		}
		ok = r
		return true, "", nil
	})
	e.logf("accept-loss of %s onto %q", stream, node)
	e.checkOK("recovery.accept-loss", ok)
}

// checkOK checks an admin write's reply against its schema
// (ok.reply.schema.json: ok is true, version set). It reports a mismatch
// and lets the suite go on.
func (e *env) checkOK(verb string, ok wire.OK) {
	e.t.Helper()
	if !ok.OK || ok.Version == 0 {
		e.t.Errorf("%s replied %+v; its schema (ok.reply.schema.json) says {\"ok\":true,\"version\":...}", verb, ok)
	}
}

// readPromptly reads every offset below end within a few seconds of a
// promotion, without a new publish: a promoted owner serves what its copy
// holds at once. The read goes on with the suite's patience either way, so
// the rest of the suite still runs.
func (e *env) readPromptly(rd *workload.Reader, end uint64, what string) {
	e.t.Helper()
	began := time.Now()
	ctx, cancel := context.WithTimeout(e.ctx, 3*time.Second)
	err := rd.ReadTo(ctx, end)
	cancel()
	if err != nil {
		e.t.Errorf("%s: a reader did not get the %d records the copy holds within 3s (position %d): the new owner's confirmed watermark stayed below its tail: %v",
			what, end, rd.Position(), err)
		ctx, cancel := context.WithTimeout(e.ctx, waitLong)
		defer cancel()
		if err := rd.ReadTo(ctx, end); err != nil {
			e.t.Fatalf("%s: read: %v", what, err)
		}
	}
	e.logf("%s: read %d records in %v", what, end, time.Since(began).Round(time.Millisecond))
}

// waitAllFollow waits until the stream serves with copies copies and every
// node in nodes follows it, published at the current epoch and not sealed
// (the epoch may move: copies that return to a single-copy stream come
// back through a "grow" recovery).
func (e *env) waitAllFollow(stream string, copies int, nodes ...string) wire.StreamInfo {
	e.t.Helper()
	return e.waitInfo(stream, fmt.Sprintf("%v following %s", nodes, stream), func(i wire.StreamInfo) (bool, error) {
		if i.Status != wire.StatusServing || len(i.Assignment.Copies()) != copies {
			return false, nil
		}
		for _, n := range nodes {
			ct, ok := copyTail(i, n)
			if !slices.Contains(i.Assignment.Followers, n) || !ok || !ct.Published || ct.Role != wire.RoleFollower ||
				ct.Epoch != i.Assignment.Epoch || ct.Sealed {
				return false, nil
			}
		}
		return true, nil
	})
}

// TestAcceptLoss: recovery.accept-loss end to end. A 3-copy stream loses
// its owner and a follower; the recovery waits for seal answers (R=2, one
// copy left) and attention lists the wait. The operator accepts the loss:
// the stream moves to the live copy without a seal and serves at once,
// reads included. The live copy had caught up, so nothing is below the
// confirmed prefix: no accepted-loss warning, and every confirmed record is
// still there. The dead copies return and follow again.
//
// It catches: accept-loss that needs a seal answer or picks a dead copy,
// a stream that does not serve after it (or serves no reads until an
// unrelated event), a spurious accepted-loss warning, returning copies
// that are not taken back.
func TestAcceptLoss(t *testing.T) {
	e := newEnv(t, opts{attention: true})
	const stream = "accept-loss"
	before := e.createStream(stream, 3)
	epoch, owner := before.Assignment.Epoch, before.Assignment.Owner
	f1, live := before.Assignment.Followers[0], before.Assignment.Followers[1]

	led := workload.NewLedger()
	ld := e.load(stream, "al1", led)
	e.waitConfirms(led, 200, epoch)
	e.stopLoad(ld, led)
	e.waitCaughtUp(stream, live)

	e.signal(e.host(owner), syscall.SIGKILL)
	e.signal(e.host(f1), syscall.SIGKILL)
	waiting := e.waitInfo(stream, "the recovery waiting for seal answers", func(i wire.StreamInfo) (bool, error) {
		return i.Recovery != nil && i.Recovery.Wait != nil && i.Recovery.Wait.Kind == "answers", nil
	})
	if waiting.Status != wire.StatusWaiting {
		t.Fatalf("status %q while the recovery waits for answers", waiting.Status)
	}
	en := e.waitEntry(wire.AttentionWaitAnswers, stream, func(en wire.AttentionEntry) bool { return true })
	if a, _ := figure(en, "answered"); a != 1 {
		t.Fatalf("entry %s: want 1 answer", jsonString(en))
	}
	if n, _ := figure(en, "needed"); n != 2 {
		t.Fatalf("entry %s: want 2 needed", jsonString(en))
	}
	e.logf("attention: %s", en.Headline)

	e.acceptLoss(stream, "")
	moved := e.waitServingAt(stream, epoch+1, owner)
	if moved.Assignment.Owner != live {
		t.Fatalf("accept-loss moved %s to %s; %s is the only live copy", stream, moved.Assignment.Owner, live)
	}
	if moved.AcceptedLoss != nil {
		t.Fatalf("accepted loss below the prefix reported, but %s had caught up and no start existed: %+v", live, *moved.AcceptedLoss)
	}
	last := moved.Starts[len(moved.Starts)-1]
	if last.Epoch != epoch+1 || last.Node != live {
		t.Fatalf("start of the accepted owner: %+v", last)
	}
	var end uint64
	for _, o := range led.Outcomes() {
		if o.Confirmed {
			end = max(end, o.Confirm.Offset+1)
		}
	}
	rd := workload.NewReader(e.cl, stream, "accept-loss-reader")
	e.readPromptly(rd, end, "after accept-loss onto "+live)
	e.waitNoEntry(wire.AttentionWaitAnswers, stream)
	if l, err := e.attention(e.ctx); err == nil {
		if en, ok := findEntry(l, wire.AttentionAcceptedLoss, stream); ok {
			t.Fatalf("accepted-loss warning without a loss: %s", jsonString(en))
		}
	}

	// It serves publishes too, alone (W=1 of one copy), and takes the
	// dead copies back when they return.
	ld = e.load(stream, "al2", led)
	defer func() { _ = ld.Stop() }()
	e.waitConfirms(led, 100, epoch+1)
	e.restart(e.host(owner))
	e.restart(e.host(f1))
	e.waitAllFollow(stream, 3, owner, f1)
	e.waitConfirms(led, 100, epoch+1)
	e.stopLoad(ld, led)
	e.waitCaughtUp(stream, owner)
	e.waitCaughtUp(stream, f1)
	e.verify(stream, led, rd, workload.CheckConfig{MinCopies: func(ep uint64) int {
		if ep == epoch+1 {
			return 1
		}
		return 2
	}})
}

// TestAcceptLossBelowPrefix: recovery.accept-loss onto a copy below the
// confirmed prefix. The stream is brought into a recovery that waits for
// the prefix (see setupPrefixWait); the operator moves it onto the lagging
// copy. The stream serves again; the loss is recorded (stream.info and an
// accepted_loss_below_prefix warning in attention, with the tails); clearing
// it removes the warning. The copies that return are cut back onto the new
// history: the confirmed records past the accepted copy's tail are lost, as
// accepted, and nothing else; the copy that held them holds the new
// owner's records afterwards.
//
// It catches: a loss that is not reported or cannot be cleared, returning
// copies that keep records past the accepted start (two histories at the
// same offsets), and losses beyond what was accepted.
func TestAcceptLossBelowPrefix(t *testing.T) {
	e := newEnv(t, opts{attention: true})
	pw := setupPrefixWait(e, "accept-below")
	e.waitEntry(wire.AttentionWaitPrefix, pw.stream, func(wire.AttentionEntry) bool { return true })

	e.acceptLoss(pw.stream, pw.lagger)
	moved := e.waitServingAt(pw.stream, pw.epoch+2, pw.took)
	al := moved.AcceptedLoss
	if moved.Assignment.Owner != pw.lagger || al == nil {
		t.Fatalf("after accept-loss onto %s: %s, accepted loss %+v", pw.lagger, describe(moved), al)
	}
	if al.Node != pw.lagger || al.Epoch != pw.epoch+2 || al.StartTail != pw.start.RecordTail || al.RecordTail >= pw.start.RecordTail {
		t.Fatalf("accepted loss %+v; want %s at epoch %d below the start %+v", *al, pw.lagger, pw.epoch+2, pw.start)
	}
	cut := al.RecordTail
	e.logf("accepted loss: %s at %d, below the prefix %d", pw.lagger, cut, al.StartTail)

	en := e.waitEntry(wire.AttentionAcceptedLoss, pw.stream, func(wire.AttentionEntry) bool { return true })
	if b, _ := figure(en, "records_below"); en.Node != pw.lagger || b != pw.start.RecordTail-cut {
		t.Fatalf("entry %s: want node %s and %d records below", jsonString(en), pw.lagger, pw.start.RecordTail-cut)
	}
	e.logf("attention: %s", en.Headline)
	e.waitNoEntry(wire.AttentionWaitPrefix, pw.stream)

	e.waitConfirms(pw.led, 100, pw.epoch+2)
	if ok, err := e.c.Client().ClearAttention(e.ctx, pw.stream); err != nil {
		t.Fatalf("attention.clear: %v", err)
	} else {
		e.checkOK("attention.clear", ok)
	}
	e.waitNoEntry(wire.AttentionAcceptedLoss, pw.stream)
	if i := e.info(pw.stream); i.AcceptedLoss != nil {
		t.Fatalf("accepted loss still recorded after attention.clear: %+v", *i.AcceptedLoss)
	}

	// The copies that held the lost records come back: both are cut to
	// the accepted start and follow.
	e.restart(e.host(pw.took))
	e.restart(e.host(pw.first))
	e.waitAllFollow(pw.stream, 3, pw.took, pw.first)
	e.waitConfirms(pw.led, 100, pw.epoch+2)
	e.stopLoad(pw.load, pw.led)
	e.waitCaughtUp(pw.stream, pw.took)
	e.waitCaughtUp(pw.stream, pw.first)

	rd := workload.NewReader(e.cl, pw.stream, "accept-below-reader")
	lost := func(o workload.Outcome) bool {
		return o.Confirm.Epoch < pw.epoch+2 && o.Confirm.Offset >= cut && o.Confirm.Offset < pw.start.RecordTail
	}
	rep := e.verify(pw.stream, pw.led, rd, workload.CheckConfig{
		MayLose: lost,
		MinCopies: func(ep uint64) int {
			if ep == pw.epoch+2 {
				return 1 // the accepted copy alone
			}
			return 2
		},
	})
	if rep.Lost == 0 {
		t.Fatalf("the accepted copy was %d records below the prefix, yet no confirmed record was lost: the setup did not produce a loss", pw.start.RecordTail-cut)
	}
	// The copy that took over at epoch+1 held the lost records; its own
	// copy now holds the new history at every offset.
	e.checkCopyContent(pw.stream, pw.took, rd.Delivered())
}

// TestWithdrawRecovery: recovery.withdraw end to end. A recovery waits
// for seal answers; the operator withdraws it; the controller records a new
// one with a higher transition, whose seal takes over the first one's on
// the live copy; it completes once the dead follower returns, without any
// other operator action, and every confirmed record is there.
//
// It catches: a withdraw that leaves the stream without a recovery, a new
// recovery that cannot take over the old seal (stale transition), and a
// commit of the withdrawn transition.
func TestWithdrawRecovery(t *testing.T) {
	e := newEnv(t, opts{})
	const stream = "withdraw"
	before := e.createStream(stream, 3)
	epoch, owner, f1 := before.Assignment.Epoch, before.Assignment.Owner, before.Assignment.Followers[0]

	led := workload.NewLedger()
	ld := e.load(stream, "wd", led)
	defer func() { _ = ld.Stop() }()
	e.waitConfirms(led, 200, epoch)

	e.signal(e.host(owner), syscall.SIGKILL)
	e.signal(e.host(f1), syscall.SIGKILL)
	first := e.waitInfo(stream, "the recovery waiting for seal answers", func(i wire.StreamInfo) (bool, error) {
		return i.Recovery != nil && i.Recovery.Wait != nil && i.Recovery.Wait.Kind == "answers", nil
	})
	t1 := first.Recovery.Transition
	if ok, err := e.c.Client().WithdrawRecovery(e.ctx, stream); err != nil {
		t.Fatalf("recovery.withdraw: %v", err)
	} else {
		e.checkOK("recovery.withdraw", ok)
	}
	e.logf("withdrew recovery %d", t1)
	second := e.waitInfo(stream, "a new recovery after the withdraw", func(i wire.StreamInfo) (bool, error) {
		if i.Assignment.Epoch != epoch {
			return false, fmt.Errorf("the stream moved to epoch %d while no copy but one could answer", i.Assignment.Epoch)
		}
		r := i.Recovery
		return r != nil && r.Transition > t1 && r.Wait != nil && r.Wait.Kind == "answers" && r.Wait.Answered == 1, nil
	})
	t2 := second.Recovery.Transition
	e.logf("recovery %d recorded after the withdraw and waits for answers (the live copy's seal taken over)", t2)

	e.restart(e.host(f1))
	after := e.waitServingAt(stream, epoch+1, owner)
	e.logf("recovery %d completed: %s owns at epoch %d", t2, after.Assignment.Owner, epoch+1)
	if len(after.Starts) != len(before.Starts)+1 {
		t.Fatalf("starts %v: want exactly one more than %v (the withdrawn recovery must not commit)", after.Starts, before.Starts)
	}
	e.waitConfirms(led, 100, epoch+1)
	e.restart(e.host(owner))
	e.waitFollower(stream, owner, epoch+1)
	e.stopLoad(ld, led)
	e.waitCaughtUp(stream, owner)
	rd := workload.NewReader(e.cl, stream, "withdraw-reader")
	e.verify(stream, led, rd, workload.CheckConfig{})
}
