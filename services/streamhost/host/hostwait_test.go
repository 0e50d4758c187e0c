package host

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/wire"
)

// TestHostWaitChangesBasedOnTheSetTheOwnerHolds drives an owner host's
// side of host wait changes by hand: a change is applied only to the
// generation of the set the owner host holds, and its answer carries the
// new generation; one based on anything else is answered at once with
// nothing and no generation (the sender then sends its whole set), and so
// is every change after it until a whole set comes. A copy an answer
// named that the next change neither names as left nor as joined (its
// sender never had that answer) is looked at again; a change that grows
// the set past what one host wait may name is refused.
func TestHostWaitChangesBasedOnTheSetTheOwnerHolds(t *testing.T) {
	c := newMiniCluster(t)
	c.assign(assignment("hw", 9, 1, "n1", []string{"n2"}))
	c.start("n1", nil)
	c.waitCopy("n1", "hw", "owner", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner })
	ackEmptyAsN2(t, c)
	subj := wire.HostReplSubject("n1", "n2")
	quiet := frame.HostWaitCopy{StreamID: 9, Epoch: 1}
	stale := frame.HostWaitCopy{StreamID: 9, Epoch: 0}
	// send sends a host wait and returns its answer's woken ids, its
	// generation header and how long it took.
	send := func(name string, data []byte, gen string) ([]uint64, string, time.Duration) {
		t.Helper()
		m := nats.NewMsg(subj)
		m.Data = data
		if gen != "" {
			m.Header.Set(frame.HeaderHostWaitGen, gen)
		}
		began := time.Now()
		resp, err := c.nc.RequestMsg(m, 5*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if e := replyError(resp); e != nil {
			t.Fatalf("%s: answered %v", name, e)
		}
		w, err := frame.DecodeHostWake(resp.Data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return w.StreamIDs, resp.Header.Get(frame.HeaderHostWaitGen), time.Since(began)
	}
	// The waits are 600 ms (a parked one is answered after 400 ms or
	// more); those of changes to be answered at once, 4 s (the pass over
	// every copy half a wait after the last would answer them at 2 s).
	waitMS := uint32(600)
	change := func(base, gen uint64, left []uint64, copies ...frame.HostWaitCopy) []byte {
		return frame.AppendHostWaitChange(nil, &frame.HostWaitChange{Node: "n2", WaitMS: waitMS, Base: base, Gen: gen, Left: left, Copies: copies})
	}
	waitFor := func(ms uint32, data func() []byte) []byte {
		waitMS = ms
		defer func() { waitMS = 600 }()
		return data()
	}
	long := func(data func() []byte) []byte { return waitFor(4000, data) }
	check := func(name string, ids []uint64, gen string, took time.Duration, wantIDs []uint64, wantGen string, parked bool) {
		t.Helper()
		same := fmt.Sprint(ids) == fmt.Sprint(wantIDs) || len(ids) == 0 && len(wantIDs) == 0
		if !same || gen != wantGen {
			t.Fatalf("%s: woke %v with generation %q, want %v and %q", name, ids, gen, wantIDs, wantGen)
		}
		if parked != (took >= 400*time.Millisecond) {
			t.Fatalf("%s: answered after %v; want parked for its wait: %v", name, took, parked)
		}
	}

	ids, gen, took := send("a change before any set", change(0, 1, nil, quiet), "")
	check("a change before any set", ids, gen, took, nil, "", false)
	// A whole set with a generation is answered at once, before any pass:
	// its answer tells the sender its set is held. The next change, with
	// nothing in it, looks at the set's copies, and parks.
	ids, gen, took = send("the whole set", frame.AppendHostWait(nil, &frame.HostWait{Node: "n2", WaitMS: 600, Copies: []frame.HostWaitCopy{quiet}}), "4")
	check("the whole set", ids, gen, took, nil, "4", false)
	ids, gen, took = send("no change", change(4, 5, nil), "")
	check("no change", ids, gen, took, nil, "5", true)
	ids, gen, took = send("a copy changed", long(func() []byte { return change(5, 6, nil, stale) }), "")
	check("a copy changed", ids, gen, took, []uint64{9}, "6", false)
	// The sender did not have that answer: the copy is still in its set,
	// unchanged, and is looked at again.
	ids, gen, took = send("an answer not had", long(func() []byte { return change(6, 7, nil) }), "")
	check("an answer not had", ids, gen, took, []uint64{9}, "7", false)
	ids, gen, took = send("the copy left", change(7, 8, []uint64{9}), "")
	check("the copy left", ids, gen, took, nil, "8", true)
	ids, gen, took = send("the copy joined again", change(8, 9, nil, quiet), "")
	check("the copy joined again", ids, gen, took, nil, "9", true)
	// A parked wait looks at every copy half a wait after the last such
	// pass, which keeps them live: n2's ack, counted at the start, is
	// refreshed while a change with nothing in it is parked for 3 s.
	o := c.hosts["n1"].h.ownedIDs.get(9)
	ackAt := func() time.Time {
		o.mu.Lock()
		defer o.mu.Unlock()
		return o.mu.conf.acks["n2"].at
	}
	parked := make(chan struct{})
	data := waitFor(3000, func() []byte { return change(9, 10, nil) })
	go func() {
		defer close(parked)
		if resp, err := c.nc.Request(subj, data, 5*time.Second); err != nil || replyError(resp) != nil {
			t.Errorf("a change parked for 3 s: %v %v", err, replyError(resp))
		}
	}()
	time.Sleep(2500 * time.Millisecond)
	if age := time.Since(ackAt()); age > 2*time.Second {
		t.Fatalf("n2's ack was last refreshed %v ago, 2.5 s into a wait of 3 s; want a pass over every copy within half a wait", age)
	}
	<-parked
	ids, gen, took = send("a change on another generation", change(4, 11, nil, stale), "")
	check("a change on another generation", ids, gen, took, nil, "", false)
	ids, gen, took = send("a change after a refused one", change(10, 11, nil, stale), "")
	check("a change after a refused one", ids, gen, took, nil, "", false)
	ids, gen, took = send("the whole set again", frame.AppendHostWait(nil, &frame.HostWait{Node: "n2", WaitMS: 600, Copies: []frame.HostWaitCopy{stale}}), "20")
	check("the whole set again", ids, gen, took, nil, "20", false)
	ids, gen, took = send("a change after the whole set", change(20, 21, nil), "")
	check("a change after the whole set", ids, gen, took, []uint64{9}, "21", false)
	// Without a generation (a sender of an earlier release) a whole set
	// parks as before, and its answer carries none.
	ids, gen, took = send("a whole set without a generation", frame.AppendHostWait(nil, &frame.HostWait{Node: "n2", WaitMS: 600, Copies: []frame.HostWaitCopy{quiet}}), "")
	check("a whole set without a generation", ids, gen, took, nil, "", true)
	ids, gen, took = send("a change after a whole set without a generation", change(21, 22, nil), "")
	check("a change after a whole set without a generation", ids, gen, took, nil, "", false)
	ids, gen, took = send("the whole set with a generation", frame.AppendHostWait(nil, &frame.HostWait{Node: "n2", WaitMS: 600, Copies: []frame.HostWaitCopy{stale}}), "20")
	check("the whole set with a generation", ids, gen, took, nil, "20", false)

	// A set grown by changes past what one host wait may name.
	var many []frame.HostWaitCopy
	size := 0
	for i := uint64(0); size <= frame.MaxHostWaitBytes; i++ {
		cp := frame.HostWaitCopy{StreamID: 1<<60 + i, Epoch: 1}
		many = append(many, cp)
		size += cp.Size()
	}
	resp, err := c.nc.Request(subj, change(20, 21, []uint64{9}, many...), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if e := replyError(resp); e == nil || e.Code != wire.CodeBadRequest {
		t.Fatalf("a set of %d bytes by changes answered %v; want bad_request", size, e)
	}
	ids, gen, took = send("a change after the set was dropped", change(21, 22, nil), "")
	check("a change after the set was dropped", ids, gen, took, nil, "", false)
}

// asleepCluster is idleCluster with every follower copy asleep for an
// idle wait (a copy woken sooner is on a stream written again soon, which
// keeps its own long poll), and the host waits to n1 recorded from then.
func asleepCluster(t *testing.T, streams int) (*miniCluster, []string, *hostWaitTraffic) {
	t.Helper()
	c, names := idleCluster(t, streams)
	waitIdle(t, c, streams)
	time.Sleep(idleTestWait)
	return c, names, watchHostWaits(t, c.nc)
}

// writeOneEach publishes a second record to each of names (idleCluster's
// streams), one after another, each once every stream's copies are asleep
// again after the one before.
func writeOneEach(t *testing.T, c *miniCluster, names []string) {
	t.Helper()
	all := idleCopiesOf(c.hosts["n2"].h, "n1")
	for i, s := range names {
		c.mustPublish(s, payload(1+i))
		for _, n := range []string{"n2", "n3"} {
			c.waitCopy(n, s, "the record", func(cs wire.CopyStatus) bool { return cs.RecordTail == 2 })
		}
		waitIdle(t, c, all)
	}
}

// hostWaitTraffic records the host waits n2 and n3 send n1: their kinds
// and the copies each names.
type hostWaitTraffic struct {
	mu     sync.Mutex
	whole  int // host waits naming the whole set
	change int // host wait changes
	named  int // copies (joined or left) the changes named
	most   int // the most one change named
}

func watchHostWaits(t *testing.T, nc *nats.Conn) *hostWaitTraffic {
	t.Helper()
	tr := &hostWaitTraffic{}
	sub, err := nc.Subscribe(wire.HostReplSubject("n1", "*"), func(m *nats.Msg) {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		if frame.IsHostWaitChange(m.Data) {
			if c, err := frame.DecodeHostWaitChange(m.Data); err == nil {
				tr.change++
				n := len(c.Left) + len(c.Copies)
				tr.named += n
				tr.most = max(tr.most, n)
			}
			return
		}
		tr.whole++
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return tr
}

// TestCopyJoiningTheIdleSetCostsALookAtIt: once a follower host's idle
// set is at its owner host, a copy that leaves it and joins it again (a
// record to an idle stream, carried in the host wake) costs a host wait
// change naming that copy, and the owner host's passes look at that copy
// and at every copy only about once per half wait (the liveness refresh),
// not at the whole set per host wait. Before (issue 17) every join resent
// the whole set, and the owner looked at every copy of it at least once
// per host wait.
func TestCopyJoiningTheIdleSetCostsALookAtIt(t *testing.T) {
	const streams = 40
	c, names, tr := asleepCluster(t, streams)
	owner := c.hosts["n1"].h
	checked0 := owner.parked.checked.Load()
	began := time.Now()
	const writes = 8
	writeOneEach(t, c, names[:writes])
	// The last rejoins reach the owner.
	time.Sleep(3 * hostWaitGather)
	elapsed := time.Since(began)
	checked := owner.parked.checked.Load() - checked0
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.whole != 0 || tr.change < writes {
		t.Fatalf("%d whole host waits and %d changes for %d records to idle streams; want changes only, one or more per record", tr.whole, tr.change, writes)
	}
	if tr.most > 4 {
		t.Fatalf("a host wait change named %d copies; want the few that joined or left", tr.most)
	}
	// Passes over every copy: at most one per follower host per half
	// wait, and one more each.
	fullPasses := 2 * (int(elapsed/(idleTestWait/2)) + 1)
	if limit := fullPasses*streams + 4*tr.change; checked > int64(limit) {
		t.Fatalf("the owner looked at %d copies over %v for %d host wait changes naming %d copies; want at most %d", checked, elapsed, tr.change, tr.named, limit)
	}
	t.Logf("%d host wait changes naming %d copies; the owner looked at %d copies over %v", tr.change, tr.named, checked, elapsed)
}

// TestFollowerHostResendsItsWholeSetWhenTheOwnerHostLostIt: an owner host
// that no longer holds a follower host's set (here it forgets n2's
// generation, as a restarted owner host holds no set at all) refuses
// n2's next change; n2 sends its whole set, and its changes go on from
// there. A record to an idle stream reaches both followers all the while.
func TestFollowerHostResendsItsWholeSetWhenTheOwnerHostLostIt(t *testing.T) {
	const streams = 6
	c, names, tr := asleepCluster(t, streams)
	w := &c.hosts["n1"].h.parked
	w.mu.Lock()
	s := w.sets["n2"]
	if s == nil {
		w.mu.Unlock()
		t.Fatal("n1 holds no set of n2's")
	}
	s.mu.Lock()
	s.hasGen = false
	s.mu.Unlock()
	w.mu.Unlock()
	writeOneEach(t, c, names[:3])
	// The last rejoins reach the owner.
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		held, hasGen := len(s.copies), s.hasGen
		s.mu.Unlock()
		if held == streams && hasGen {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("n1 holds n2's set of %d copies, generation known %v; want all %d", held, hasGen, streams)
		}
		time.Sleep(10 * time.Millisecond)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.whole != 1 || tr.change < 3 {
		t.Fatalf("%d whole host waits and %d changes; want n2's one whole set after its refused change, and changes", tr.whole, tr.change)
	}
}

// TestWaitSetTake: a pass looks at every copy when it is the first of a
// host wait that named them all, or when the last such pass was half a
// wait ago or more, whichever pass it is; any other pass looks at the
// copies joined, changed or marked since, each once. A copy marked by a
// pass of a wait that no longer serves the set signals the one that does
// (review: an ack on its way, seen by a replaced wait's pass, was looked
// at again only on the next change of any stream).
func TestWaitSetTake(t *testing.T) {
	const wait = 4 * time.Second
	cp := func(id uint64) frame.HostWaitCopy { return frame.HostWaitCopy{StreamID: id, Epoch: 1} }
	s := &waitSet{node: "n2"}
	newWait := func(full bool) *parkedWait {
		return &parkedWait{set: s, full: full, wake: make(chan struct{}, 1)}
	}
	whole := newWait(true)
	now := time.Now()
	s.mu.Lock()
	s.replace(&frame.HostWait{Node: "n2", Copies: []frame.HostWaitCopy{cp(1), cp(2), cp(3)}}, 1, true)
	s.cur = whole
	s.mu.Unlock()
	type pass struct {
		ids []uint64
		all bool
		due time.Duration
		ok  bool
	}
	take := func(pw *parkedWait, first bool, at time.Time) pass {
		check, all, due, ok := s.take(pw, first, wait, at)
		var out []uint64
		for _, c := range check {
			out = append(out, c.StreamID)
		}
		slices.Sort(out)
		return pass{out, all, due.Sub(now), ok}
	}
	want := func(what string, got, want pass) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: took %+v, want %+v", what, got, want)
		}
	}
	want("a whole set's first pass", take(whole, true, now), pass{[]uint64{1, 2, 3}, true, wait / 2, true})
	want("a pass with nothing changed", take(whole, false, now), pass{nil, false, wait / 2, true})
	change := newWait(false)
	s.mu.Lock()
	if !s.apply(&frame.HostWaitChange{Base: 1, Gen: 2, Left: []uint64{2}, Copies: []frame.HostWaitCopy{cp(4)}}) {
		t.Fatal("a change on the generation held was refused")
	}
	s.cur = change
	s.mu.Unlock()
	if p := take(whole, false, now); p.ok {
		t.Fatalf("a replaced wait's pass took %+v", p)
	}
	want("a change's first pass", take(change, true, now), pass{[]uint64{4}, false, wait / 2, true})
	s.again([]uint64{1, 2}, change) // 2 left: not looked at
	select {
	case <-change.wake:
		t.Fatal("a wait's own marks signalled it")
	default:
	}
	s.again([]uint64{3}, whole)
	select {
	case <-change.wake:
	default:
		t.Fatal("a replaced wait's marks did not signal the wait serving the set")
	}
	want("a pass after marks", take(change, false, now), pass{[]uint64{1, 3}, false, wait / 2, true})
	want("a later pass half a wait after the last over every copy", take(change, false, now.Add(wait/2)), pass{[]uint64{1, 3, 4}, true, wait, true})
}

// TestStreamsCreatedOneAfterAnotherSendTheWholeSetOnce: while streams are
// created one after another, each new stream's copies join their host's
// idle set after its first record, every 100 ms or so, from the first
// host wait on. A follower host sends its whole set once and changes
// after it. Before the owner host answered a whole set at once, that
// answer, the only sign that the owner host held the set, never came: a
// join cancelled each host wait first, and every host wait was the whole
// set (at 10,000 streams, the owner still looked at every copy of it).
func TestStreamsCreatedOneAfterAnotherSendTheWholeSetOnce(t *testing.T) {
	c := newMiniCluster(t)
	tr := watchHostWaits(t, c.nc)
	for _, n := range []string{"n1", "n2", "n3"} {
		c.start(n, func(cfg *Config) {
			cfg.ReplWait = 50 * time.Millisecond
			cfg.ReplIdleWait = idleTestWait
		})
	}
	const streams = 20
	for i := range streams {
		name := fmt.Sprintf("created%d", i)
		c.assign(assignment(name, uint64(100+i), 1, "n1", []string{"n2", "n3"}))
		c.waitCopy("n1", name, "owner", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner && cs.Epoch == 1 })
		c.mustPublish(name, payload(0))
	}
	waitIdle(t, c, streams)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.whole > 2 || tr.change < streams {
		t.Fatalf("%d whole host waits and %d changes while %d streams were created; want n2's and n3's first whole sets only, then changes", tr.whole, tr.change, streams)
	}
}

// TestPeerWaitGenerationsNeverRepeat: the generations of a follower
// host's idle set for one owner host do not start again when the set
// ends and a new one begins. Review: both counted from 0, so a whole set
// of the earlier one arriving late (reordered across a reconnect to
// another server) was taken by the owner host for the current chain's,
// and the current one's copies were never looked at.
func TestPeerWaitGenerationsNeverRepeat(t *testing.T) {
	c := newMiniCluster(t)
	h := c.start("n2", nil).h
	gens := make(chan string, 8)
	sub, err := c.nc.Subscribe(wire.HostReplSubject("n9", "n2"), func(m *nats.Msg) {
		gens <- m.Header.Get(frame.HeaderHostWaitGen)
		// Refused: the follower host wakes its copies, and the set ends.
		msg := nats.NewMsg(m.Reply)
		msg.Header.Set(frame.HeaderError, wire.CodeNotFound)
		msg.Data = []byte(`{"error":{"code":"not_found","message":"test"}}`)
		_ = c.nc.PublishMsg(msg)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	var first []string
	for range 2 {
		if _, ok := h.sleepIdle(t.Context(), "n9", frame.HostWaitCopy{StreamID: 5, Epoch: 1}); !ok {
			t.Fatal("sleepIdle ended with its context")
		}
		select {
		case g := <-gens:
			first = append(first, g)
		case <-time.After(5 * time.Second):
			t.Fatal("no host wait sent")
		}
		// The set ends before the next begins.
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			h.idle.mu.Lock()
			gone := h.idle.peers["n9"] == nil
			h.idle.mu.Unlock()
			if gone {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the idle set for n9 did not end")
			}
		}
	}
	if first[0] == "" || first[0] == first[1] {
		t.Fatalf("the two sets' first host waits had generations %q and %q; want two different ones", first[0], first[1])
	}
}

// BenchmarkHostWaitersChanged is the store's OnChange on an owner host
// holding three follower hosts' idle sets of 2,500 copies each: every
// append of the host calls it, from many streams at once, and it hands the
// stream to the marking goroutine (a send; past the queue's room a flag).
// The stream is one none of the sets watches (a busy stream). Not
// comparable with the figures before the marking goroutine (session 34:
// the marking itself, on the caller).
func BenchmarkHostWaitersChanged(b *testing.B) {
	var w hostWaiters
	w.sets = map[string]*waitSet{}
	for _, node := range []string{"n2", "n3", "n4"} {
		s := &waitSet{node: node, watch: map[string]uint64{}, dirty: map[uint64]struct{}{}, copies: map[uint64]*setCopy{}}
		for i := range 2500 {
			s.watch[fmt.Sprintf("idle%d", i)] = uint64(i)
		}
		w.sets[node] = s
	}
	w.n.Store(3)
	w.start()
	defer w.close()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			w.changed("busy")
		}
	})
}

// The store reports a change with the copy's lock held, and the copy's lock
// is what its group commit needs: a change must never wait for the idle
// sets' locks (held by a host wait applying a whole set, or by a pass),
// which stopped a host's group commits, and every confirm of the host, for
// seconds in a 10,000-stream failover. The change is marked once the lock
// is free; changes past the queue's room mark every watched copy.
func TestStoreChangesNeverWaitForTheIdleSetsLocks(t *testing.T) {
	var w hostWaiters
	s := &waitSet{node: "n2", watch: map[string]uint64{"s": 7, "u": 8}, dirty: map[uint64]struct{}{}, copies: map[uint64]*setCopy{}}
	w.sets = map[string]*waitSet{"n2": s}
	w.n.Store(1)
	w.start()
	defer w.close()
	dirty := func(id uint64) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		_, ok := s.dirty[id]
		return ok
	}
	eventually := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal(what)
			}
		}
	}
	// returns runs f with unlock's lock held and fails if f waited; the
	// lock is given back either way, so that a failing f ends.
	returns := func(what string, f func(), unlock func()) {
		t.Helper()
		done := make(chan struct{})
		go func() { f(); close(done) }()
		select {
		case <-done:
			unlock()
		case <-time.After(2 * time.Second):
			unlock()
			<-done
			t.Fatalf("%s waited for a lock", what)
		}
	}

	// A set's lock held, then hostWaiters.mu held for writing.
	s.mu.Lock()
	returns("a change while a set is held", func() { w.changed("s") }, s.mu.Unlock)
	eventually("the change was not marked once the set's lock was free", func() bool { return dirty(7) })
	w.mu.Lock()
	returns("a change while the sets are held", func() { w.changed("s") }, w.mu.Unlock)

	// More changes than the queue holds, while the set is held: none
	// waits, and once it is free every watched copy is marked, u too,
	// which no change named.
	eventually("the queue did not drain", func() bool { return len(w.marks.Load().streams) == 0 })
	s.mu.Lock()
	clear(s.dirty)
	returns("changes past the queue's room", func() {
		for i := range markQueueLen + markBatch + 10 {
			w.changed(fmt.Sprintf("busy%d", i))
		}
	}, s.mu.Unlock)
	eventually("a change past the queue's room did not mark every watched copy", func() bool { return dirty(7) && dirty(8) })
	if n := w.overflows.Load(); n == 0 {
		t.Fatal("no change counted past the queue's room")
	}

	// The flag set after the queue drained (the sender preempted between
	// its failed send and the flag): its kick still has everything marked.
	eventually("the queue did not drain", func() bool { return len(w.marks.Load().streams) == 0 })
	s.mu.Lock()
	clear(s.dirty)
	s.mu.Unlock()
	q := w.marks.Load()
	q.overflow.Store(true)
	q.kick <- struct{}{}
	eventually("an overflow flagged after the queue drained marked nothing", func() bool { return dirty(7) && dirty(8) })
}
