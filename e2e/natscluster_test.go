package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/brook-streams/brook/e2e/internal/workload"
)

// natsServerOf returns the index of the nats-server the connection named
// name is on, waiting until it is on one.
func (e *env) natsServerOf(name string) int {
	e.t.Helper()
	idx := -1
	e.poll(name+" connected to a nats-server", waitLong, func(context.Context) (bool, string, error) {
		i, err := e.c.NATSServerOf(name)
		if err != nil {
			return false, "", err
		}
		idx = i
		return i >= 0, "not connected", nil
	})
	return idx
}

// placement logs which nats-server each host, coordinator and the test's
// client is on.
func (e *env) placement() {
	e.t.Helper()
	var names []string
	for i := range e.c.Hosts() {
		names = append(names, "brook-streamhost:"+e.c.Host(i).Node)
	}
	for i := range e.c.Coordinators() {
		names = append(names, "brook-coordinator:"+e.c.Coordinator(i).Node)
	}
	names = append(names, "brook-e2e")
	var b strings.Builder
	for _, n := range names {
		i, err := e.c.NATSServerOf(n)
		if err != nil {
			e.t.Fatal(err)
		}
		fmt.Fprintf(&b, " %s@%d", n, i+1)
	}
	e.logf("on nats-servers:%s", b.String())
}

// killNATS kills nats-server i (KillNATS: the server's shutdown closes
// every connection it holds at once, the stand-in for SIGKILL of its
// process) and returns when.
func (e *env) killNATS(i int) time.Time {
	e.t.Helper()
	at := time.Now()
	e.c.KillNATS(i)
	e.logf("killed nats-server %d (%s)", i+1, e.c.NATSServer(i).Name())
	return at
}

// TestNatsServerKill: in a 3-server NATS cluster, under a steady load on a
// 3-copy stream, kill the nats-server the owner's host is connected to;
// once confirms resume, bring it back and kill the server the coordinator
// leader is connected to. Each time the processes on the killed server
// reconnect to another one: no host is expired, the epoch does not move,
// confirms of publishes begun after the kill resume soon (the figure is
// logged; the goal is 1 s, asserted here loosely at 3 s), every node is
// live, and every confirmed record is read back at its offset.
//
// It catches: a coordinator that expires a host that merely moved to
// another server (a disconnect advisory of the dead server, or a heartbeat
// gap mistaken for a death), a service that does not use its other URLs,
// and a system-account listener that hears only its own server.
func TestNatsServerKill(t *testing.T) {
	e := newEnv(t, opts{natsServers: 3})
	const stream = "nats-server-kill"
	before := e.createStream(stream, 3)
	epoch := before.Assignment.Epoch
	owner := before.Assignment.Owner

	led := workload.NewLedger()
	ld := e.load(stream, "nk", led)
	defer func() { _ = ld.Stop() }()
	e.waitConfirms(led, 200, epoch)

	check := func(what string, at time.Time) {
		t.Helper()
		e.waitConfirms(led, 200, epoch)
		gap, gapAny, ok := confirmGap(led, at)
		e.logf("%s: first confirm %v after the kill, first confirm of a publish begun after it %v (goal 1s)",
			what, gapAny.Round(time.Millisecond), gap.Round(time.Millisecond))
		// A publish routed through the killed server to the owner is lost
		// inside the NATS cluster; neither its client's connection nor
		// the owner's epoch changes, so the client retries it only after
		// its request timeout (requestTimeout): the 1 s goal is
		// not met in that case (seen in about 2 of 5 runs here), and the
		// bound is the timeout plus the retry.
		if limit := requestTimeout + 2*time.Second; !ok || gap > limit {
			t.Fatalf("%s: no publish begun after the kill confirmed within %v (%v); ledger: %v", what, limit, gap, led.Stats())
		}
		if i := e.info(stream); i.Assignment.Epoch != epoch {
			t.Fatalf("%s moved the stream: %s", what, describe(i))
		}
	}

	// The server the owner is on.
	ownerSrv := e.natsServerOf("brook-streamhost:" + owner)
	e.logf("owner %s is on nats-server %d", owner, ownerSrv+1)
	e.placement()
	at := e.killNATS(ownerSrv)
	check("kill of the owner's nats-server", at)
	e.logf("owner %s moved to nats-server %d", owner, e.natsServerOf("brook-streamhost:"+owner)+1)
	if err := e.c.NATSServer(ownerSrv).Restart(0); err != nil {
		t.Fatal(err)
	}
	e.logf("nats-server %d back", ownerSrv+1)

	// The server the coordinator leader is on.
	leader := e.leader()
	leaderSrv := e.natsServerOf("brook-coordinator:" + leader.Node)
	e.logf("leader %s is on nats-server %d", leader.Name, leaderSrv+1)
	e.placement()
	at = e.killNATS(leaderSrv)
	check("kill of the leader's nats-server", at)

	e.stopLoad(ld, led)
	e.checkUnmoved("the server kills", stream, before, led)
	e.verify(stream, led, workload.NewReader(e.cl, stream, "nats-server-kill-reader"), workload.CheckConfig{})
}

// TestOwnerAndNatsServerKilled: in a 3-server NATS cluster, SIGKILL the
// owner of a 3-copy stream under load and, at the same moment, kill the
// nats-server it is connected to. The dead server publishes no disconnect
// advisory, so the coordinators learn of the owner's death from its
// missing heartbeats alone: the stream fails over to the next epoch, and
// every confirmed record is read back at its offset.
func TestOwnerAndNatsServerKilled(t *testing.T) {
	e := newEnv(t, opts{natsServers: 3})
	const stream = "owner-and-nats-killed"
	before := e.createStream(stream, 3)
	epoch := before.Assignment.Epoch
	owner := before.Assignment.Owner

	led := workload.NewLedger()
	ld := e.load(stream, "onk", led)
	defer func() { _ = ld.Stop() }()
	e.waitConfirms(led, 200, epoch)

	srv := e.natsServerOf("brook-streamhost:" + owner)
	e.logf("owner %s is on nats-server %d", owner, srv+1)
	e.placement()
	p := e.host(owner)
	done := make(chan error, 1)
	go func() { done <- e.c.Kill(p, syscall.SIGKILL) }()
	at := e.killNATS(srv)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	e.logf("SIGKILL -> %s with its nats-server", p.Name)

	e.waitConfirms(led, 200, epoch+1)
	after := e.waitServingAt(stream, epoch+1, owner)
	gap, _, _ := confirmGap(led, at)
	e.logf("failover %s -> %s at epoch %d; first confirm of a publish begun after the kill %v later",
		owner, after.Assignment.Owner, after.Assignment.Epoch, gap.Round(time.Millisecond))
	if after.Assignment.Includes(owner) {
		t.Fatalf("the dead owner %s is still in the assignment %+v", owner, after.Assignment)
	}
	e.stopLoad(ld, led)
	if n := led.Count(func(o workload.Outcome) bool { return o.Confirmed && o.Confirm.Epoch > epoch+1 }); n != 0 {
		t.Fatalf("%d confirms past epoch %d", n, epoch+1)
	}
	e.verify(stream, led, workload.NewReader(e.cl, stream, "owner-and-nats-killed-reader"), workload.CheckConfig{})
}
