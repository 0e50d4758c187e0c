package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
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

// chaosTTL is the coordinators' --ttl in TestChaos: their default, so
// that the failure detector is judged as deployed (the other suites run
// at the more lenient ttl).
const chaosTTL = 800 * time.Millisecond

// The fault kinds of TestChaos. Each acts on the chaos stream as it stands
// when the fault begins.
var chaosKinds = []string{
	"kill-owner", "kill-follower", "kill-leader", "kill-owner-and-leader", "stop-owner", "cut-owner", "restart-host",
	// the bus
	"kill-nats-owner", "kill-nats-leader", "kill-nats-random", "blackhole-owner", "blackhole-follower",
	// the disk
	"fill-owner", "fill-follower",
}

// chaosLeads are the kinds the first episodes of a short run begin with,
// then the other bus and disk kinds, so that the 20 s run of `make test`
// exercises them.
var chaosLeads = []string{"kill-nats-owner", "blackhole-owner", "fill-owner"}

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
	outs   *outcomes
	long   bool
	// what is broken now, undone by restoreAll
	active []fault
	// menu holds the kinds this run draws from; deck what is left of
	// the current round (every kind once, in a random order).
	menu, deck []string
	rounds     int
	// disks are the hosts' data directories, on a tmpfs each, by node
	// (empty where mounting is not allowed: no store failures then).
	disks map[string]string
	// faults counts the faults injected, by kind.
	faults map[string]int
	// retried is when portTaken last started a process again;
	// portRetries counts those starts.
	retried     map[*cluster.Proc]time.Time
	portRetries int
	fo          *failovers
}

// TestChaos: a seeded random sequence of the suites' faults under load,
// for BROOK_CHAOS_DURATION (20s by default; 5m with BROOK_CHAOS=1), on a
// cluster of three nats-servers with the coordinators at their default
// ttl (chaosTTL): SIGKILL of the owner, of a follower, of the Raft leader,
// of the owner and the leader together; SIGSTOP/SIGCONT of the owner; a
// NATS cut of the owner; a graceful restart of a host; a kill of a
// nats-server (the owner's, the leader's or any), started again at the
// restore; a silent blackhole of the owner or of a follower; a store
// failure of the owner or of a follower (its tmpfs data directory fills
// up; at the restore the space comes back and the host restarts on its
// data). Sometimes two overlap. After each episode everything is restored
// and the stream must come back to three current copies by itself. A
// reader follows the stream all along. When the faults stop, every
// confirmed record must be delivered at its one offset, and no confirm at
// an epoch may arrive after confirms of a later epoch did (a fenced owner
// confirming). Every owner change and node expiry is classified (see
// failovers): one of a host no fault touched is spurious and fails the
// test. The seed is printed; BROOK_CHAOS_SEED replays the same choices
// (the timing of a real cluster still varies).
func TestChaos(t *testing.T) {
	seed, duration, long := chaosConfig(t)
	t.Logf("chaos seed %d, faults for %v (replay the choices: %s=%d)", seed, duration, chaosSeedEnv, seed)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("chaos seed %d failed (replay the choices: %s=%d)", seed, chaosSeedEnv, seed)
		}
	})
	coordArgs := []string{"--ttl", chaosTTL.String()}
	if long {
		// Replacement followers join the faults: a copy gone for a
		// few seconds is replaced and stays left out when it returns.
		coordArgs = append(coordArgs, "--replace-after", "5s")
	}
	e := newEnv(t, opts{attention: true, natsServers: 3, coordArgs: coordArgs, timeout: duration + 4*time.Minute})
	t.Cleanup(func() {
		if t.Failed() {
			e.keepLogs()
		}
	})
	ch := &chaos{e: e, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), stream: "chaos", led: workload.NewLedger(),
		long: long, menu: chaosKinds, faults: map[string]int{}, retried: map[*cluster.Proc]time.Time{}}
	var why string
	if ch.disks, why = e.chaosDisks(); ch.disks == nil {
		e.logf("store failures are left out of the menu: %s", why)
		ch.menu = slices.DeleteFunc(slices.Clone(chaosKinds), func(k string) bool { return strings.HasPrefix(k, "fill-") })
	}
	e.logf("chaos at ttl %v on %d nats-servers; menu: %s", chaosTTL, e.c.NATSServers(), strings.Join(ch.menu, ", "))
	ch.fo = newFailovers(e, e.createStream(ch.stream, 3))

	rd := workload.NewReader(e.cl, ch.stream, "chaos-follower")
	rctx, stopReader := context.WithCancel(e.ctx)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		rd.Run(rctx)
	}()
	defer func() { stopReader(); <-readerDone }()
	ld := workload.StartLoad(e.ctx, e.cl, ch.stream, ch.led, workload.LoadConfig{Name: "chaos", Publishers: chaosPublishers, Interval: 10 * time.Millisecond})
	defer func() { _ = ld.Stop() }()
	ch.outs = newOutcomes(ch.led, "chaos")
	ch.outs.waitConfirms(e, 100, 0)

	began := time.Now()
	end := began.Add(duration)
	episodes := 0
	for time.Now().Before(end) {
		episodes++
		ch.episode(episodes)
	}
	faulted := time.Since(began)
	e.logf("faults stopped after %d episodes", episodes)
	info := ch.converge("the end")
	ch.outs.waitConfirms(e, 50, info.Assignment.Epoch)
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
	ch.fo.settle(e, "after the faults", final)
	if ch.disks != nil {
		e.logf("the hosts' disks hold %s", diskUse(ch.disks))
	}
	e.logf("chaos seed %d: %d episodes in %v at ttl %v, final epoch %d, %d history starts; faults by kind: %s; %v; %v; %d restarts again after a taken port",
		seed, episodes, faulted.Round(time.Second), chaosTTL, final.Assignment.Epoch, len(final.Starts), ch.faultCounts(), ch.fo, rep, ch.portRetries)
}

// episode injects one or two faults, holds them a random while under load,
// restores everything and waits for the stream to be whole again.
func (ch *chaos) episode(n int) {
	e := ch.e
	e.t.Helper()
	info := e.info(ch.stream)
	first := ch.draw()
	ch.inject(first, info)
	if ch.rng.IntN(4) == 0 {
		// A second fault on top, on another process.
		second := ch.menu[ch.rng.IntN(len(ch.menu))]
		if !strings.Contains(first, "leader") || !strings.Contains(second, "leader") {
			ch.inject(second, e.info(ch.stream))
		}
	}
	hold := time.Duration(300+ch.rng.IntN(2700)) * time.Millisecond
	if ch.long && ch.rng.IntN(5) == 0 {
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
	when := fmt.Sprintf("episode %d", n)
	after := ch.converge(when)
	ch.outs.waitConfirms(e, 20, after.Assignment.Epoch)
	ch.fo.settle(e, when, after)
	e.logf("episode %d: whole again at epoch %d, owner %s, followers %v; %v", n, after.Assignment.Epoch,
		after.Assignment.Owner, after.Assignment.Followers, ch.outs)
}

// draw returns the next episode's first fault kind: every kind of the
// menu once per round, in a random order. The first round of a short run
// begins with chaosLeads, then the other bus and disk kinds.
func (ch *chaos) draw() string {
	if len(ch.deck) == 0 {
		ch.deck = slices.Clone(ch.menu)
		ch.rng.Shuffle(len(ch.deck), func(i, j int) { ch.deck[i], ch.deck[j] = ch.deck[j], ch.deck[i] })
		if ch.rounds == 0 && !ch.long {
			rank := func(k string) int {
				switch {
				case slices.Contains(chaosLeads, k):
					return 0
				case slices.Index(chaosKinds, k) >= slices.Index(chaosKinds, "kill-nats-owner"):
					return 1
				}
				return 2
			}
			slices.SortStableFunc(ch.deck, func(a, b string) int { return rank(a) - rank(b) })
		}
		ch.rounds++
	}
	k := ch.deck[0]
	ch.deck = ch.deck[1:]
	return k
}

func (ch *chaos) names() string {
	var ns []string
	for _, f := range ch.active {
		ns = append(ns, f.name)
	}
	return strings.Join(ns, " + ")
}

// faultCounts lists the faults injected by kind, in the menu's order.
func (ch *chaos) faultCounts() string {
	var b strings.Builder
	total := 0
	for _, k := range chaosKinds {
		if n := ch.faults[k]; n > 0 {
			fmt.Fprintf(&b, "%s %d, ", k, n)
			total += n
		}
	}
	fmt.Fprintf(&b, "%d in all", total)
	return b.String()
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

// add records an injected fault.
func (ch *chaos) add(name string, restore func()) {
	ch.active = append(ch.active, fault{name: name, restore: restore})
}

// inject applies one fault of kind to the stream as info describes it,
// unless its target is already under a fault. A fault on a stream host
// touches it first (failovers.touch).
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
	follower := func() *cluster.Proc {
		var fs []*cluster.Proc
		for _, f := range info.Assignment.Followers {
			fs = append(fs, e.host(f))
		}
		return pick(fs)
	}
	touch := func(p *cluster.Proc) {
		if p.Kind == cluster.KindStreamHost {
			ch.fo.touch(p.Node)
		}
	}
	kill := func(p *cluster.Proc) {
		touch(p)
		e.signal(p, syscall.SIGKILL)
		ch.add("kill "+p.Name, func() { e.restart(p) })
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
	// partition cuts p off NATS (cut) or blackholes it; heal undoes both.
	partition := func(p *cluster.Proc, how string, apply func(int)) {
		touch(p)
		i := e.hostIndex(p.Node)
		apply(i)
		e.logf("%s %s", how, p.Name)
		ch.add(how+" "+p.Name, func() { e.c.HealHost(i); e.logf("healed %s", p.Name) })
	}
	before := len(ch.active)
	defer func() {
		if len(ch.active) > before {
			ch.faults[kind]++
		}
	}()
	switch kind {
	case "kill-owner":
		if p := one(owner); p != nil {
			kill(p)
		}
	case "kill-follower":
		if p := follower(); p != nil {
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
			touch(p)
			e.signal(p, syscall.SIGSTOP)
			ch.add("stop "+p.Name, func() { e.signal(p, syscall.SIGCONT) })
		}
	case "cut-owner":
		if p := one(owner); p != nil {
			partition(p, "cut", e.c.CutHost)
		}
	case "blackhole-owner":
		if p := one(owner); p != nil {
			partition(p, "blackhole", e.c.BlackholeHost)
		}
	case "blackhole-follower":
		if p := follower(); p != nil {
			partition(p, "blackhole", e.c.BlackholeHost)
		}
	case "restart-host":
		var hs []*cluster.Proc
		for i := range e.c.Hosts() {
			hs = append(hs, e.c.Host(i))
		}
		if p := pick(hs); p != nil {
			// A graceful stop (SIGTERM: the host says it leaves); it
			// starts again at restore.
			touch(p)
			if err := e.c.Terminate(e.ctx, p); err != nil {
				e.t.Fatalf("terminate %s: %v", p.Name, err)
			}
			e.logf("terminated %s", p.Name)
			ch.add("terminate "+p.Name, func() { e.restart(p) })
		}
	case "kill-nats-owner":
		if p := one(owner); p != nil {
			ch.killNATS("brook-streamhost:"+p.Node, p.Name+"'s")
		}
	case "kill-nats-leader":
		if p := leader(); p != nil {
			ch.killNATS("brook-coordinator:"+p.Node, p.Name+"'s")
		}
	case "kill-nats-random":
		ch.killNATS("", "any")
	case "fill-owner":
		if p := one(owner); p != nil {
			ch.fill(p)
		}
	case "fill-follower":
		if p := follower(); p != nil {
			ch.fill(p)
		}
	}
}

// killNATS kills the nats-server the connection named conn is on (any
// running one if conn is empty) unless a nats-server is down already; it
// starts again at the restore. No stream host is touched: every process
// on the server must move to another within the ttl.
func (ch *chaos) killNATS(conn, whose string) {
	e := ch.e
	e.t.Helper()
	var up []int
	for i := range e.c.NATSServers() {
		if !e.c.NATSServer(i).Running() {
			return
		}
		up = append(up, i)
	}
	i := up[ch.rng.IntN(len(up))]
	if conn != "" {
		var err error
		if i, err = e.c.NATSServerOf(conn); err != nil {
			e.t.Fatal(err)
		}
		if i < 0 {
			return // not connected now (cut off, say)
		}
	}
	e.killNATS(i)
	ch.add(fmt.Sprintf("kill nats-server-%d (%s)", i+1, whose), func() {
		if err := e.c.NATSServer(i).Restart(0); err != nil {
			e.t.Fatalf("restart nats-server %d: %v", i+1, err)
		}
		all := make([]*cluster.NATS, e.c.NATSServers())
		for k := range all {
			all[k] = e.c.NATSServer(k)
		}
		if err := cluster.WaitNATSRoutes(all, 15*time.Second); err != nil {
			e.t.Fatal(err)
		}
		e.logf("nats-server %d back, its routes up", i+1)
	})
}

// fill fails p's store: its data directory's tmpfs fills up
// (resizeTmpfs), the next write meets no space left on device, and the
// host beats leaving with the error. At the restore the space comes back
// (restoreAll) and the host restarts on its data, as an operator would
// after freeing the disk.
func (ch *chaos) fill(p *cluster.Proc) {
	e := ch.e
	e.t.Helper()
	ch.fo.touch(p.Node)
	if err := resizeTmpfs(ch.disks[p.Node], 0); err != nil {
		e.t.Fatal(err)
	}
	e.logf("filled %s's disk", p.Name)
	ch.add("fill "+p.Name, func() { e.restart(p) })
	// The fault holds from the failure on: a copy that writes nothing
	// for a while (a follower of a stalled stream) fails later or not.
	err := e.pollErr(p.Name+"'s store failing", 5*time.Second, func(ctx context.Context) (bool, string, error) {
		return !p.Healthy(ctx), "", nil
	})
	if err != nil {
		e.logf("%s's store has not failed yet: %v", p.Name, err)
	}
}

// restoreAll undoes every active fault, newest first. First every disk
// gets its room back (chaosDiskRoom), before any host starts again.
func (ch *chaos) restoreAll() {
	for _, dir := range ch.disks {
		if err := resizeTmpfs(dir, chaosDiskRoom); err != nil {
			ch.e.t.Fatal(err)
		}
	}
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
		for i := range e.c.NATSServers() {
			if !e.c.NATSServer(i).Running() {
				return false, "", fmt.Errorf("nats-server %d is not running after the restore", i+1)
			}
		}
		for _, p := range e.c.Procs() {
			if !p.Running() && ch.portTaken(p) {
				return false, p.Name + " exited: a port of its was taken", nil
			}
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

// keepLogs copies the processes' logs out of the test's temp dir (which
// goes when the test ends) for a failure to be looked into, and says where.
func (e *env) keepLogs() {
	dir, err := os.MkdirTemp("", "brook-chaos-logs-")
	if err == nil {
		err = exec.Command("cp", "-a", filepath.Dir(e.c.Coordinator(0).LogPath)+"/.", dir).Run()
	}
	if err != nil {
		e.t.Logf("keep the process logs: %v", err)
		return
	}
	e.t.Logf("the process logs are kept in %s", dir)
}

// portTaken reports whether p, started again, exited at once because a
// port of its was taken, and then starts it again (at most once a second).
// The harness gives a process fixed ports (its HTTP address, a
// coordinator's Raft address) picked from the ephemeral range, so while a
// killed process is down, another socket on the machine can be handed one
// of them as its local port: the process cannot listen and exits with
// "address already in use". That is the harness's, not a fault of brook:
// the restart is retried, counted and logged.
func (ch *chaos) portTaken(p *cluster.Proc) bool {
	if !strings.Contains(p.LogTail(4), "address already in use") {
		return false
	}
	if time.Since(ch.retried[p]) < time.Second {
		return true
	}
	ch.retried[p] = time.Now()
	ch.portRetries++
	ch.e.logf("%s exited at once, a port of its taken (address already in use): starting it again", p.Name)
	ch.e.restart(p)
	return true
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
