package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/brook-streams/brook/e2e/internal/workload"
	"github.com/brook-streams/brook/pkg/wire"
)

// TestNatsRestart: restart the single nats-server for about 3 s under a
// steady load on a 3-copy stream. Every coordinator and host loses its
// connection at once; a coordinator that could not hear must not judge, so
// no host is expired and no epoch changes: the owner serves on at the same
// epoch with the same copies, confirms resume soon after the server's
// return (the figure is logged; the goal is 1 s, asserted here
// loosely at 3 s), every node is live, and every confirmed record is read
// back at its offset.
//
// It catches: a coordinator that expires the hosts it could not hear while
// the bus was down (every stream then went through recovery), and a host
// or client that does not come back after the bus does.
func TestNatsRestart(t *testing.T) {
	// The one nats-server every process is on.
	e := newEnv(t, opts{natsServers: 1})
	const stream = "nats-restart"
	before := e.createStream(stream, 3)
	epoch := before.Assignment.Epoch

	led := workload.NewLedger()
	ld := e.load(stream, "nr", led)
	defer func() { _ = ld.Stop() }()
	e.waitConfirms(led, 200, epoch)

	down, err := envDuration("BROOK_NATS_DOWN", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	if err := e.c.NATS().Restart(down); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	e.logf("nats-server restarted on the same port after %v down", back.Sub(stopped).Round(time.Millisecond))

	e.waitConfirms(led, 200, epoch)
	gapNew, gapAny, ok := confirmGap(led, back)
	e.logf("after the server's return: first confirm %v, first confirm of a publish begun after it %v (goal 1s)",
		gapAny.Round(time.Millisecond), gapNew.Round(time.Millisecond))
	if !ok || gapNew > 3*time.Second {
		t.Fatalf("no publish begun after the server's return confirmed within 3s (%v); ledger: %v", gapNew, led.Stats())
	}

	e.stopLoad(ld, led)
	e.checkUnmoved("the bus restart", stream, before, led)
	e.verify(stream, led, workload.NewReader(e.cl, stream, "nats-restart-reader"), workload.CheckConfig{})
}

// checkUnmoved fails the test if what moved stream from before (another
// epoch, a recovery, a new start, other copies), if any confirm is at
// another epoch, or if a node is not live within 10 s.
func (e *env) checkUnmoved(what, stream string, before wire.StreamInfo, led *workload.Ledger) {
	t := e.t
	t.Helper()
	epoch := before.Assignment.Epoch
	after := e.info(stream)
	if after.Assignment.Epoch != epoch || after.Recovery != nil || len(after.Starts) != len(before.Starts) ||
		!slices.Equal(after.Assignment.Copies(), before.Assignment.Copies()) {
		t.Fatalf("%s moved the stream: before %s; after %s", what, describe(before), describe(after))
	}
	if n := led.Count(func(o workload.Outcome) bool { return o.Confirmed && o.Confirm.Epoch != epoch }); n != 0 {
		t.Fatalf("%d confirms at another epoch than %d", n, epoch)
	}
	e.poll("every node live", 10*time.Second, func(ctx context.Context) (bool, string, error) {
		ci, err := e.c.Client().ClusterInfo(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		for _, n := range ci.Nodes {
			if n.State != wire.NodeLive {
				return false, jsonString(ci.Nodes), nil
			}
		}
		return len(ci.Nodes) == e.c.Hosts(), jsonString(ci.Nodes), nil
	})
}
