package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/brook-streams/brook/e2e/internal/workload"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/tools/cluster"
)

// Chaos settings from the environment. `make chaos` sets BROOK_CHAOS=1.
// The unprefixed CHAOS_SEED and CHAOS_DURATION (the names the Makefile's
// comment uses) are read too.
const (
	chaosEnv         = "BROOK_CHAOS"
	chaosSeedEnv     = "BROOK_CHAOS_SEED"
	chaosDurationEnv = "BROOK_CHAOS_DURATION"
)

// chaosConfig returns the seed and how long faults are injected.
func chaosConfig(t *testing.T) (seed uint64, d time.Duration, long bool) {
	t.Helper()
	long = os.Getenv(chaosEnv) == "1"
	d = 20 * time.Second
	if long {
		d = 5 * time.Minute
	}
	name := chaosDurationEnv
	if os.Getenv(name) == "" && os.Getenv("CHAOS_DURATION") != "" {
		name = "CHAOS_DURATION"
	}
	d, err := envDuration(name, d)
	if err != nil {
		t.Fatal(err)
	}
	s := os.Getenv(chaosSeedEnv)
	if s == "" {
		s = os.Getenv("CHAOS_SEED")
	}
	if s == "" {
		return uint64(time.Now().UnixNano()), d, long
	}
	seed, err = strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", chaosSeedEnv, s, err)
	}
	return seed, d, long
}

// fault is one injected failure and how to undo it.
type fault struct {
	name    string
	restore func()
}

// chaos drives the faults of one TestChaos run.
type chaos struct {
	e      *env
	rng    *rand.Rand
	stream string
	led    *workload.Ledger
	// what is broken now, undone by restoreAll
	active []fault
}

// TestChaos: a seeded random sequence of the suites' faults under load,
// for BROOK_CHAOS_DURATION (20s by default; 5m with BROOK_CHAOS=1): SIGKILL
// of the owner, of a follower, of the Raft leader, of the owner and the
// leader together; SIGSTOP/SIGCONT of the owner; a NATS cut of the owner;
// a graceful restart of a host. Sometimes two overlap. After each episode
// everything is restored and the stream must come back to three current
// copies by itself. A reader follows the stream all along. When the faults
// stop, every confirmed record must be delivered at its one offset, and no
// confirm at an epoch may arrive after confirms of a later epoch did (a
// fenced owner confirming). The seed is printed; BROOK_CHAOS_SEED replays
// the same choices (the timing of a real cluster still varies).
func TestChaos(t *testing.T) {
	seed, duration, long := chaosConfig(t)
	t.Logf("chaos seed %d, faults for %v (replay the choices: %s=%d)", seed, duration, chaosSeedEnv, seed)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("chaos seed %d failed (replay the choices: %s=%d)", seed, chaosSeedEnv, seed)
		}
	})
	var coordArgs []string
	if long {
		// Replacement followers join the faults: a copy gone for a
		// few seconds is replaced and stays left out when it returns.
		coordArgs = []string{"--replace-after", "5s"}
	}
	e := newEnv(t, opts{attention: true, coordArgs: coordArgs, timeout: duration + 4*time.Minute})
	ch := &chaos{e: e, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), stream: "chaos", led: workload.NewLedger()}
	e.createStream(ch.stream, 3)

	rd := workload.NewReader(e.cl, ch.stream, "chaos-follower")
	rctx, stopReader := context.WithCancel(e.ctx)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		rd.Run(rctx)
	}()
	defer func() { stopReader(); <-readerDone }()
	ld := workload.StartLoad(e.ctx, e.cl, ch.stream, ch.led, workload.LoadConfig{Name: "chaos", Interval: 10 * time.Millisecond})
	defer func() { _ = ld.Stop() }()
	e.waitConfirms(ch.led, 100, 0)

	end := time.Now().Add(duration)
	episodes := 0
	for time.Now().Before(end) {
		episodes++
		ch.episode(episodes, long)
	}
	e.logf("faults stopped after %d episodes", episodes)
	info := ch.converge("the end")
	e.waitConfirms(ch.led, 50, info.Assignment.Epoch)
	e.stopLoad(ld, ch.led)
	for _, n := range info.Assignment.Followers {
		e.waitCaughtUp(ch.stream, n)
	}
	stopReader()
	<-readerDone
	// Two faults close together can leave a recovery only one copy to
	// promote; its assignment then has W = 1 (W comes from the assignment's
	// copies, the seed's one rule) until placement adds a copy back. So
	// here every confirm is held to the W it names, not to 2.
	rep := e.verify(ch.stream, ch.led, rd, workload.CheckConfig{MinCopies: func(uint64) int { return 1 }})
	ch.checkFencing()
	final := e.info(ch.stream)
	e.logf("chaos seed %d: %d episodes, final epoch %d, %d history starts; %v", seed, episodes, final.Assignment.Epoch, len(final.Starts), rep)
}

// episode injects one or two faults, holds them a random while under load,
// restores everything and waits for the stream to be whole again.
func (ch *chaos) episode(n int, long bool) {
	e := ch.e
	e.t.Helper()
	info := e.info(ch.stream)
	kinds := []string{"kill-owner", "kill-follower", "kill-leader", "stop-owner", "cut-owner", "kill-owner-and-leader", "restart-host"}
	first := kinds[ch.rng.IntN(len(kinds))]
	ch.inject(first, info)
	if ch.rng.IntN(4) == 0 {
		// A second fault on top, on another process.
		second := kinds[ch.rng.IntN(len(kinds))]
		if !strings.Contains(first, "leader") || !strings.Contains(second, "leader") {
			ch.inject(second, e.info(ch.stream))
		}
	}
	hold := time.Duration(300+ch.rng.IntN(2700)) * time.Millisecond
	if long && ch.rng.IntN(5) == 0 {
		hold += 6 * time.Second // past --replace-after
	}
	e.logf("episode %d: %s held %v (epoch %d, owner %s)", n, ch.names(), hold, info.Assignment.Epoch, info.Assignment.Owner)
	t := time.NewTimer(hold)
	select {
	case <-e.ctx.Done():
		e.t.Fatal(e.ctx.Err())
	case <-t.C:
	}
	ch.restoreAll()
	after := ch.converge(fmt.Sprintf("episode %d", n))
	e.waitConfirms(ch.led, 20, after.Assignment.Epoch)
	e.logf("episode %d: whole again at epoch %d, owner %s, followers %v; %v", n, after.Assignment.Epoch,
		after.Assignment.Owner, after.Assignment.Followers, ch.led.Stats())
}

func (ch *chaos) names() string {
	var ns []string
	for _, f := range ch.active {
		ns = append(ns, f.name)
	}
	return strings.Join(ns, " + ")
}

// busy reports whether p is already under a fault.
func (ch *chaos) busy(p *cluster.Proc) bool {
	for _, f := range ch.active {
		if strings.HasSuffix(f.name, " "+p.Name) {
			return true
		}
	}
	return false
}

// inject applies one fault of kind to the stream as info describes it,
// unless its target is already under a fault.
func (ch *chaos) inject(kind string, info wire.StreamInfo) {
	e := ch.e
	e.t.Helper()
	owner := e.host(info.Assignment.Owner)
	pick := func(ps []*cluster.Proc) *cluster.Proc {
		var free []*cluster.Proc
		for _, p := range ps {
			if !ch.busy(p) && p.Running() && !p.Paused() {
				free = append(free, p)
			}
		}
		if len(free) == 0 {
			return nil
		}
		return free[ch.rng.IntN(len(free))]
	}
	one := func(ps ...*cluster.Proc) *cluster.Proc { return pick(ps) }
	kill := func(p *cluster.Proc) {
		e.signal(p, syscall.SIGKILL)
		ch.active = append(ch.active, fault{name: "kill " + p.Name, restore: func() { e.restart(p) }})
	}
	leader := func() *cluster.Proc {
		ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
		defer cancel()
		id, err := e.c.WaitLeader(ctx)
		if err != nil {
			return nil
		}
		return one(e.c.CoordinatorByReplica(id))
	}
	switch kind {
	case "kill-owner":
		if p := one(owner); p != nil {
			kill(p)
		}
	case "kill-follower":
		var fs []*cluster.Proc
		for _, f := range info.Assignment.Followers {
			fs = append(fs, e.host(f))
		}
		if p := pick(fs); p != nil {
			kill(p)
		}
	case "kill-leader":
		if p := leader(); p != nil {
			kill(p)
		}
	case "kill-owner-and-leader":
		l := leader()
		if p := one(owner); p != nil {
			kill(p)
		}
		if l != nil {
			kill(l)
		}
	case "stop-owner":
		if p := one(owner); p != nil {
			e.signal(p, syscall.SIGSTOP)
			ch.active = append(ch.active, fault{name: "stop " + p.Name, restore: func() { e.signal(p, syscall.SIGCONT) }})
		}
	case "cut-owner":
		if p := one(owner); p != nil {
			i := e.hostIndex(p.Node)
			e.c.CutHost(i)
			e.logf("cut %s off NATS", p.Name)
			ch.active = append(ch.active, fault{name: "cut " + p.Name, restore: func() { e.c.HealHost(i); e.logf("healed %s", p.Name) }})
		}
	case "restart-host":
		var hs []*cluster.Proc
		for i := range e.c.Hosts() {
			hs = append(hs, e.c.Host(i))
		}
		if p := pick(hs); p != nil {
			// A graceful stop (SIGTERM: the host says it leaves); it
			// starts again at restore.
			if err := e.c.Terminate(e.ctx, p); err != nil {
				e.t.Fatalf("terminate %s: %v", p.Name, err)
			}
			e.logf("terminated %s", p.Name)
			ch.active = append(ch.active, fault{name: "terminate " + p.Name, restore: func() { e.restart(p) }})
		}
	}
}

// restoreAll undoes every active fault, newest first.
func (ch *chaos) restoreAll() {
	for i := len(ch.active) - 1; i >= 0; i-- {
		ch.active[i].restore()
	}
	ch.active = nil
}

// converge waits until every process runs and answers /healthz, every
// host is live, and the stream serves with three copies, each published
// at the current epoch in its role, none sealed.
func (ch *chaos) converge(when string) wire.StreamInfo {
	e := ch.e
	e.t.Helper()
	e.poll(when+": every process healthy and every host live", waitLong, func(ctx context.Context) (bool, string, error) {
		for _, p := range e.c.Procs() {
			if !p.Running() || p.Paused() {
				return false, "", fmt.Errorf("%s is not running after the restore", p.Name)
			}
			if !p.Healthy(ctx) {
				return false, p.Name + " not healthy", nil
			}
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		ci, err := e.c.Client().ClusterInfo(cctx)
		if err != nil {
			return false, err.Error(), nil
		}
		for _, n := range ci.Nodes {
			if n.State != wire.NodeLive {
				return false, fmt.Sprintf("node %s is %s", n.Node, n.State), nil
			}
		}
		return len(ci.Nodes) == e.c.Hosts(), fmt.Sprintf("%d nodes known", len(ci.Nodes)), nil
	})
	return e.waitInfo(ch.stream, when+": "+ch.stream+" whole again", func(i wire.StreamInfo) (bool, error) {
		if i.Status != wire.StatusServing || len(i.Assignment.Copies()) != 3 || i.Recovery != nil {
			return false, nil
		}
		for _, n := range i.Assignment.Copies() {
			role := wire.RoleFollower
			if n == i.Assignment.Owner {
				role = wire.RoleOwner
			}
			ct, ok := copyTail(i, n)
			if !ok || !ct.Published || ct.Role != role || ct.Epoch != i.Assignment.Epoch || ct.Sealed {
				return false, nil
			}
		}
		return true, nil
	})
}

// checkFencing checks that no confirm arrived at an epoch older than one
// already confirmed a while before: once a later owner confirms, the
// earlier one is fenced (sealed copies acknowledge nothing from it). The
// grace covers replies already on their way when the later owner began.
func (ch *chaos) checkFencing() {
	e := ch.e
	e.t.Helper()
	const grace = time.Second
	outs := slices.DeleteFunc(ch.led.Outcomes(), func(o workload.Outcome) bool { return !o.Confirmed })
	slices.SortFunc(outs, func(a, b workload.Outcome) int { return a.Done.Compare(b.Done) })
	// firstAt[epoch] is when the first confirm of epoch arrived.
	firstAt := map[uint64]time.Time{}
	for _, o := range outs {
		if _, ok := firstAt[o.Confirm.Epoch]; !ok {
			firstAt[o.Confirm.Epoch] = o.Done
		}
	}
	for _, o := range outs {
		for ep, at := range firstAt {
			if ep > o.Confirm.Epoch && o.Done.After(at.Add(grace)) {
				e.t.Fatalf("%s was confirmed at epoch %d (offset %d) %v after the first confirm at the later epoch %d",
					o.ID, o.Confirm.Epoch, o.Confirm.Offset, o.Done.Sub(at).Round(time.Millisecond), ep)
			}
		}
	}
}
