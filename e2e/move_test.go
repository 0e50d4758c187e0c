package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/brook-streams/brook/e2e/internal/workload"
	"github.com/brook-streams/brook/pkg/wire"
)

// writeGap is the longest time between two confirms of led around at: the
// last confirm at an epoch below epoch and the first at epoch or later.
func writeGap(led *workload.Ledger, epoch uint64) time.Duration {
	var lastOld, firstNew time.Time
	for _, o := range led.Outcomes() {
		if !o.Confirmed {
			continue
		}
		if o.Confirm.Epoch < epoch && o.Done.After(lastOld) {
			lastOld = o.Done
		}
		if o.Confirm.Epoch >= epoch && (firstNew.IsZero() || o.Done.Before(firstNew)) {
			firstNew = o.Done
		}
	}
	if lastOld.IsZero() || firstNew.IsZero() {
		return -1
	}
	return firstNew.Sub(lastOld)
}

// TestStreamMove moves a 3-copy stream under a load of four publishers
// with producer ids: first to a named follower, then to the best one. Each
// move lands on its target at the next epoch with the old owner following,
// and without a failover's write gap; a move to a node that holds no copy
// and a move of an unknown stream are refused with their codes. Every
// confirmed record is read back once at its offset.
//
// It catches: a move that loses or duplicates confirmed records (intake
// not stopped before the seal, a target promoted behind the tail), a move
// that lands on another copy than its target, an old owner that does not
// follow, and a move as slow as a failover.
func TestStreamMove(t *testing.T) {
	e := newEnv(t, opts{})
	const stream = "move"
	before := e.createStream(stream, 3)
	epoch := before.Assignment.Epoch
	oldOwner := before.Assignment.Owner
	target := before.Assignment.Followers[len(before.Assignment.Followers)-1]

	led := workload.NewLedger()
	ld := e.load(stream, "mv", led)
	defer func() { _ = ld.Stop() }()
	e.waitConfirms(led, 200, epoch)

	var outsider string
	for i := range e.c.Hosts() {
		if h := e.c.Host(i).Node; !before.Assignment.Includes(h) {
			outsider = h
		}
	}
	for _, c := range []struct {
		name string
		req  wire.StreamMove
		code string
	}{
		{"to a node without a copy", wire.StreamMove{Stream: stream, Node: outsider}, wire.CodeBadRequest},
		{"to the owner", wire.StreamMove{Stream: stream, Node: oldOwner}, wire.CodeBadRequest},
		{"an unknown stream", wire.StreamMove{Stream: "nope"}, wire.CodeNotFound},
	} {
		if r, err := e.cl.MoveStream(e.ctx, c.req); wire.CodeOf(err) != c.code {
			t.Fatalf("move %s: %+v, %v; want %s", c.name, r, err, c.code)
		}
	}

	r, err := e.cl.MoveStream(e.ctx, wire.StreamMove{Stream: stream, Node: target})
	if err != nil {
		t.Fatalf("move to %s: %v", target, err)
	}
	if r.From != oldOwner || r.To != target || r.Epoch != epoch+1 {
		t.Fatalf("move reply %+v: want %s -> %s at epoch %d", r, oldOwner, target, epoch+1)
	}
	e.waitConfirms(led, 200, epoch+1)
	moved := e.waitFollower(stream, oldOwner, epoch+1)
	if moved.Assignment.Owner != target || len(moved.Assignment.Copies()) != 3 || moved.Recovery != nil {
		t.Fatalf("after the move: %s", describe(moved))
	}
	gap := writeGap(led, epoch+1)
	e.logf("moved %s -> %s at epoch %d: held %d ms, took %d ms, write gap %v", oldOwner, target, r.Epoch, r.HeldMS, r.TookMS, gap)
	if gap < 0 || gap > time.Second {
		t.Fatalf("write gap of the planned move %v: a move must not cost a failover's gap", gap)
	}

	// To the best follower: somewhere else than the owner, at the next epoch.
	r2, err := e.cl.MoveStream(e.ctx, wire.StreamMove{Stream: stream})
	if err != nil {
		t.Fatalf("move to the best follower: %v", err)
	}
	if r2.From != target || r2.To == target || !slices.Contains(moved.Assignment.Followers, r2.To) || r2.Epoch != epoch+2 {
		t.Fatalf("second move %+v: want from %s to one of %v at epoch %d", r2, target, moved.Assignment.Followers, epoch+2)
	}
	e.waitConfirms(led, 200, epoch+2)
	e.waitFollower(stream, target, epoch+2)
	e.logf("moved %s -> %s at epoch %d: held %d ms, took %d ms, write gap %v", r2.From, r2.To, r2.Epoch, r2.HeldMS, r2.TookMS, writeGap(led, epoch+2))

	e.stopLoad(ld, led)
	rd := workload.NewReader(e.cl, stream, "move-reader")
	e.verify(stream, led, rd, workload.CheckConfig{})
	if n := led.Count(func(o workload.Outcome) bool { return !o.Confirmed && !o.Stopped }); n != 0 {
		t.Fatalf("%d publishes not confirmed across the moves: %v", n, led.Stats())
	}
}

// TestNodeDrain drains a host that owns streams under load: the reply
// lists the streams it owns, every one of them moves to another host by a
// planned move (none by recovery), the node is listed draining and owns
// nothing after, and node.undrain makes it live again. Every confirmed record of the loaded stream is
// read back.
func TestNodeDrain(t *testing.T) {
	// The balancer is off: it may move a drained stream again once the
	// drain put two on one host (a second, legitimate planned move), and
	// this test checks the drain's own moves (one epoch, no recovery).
	e := newEnv(t, opts{coordArgs: []string{"--balance=false"}})
	infos := map[string]wire.StreamInfo{}
	for _, name := range []string{"dr-a", "dr-b", "dr-c", "dr-d", "dr-e", "dr-f"} {
		infos[name] = e.createStream(name, 3)
	}
	node := infos["dr-a"].Assignment.Owner
	var owned []string
	for name, i := range infos {
		if i.Assignment.Owner == node {
			owned = append(owned, name)
		}
	}
	slices.Sort(owned)
	led := workload.NewLedger()
	ld := e.load("dr-a", "dr", led)
	defer func() { _ = ld.Stop() }()
	e.waitConfirms(led, 200, infos["dr-a"].Assignment.Epoch)

	r, err := e.cl.DrainNode(e.ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	e.logf("draining %s: moving %v", node, r.Moving)
	if !slices.Equal(r.Moving, owned) {
		t.Fatalf("drain of %s: moving %v; want %v", node, r.Moving, owned)
	}
	// The moves run after the reply: the node is listed draining once
	// they are done.
	e.poll("the drained node listed draining", 30*time.Second, func(ctx context.Context) (bool, string, error) {
		ci, err := e.cl.ClusterInfo(ctx)
		if err != nil {
			return false, "", err
		}
		for _, n := range ci.Nodes {
			if n.Node == node {
				return n.State == wire.NodeDraining && !n.DrainRequested, jsonString(n), nil
			}
		}
		return false, "node not listed", nil
	})
	for _, name := range owned {
		i := e.info(name)
		if i.Assignment.Owner == node || i.Assignment.Epoch != infos[name].Assignment.Epoch+1 || i.Recovery != nil {
			t.Fatalf("%s after the drain (moved by a planned move, not by recovery): %s", name, describe(i))
		}
	}
	// The drained node owns nothing: no stream moved back onto it.
	for name := range infos {
		if i := e.info(name); i.Assignment.Owner == node {
			t.Fatalf("%s is owned by the drained %s: %s", name, node, describe(i))
		}
	}
	e.waitConfirms(led, 200, infos["dr-a"].Assignment.Epoch+1)

	if _, err := e.cl.UndrainNode(e.ctx, node); err != nil {
		t.Fatal(err)
	}
	ci, err := e.cl.ClusterInfo(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range ci.Nodes {
		if n.Node == node && n.State != wire.NodeLive {
			t.Fatalf("%s is %s after node.undrain, want live", node, n.State)
		}
	}
	e.stopLoad(ld, led)
	e.verify("dr-a", led, workload.NewReader(e.cl, "dr-a", "drain-reader"), workload.CheckConfig{})
}
