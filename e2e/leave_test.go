package e2e

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/brook-streams/brook/e2e/internal/workload"
	"github.com/brook-streams/brook/pkg/wire"
)

// TestLeaveWithLaggingFollower: a graceful leave (SIGTERM) of the owner of a
// 3-copy majority_durable stream while one follower (B) is down and the
// other (C) lags behind the owner's tail: C is paused while the owner
// writes records it cannot confirm (W = 2, B down), the owner is told to
// stop while C is still paused, and C is continued only after the owner's
// bounded wait for its followers (1 s) ran out. The owner's copy is then
// strictly the furthest, but it holds nothing confirmed beyond C's tail.
// The stream must serve again at a new epoch, on C, without an operator
// (no accept-loss) while B is still down; once B is back every confirmed
// record is read back at its offset.
//
// It catches: recovery promoting the leaving owner (a leaving host applies
// no new assignment, so the stream would wait for its confirmed prefix
// until an operator accepts a loss), and a promotion of a lagging copy that
// loses a confirmed record.
func TestLeaveWithLaggingFollower(t *testing.T) {
	e := newEnv(t, opts{})
	const stream = "leave-lagging"
	before := e.createStream(stream, 3)
	epoch, owner := before.Assignment.Epoch, before.Assignment.Owner
	down, lagging := before.Assignment.Followers[0], before.Assignment.Followers[1]

	led := workload.NewLedger()
	ld := e.load(stream, "lv", led)
	defer func() { _ = ld.Stop() }()
	e.waitConfirms(led, 200, epoch)

	// B down: the owner still confirms with C.
	e.signal(e.host(down), syscall.SIGSTOP)
	e.waitConfirms(led, 100, epoch)

	// C paused: the owner writes records nobody else holds; none of them
	// can be confirmed.
	e.signal(e.host(lagging), syscall.SIGSTOP)
	time.Sleep(500 * time.Millisecond)

	// The owner leaves while C is still paused; C is continued once the
	// owner's wait for its followers has run out, so it catches up its
	// backlog while the owner is already being sealed.
	left := time.Now()
	e.signal(e.host(owner), syscall.SIGTERM)
	time.Sleep(1500 * time.Millisecond)
	e.signal(e.host(lagging), syscall.SIGCONT)

	// Serving again on C at a new epoch, without an operator, B still down.
	const bound = 20 * time.Second
	var after wire.StreamInfo
	e.poll(fmt.Sprintf("%s serving on %s at an epoch past %d", stream, lagging, epoch), bound, func(ctx context.Context) (bool, string, error) {
		i, err := e.c.StreamInfo(ctx, stream)
		if err != nil {
			return false, "stream.info: " + err.Error(), nil
		}
		after = i
		ct, ok := copyTail(i, lagging)
		return i.Status == wire.StatusServing && i.Assignment.Epoch > epoch && i.Assignment.Owner == lagging &&
			ok && ct.Published && ct.Role == wire.RoleOwner && ct.Epoch == i.Assignment.Epoch, describe(i), nil
	})
	e.logf("serving again %v after the SIGTERM: %s", time.Since(left).Round(time.Millisecond), describe(after))
	if n := len(after.Starts); n == 0 || after.Starts[n-1].Node != lagging || after.Starts[n-1].Epoch != after.Assignment.Epoch {
		t.Fatalf("no history start for %s at epoch %d: %v", lagging, after.Assignment.Epoch, after.Starts)
	}

	// B comes back and the stream confirms at the new epoch.
	e.signal(e.host(down), syscall.SIGCONT)
	e.waitConfirms(led, 200, after.Assignment.Epoch)

	e.stopLoad(ld, led)
	rd := workload.NewReader(e.cl, stream, "leave-lagging-reader")
	e.verify(stream, led, rd, workload.CheckConfig{})

	final := e.info(stream)
	if final.Status != wire.StatusServing || final.Assignment.Owner != lagging || final.Assignment.Epoch != after.Assignment.Epoch {
		t.Fatalf("the stream moved again: %s; want %s owning at epoch %d", describe(final), lagging, after.Assignment.Epoch)
	}
}
