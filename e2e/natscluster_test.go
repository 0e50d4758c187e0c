package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/brook-streams/brook/e2e/internal/workload"
	"github.com/brook-streams/brook/pkg/wire"
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

// TestNatsServerLameDuck: in the 3-server NATS cluster, under a steady
// load on a 3-copy stream, put the nats-server the owner's host is on into
// lame duck mode, as a rolling upgrade of NATS does (`nats-server --signal
// ldm`): it closes its clients one by one and each reconnects to another
// server (nats-server 2.15 publishes no disconnect advisory for them). No
// coordinator expires a host, the epoch does not move, and every
// confirmed record is read back at its offset.
func TestNatsServerLameDuck(t *testing.T) {
	e := newEnv(t, opts{})
	stream, before, led, ld := e.steadyLoad("nats-lame-duck")
	defer func() { _ = ld.Stop() }()

	srv := e.natsServerOf("brook-streamhost:" + before.Assignment.Owner)
	e.placement()
	at := time.Now()
	e.c.LameDuckNATS(srv)
	e.logf("nats-server %d (the owner's) went through lame duck in %v", srv+1, time.Since(at).Round(time.Millisecond))
	e.waitConfirms(led, 200, before.Assignment.Epoch)
	if err := e.c.NATSServer(srv).Restart(0); err != nil {
		t.Fatal(err)
	}
	e.placement()
	e.waitConfirms(led, 100, before.Assignment.Epoch)
	e.checkNoExpiry("the lame duck", stream, before, led, ld)
}

// TestHostConnectionKicked: under a steady load on a 3-copy stream, the
// nats-server closes the owner's host connection and then a follower's,
// five times each (as it does to a slow consumer, or `nats server
// request kick`): each close publishes a disconnect advisory while the
// host lives and reconnects at once. Its heartbeat on the new connection
// must come within the coordinators' disconnect grace: no host is
// expired, the epoch does not move, every confirmed record is read back.
//
// It catches: a disconnect grace shorter than a live host's reconnect and
// beat on this machine (the advisory would then fail over every stream the
// host owns), and an advisory that is not matched to its connection.
// BROOK_DISCONNECT_GRACE sets the coordinators' --disconnect-grace, to find
// the shortest that holds (it fails at 20ms here, passes at 50ms).
func TestHostConnectionKicked(t *testing.T) { hostConnectionKicked(t, 0) }

// TestHostConnectionKickedOneServer is TestHostConnectionKicked with a
// single nats-server: a kicked host has no other server to go to and
// reconnects to the one that closed it. It caught a host that waited
// nats.go's reconnect wait and jitter (100-250 ms) before that attempt, as
// it does once every server of its list was tried: past the 100 ms
// disconnect grace, so every kick expired the host and failed its streams
// over.
func TestHostConnectionKickedOneServer(t *testing.T) { hostConnectionKicked(t, 1) }

func hostConnectionKicked(t *testing.T, natsServers int) {
	var args []string
	if g := os.Getenv("BROOK_DISCONNECT_GRACE"); g != "" {
		args = []string{"--disconnect-grace", g}
	}
	e := newEnv(t, opts{coordArgs: args, natsServers: natsServers})
	stream, before, led, ld := e.steadyLoad("host-kicked")
	defer func() { _ = ld.Stop() }()

	for _, node := range []string{before.Assignment.Owner, before.Assignment.Followers[0]} {
		name := "brook-streamhost:" + node
		for range 5 {
			if err := e.c.KickConn(name); err != nil {
				t.Fatal(err)
			}
			e.waitConfirms(led, 50, before.Assignment.Epoch)
			time.Sleep(300 * time.Millisecond)
		}
		e.logf("kicked %s's connection 5 times", node)
	}
	heard := e.checkNoExpiry("the kicks", stream, before, led, ld)
	if heard == 0 {
		t.Fatal("no coordinator heard a disconnect advisory: the test did not exercise the grace")
	}
}

// steadyLoad creates a 3-copy stream named stream and starts the suites'
// load on it, returning once it confirms.
func (e *env) steadyLoad(stream string) (string, wire.StreamInfo, *workload.Ledger, *workload.Load) {
	e.t.Helper()
	before := e.createStream(stream, 3)
	led := workload.NewLedger()
	ld := e.load(stream, stream, led)
	e.waitConfirms(led, 200, before.Assignment.Epoch)
	return stream, before, led, ld
}

// checkNoExpiry stops the load, checks that what happened moved nothing
// (checkUnmoved) and that no coordinator expired a node, reads every
// confirmed record back, and returns how many disconnect advisories about
// hosts the coordinators heard.
func (e *env) checkNoExpiry(what, stream string, before wire.StreamInfo, led *workload.Ledger, ld *workload.Load) (heard int) {
	t := e.t
	t.Helper()
	e.stopLoad(ld, led)
	e.checkUnmoved(what, stream, before, led)
	for i := range e.c.Coordinators() {
		p := e.c.Coordinator(i)
		data, err := os.ReadFile(p.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		n := strings.Count(string(data), `msg="stream host disconnected"`) +
			strings.Count(string(data), `msg="disconnect advisory about an older connection of a stream host; ignored"`)
		if x := strings.Count(string(data), `msg="node expired"`); x != 0 {
			t.Fatalf("%s expired a node %d times during %s (advisories heard: %d)", p.Name, x, what, n)
		}
		e.logf("%s heard %d disconnect advisories about hosts and expired no node", p.Name, n)
		heard += n
	}
	e.verify(stream, led, workload.NewReader(e.cl, stream, stream+"-reader"), workload.CheckConfig{})
	return heard
}
