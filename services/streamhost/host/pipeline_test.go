package host

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/streamlog"
	"github.com/brook-streams/brook/pkg/wire"
)

// delayHold holds WAL syncs once armed until released, then lets them
// succeed (syncHold's release fails them).
type delayHold struct {
	armed   atomic.Bool
	once    sync.Once
	held    chan struct{}
	release chan struct{}
}

func (h *delayHold) MaybeError(op errorfs.Op) error {
	if !h.armed.Load() || !strings.HasSuffix(op.Path, ".log") {
		return nil
	}
	switch op.Kind {
	case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
	default:
		return nil
	}
	h.once.Do(func() { close(h.held) })
	<-h.release
	return nil
}

func (h *delayHold) String() string { return "delay WAL syncs" }

// startHeldSyncPair starts n1 as a's owner on a store whose WAL syncs a
// returned delayHold holds once armed, and n2 as its follower; release
// (idempotent, also at cleanup) lets the held syncs succeed.
func startHeldSyncPair(t *testing.T, a wire.AssignedStream) (*miniCluster, *testHost, *delayHold, func()) {
	t.Helper()
	c := newMiniCluster(t)
	mem := vfs.NewCrashableMem()
	syncedDir(t, mem, c.dataDir("n1"))
	hold := &delayHold{held: make(chan struct{}), release: make(chan struct{})}
	var released sync.Once
	release := func() { released.Do(func() { close(hold.release) }) }
	t.Cleanup(release)
	c.assign(a)
	n1 := c.start("n1", func(cfg *Config) { cfg.StoreFS = errorfs.Wrap(mem, hold) })
	c.start("n2", nil)
	stream := a.Assignment.Stream
	c.waitCopy("n1", stream, "owner", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner && cs.Epoch == 1 })
	c.waitCopy("n2", stream, "follower", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleFollower && cs.Epoch == 1 })
	return c, n1, hold, release
}

// publishHeld confirms confirmed publishes, arms hold, and publishes one
// more, returning once its group commit is held at the owner and it is
// durable at n2; the channel gets the publish's answer.
func publishHeld(c *miniCluster, hold *delayHold, stream string, confirmed int) <-chan *wire.Error {
	c.t.Helper()
	for i := range confirmed {
		c.mustPublish(stream, payload(i))
	}
	hold.armed.Store(true)
	pub := make(chan *wire.Error, 1)
	go func() { _, e := c.publish(stream, payload(confirmed), "", 0); pub <- e }()
	<-hold.held
	c.waitTails("n2", stream, "the written record durable at the follower", func(t streamlog.Tails) bool { return t.Record == uint64(confirmed)+1 })
	return pub
}

// TestHandoffWaitsForWrittenBatches: a planned move's hold must count a
// batch the owner wrote whose group commit is still running (the completer
// has not seen it durable): the hand-off must not answer a record tail
// below what the owner wrote and replicated. Mutation check: dropping the
// inflight++ in appendBatch / leaveWrite in complete makes this fail.
func TestHandoffWaitsForWrittenBatches(t *testing.T) {
	const stream, id, confirmed = "heldwritten", 21, 3
	c, _, hold, release := startHeldSyncPair(t, assignment(stream, id, 1, "n1", []string{"n2"}, wire.HistoryStart{Epoch: 1, Node: "n1"}))
	pub := publishHeld(c, hold, stream, confirmed)

	type res struct {
		r *wire.HandoffReply
		e *wire.Error
	}
	ho := make(chan res, 1)
	go func() {
		r, e := c.handoff("n1", wire.HandoffRequest{Stream: stream, StreamID: id, Epoch: 1, Target: "n2", MoveID: "m", TimeoutMS: 3000})
		ho <- res{r, e}
	}()
	select {
	case got := <-ho:
		release()
		t.Fatalf("hand-off answered %+v %v while a written batch's fsync runs (owner wrote %d)", got.r, got.e, confirmed+1)
	case <-time.After(300 * time.Millisecond):
	}
	release()
	got := <-ho
	if got.e != nil || got.r.RecordTail != confirmed+1 {
		t.Fatalf("hand-off %+v %v, want record tail %d", got.r, got.e, confirmed+1)
	}
	if e := <-pub; e != nil {
		t.Fatalf("publish: %v", e)
	}
}

// TestOwnerWrittenAheadBound counts how many appends the owner writes past
// its durable tail while its first group commit's fsync is held: at most
// maxWrittenAhead. (With only the channel to the completer bounding them,
// the completer held one more and the appender one more, blocked handing
// it over: maxWrittenAhead+2.)
func TestOwnerWrittenAheadBound(t *testing.T) {
	const stream, id, confirmed = "aheadbound", 22, 2
	c, n1, hold, release := startHeldSyncPair(t, assignment(stream, id, 1, "n1", []string{"n2"}, wire.HistoryStart{Epoch: 1, Node: "n1"}))
	for i := range confirmed {
		c.mustPublish(stream, payload(i))
	}
	hold.armed.Store(true)
	cp := n1.h.store.Get(stream)
	written := 0
	for i := range 10 {
		go func() { _, _ = c.publish(stream, payload(confirmed+i), "", 0) }()
		if i == 0 {
			<-hold.held
		}
		deadline := time.Now().Add(300 * time.Millisecond)
		for time.Now().Before(deadline) && cp.Tails().RecordWritten < uint64(confirmed+i+1) {
			time.Sleep(2 * time.Millisecond)
		}
		if cp.Tails().RecordWritten < uint64(confirmed+i+1) {
			break
		}
		written++
	}
	t.Logf("appends written past the durable tail %d with one fsync held: %d (maxWrittenAhead %d)", cp.Tails().Record, written, maxWrittenAhead)
	if written > maxWrittenAhead {
		t.Errorf("%d appends written and not durable, over maxWrittenAhead %d", written, maxWrittenAhead)
	}
	release()
}

// TestOwnerNotSettledWithWrittenBatches: a graceful shutdown waits (AckWait)
// until owner.settled, then fails what still waits. A batch the owner wrote
// and handed to the completer (fsync running) is not settled: had settled
// looked only at the confirmer's waiters and durable tail, the leave would
// refuse a publish its fsync and the follower's ack confirm a moment later.
func TestOwnerNotSettledWithWrittenBatches(t *testing.T) {
	const stream, id, confirmed = "settledwritten", 23, 2
	c, n1, hold, release := startHeldSyncPair(t, assignment(stream, id, 1, "n1", []string{"n2"}, wire.HistoryStart{Epoch: 1, Node: "n1"}))
	pub := publishHeld(c, hold, stream, confirmed)
	o := n1.h.owners()[0]
	o.stopIntake(wire.CodeShuttingDown)
	if o.settled() {
		t.Errorf("owner settled with a written publish neither confirmed nor refused (fsync running)")
	}
	release()
	if e := <-pub; e != nil {
		t.Logf("publish: %v", e)
	}
}

// TestRepromoteAtSameEpochWithWriteInFlight: an owner role stopped
// (left out of the assignment) while a written batch's fsync still runs,
// then assigned owner again at the same epoch before that fsync ends. A
// new role that started at the durable tail would build its duplicate
// window from the durable log, which lacks the in-flight record, and
// write a producer's retry of it a second time; the promotion waits for
// the written records to be durable first (waitWrittenDurable).
func TestRepromoteAtSameEpochWithWriteInFlight(t *testing.T) {
	const stream, id = "repromote", 24
	a := assignment(stream, id, 1, "n1", []string{"n2"}, wire.HistoryStart{Epoch: 1, Node: "n1"})
	c, n1, hold, release := startHeldSyncPair(t, a)
	for i := range 3 {
		if _, e := c.publish(stream, payload(i), "p", uint64(i)); e != nil {
			t.Fatal(e)
		}
	}
	hold.armed.Store(true)
	first := make(chan *wire.Error, 1)
	go func() { _, e := c.publish(stream, payload(3), "p", 3); first <- e }()
	<-hold.held
	// Left out at the same epoch, then owner again.
	c.assign(assignment(stream, id, 1, "n3", []string{"n2"}, wire.HistoryStart{Epoch: 1, Node: "n1"}))
	c.waitCopy("n1", stream, "left out", func(cs wire.CopyStatus) bool { return cs.Role != wire.RoleOwner })
	t.Logf("first publish: %v", <-first)
	c.assign(a)
	// The promotion must wait for the held fsync; it is released a little
	// later, so that a promotion that does not wait happens before it.
	// (The delay only makes the bug show; nothing is asserted on time.)
	go func() {
		time.Sleep(200 * time.Millisecond)
		release()
	}()
	c.waitCopy("n1", stream, "owner again", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner && cs.Epoch == 1 })
	cp := n1.h.store.Get(stream)
	t.Logf("n1 tails at re-promotion: %+v", cp.Tails())
	pc, e := c.publish(stream, payload(3), "p", 3)
	r := struct {
		pc *wire.PublishConfirm
		e  *wire.Error
	}{pc, e}
	t.Logf("retry: %+v %v; tails %+v", r.pc, r.e, cp.Tails())
	if r.e != nil {
		t.Fatalf("retry of producer p seq 3: %v", r.e)
	}
	if !r.pc.Duplicate || r.pc.Offset != 3 {
		t.Errorf("retry of producer p seq 3 confirmed %+v; want a duplicate of offset 3", r.pc)
	}
}

// TestStopIntakeWithTheQueueFull: the appender waits for a held fsync, the
// intake queue is full and a publish callback waits to queue one more
// (the bus's subscription, or a client link's reader). Stopping the
// intake must not wait for the fsync: the waiting publish is refused and
// the stop returns. It took the intake's lock behind the waiting callback,
// so a host shutdown waited on a stuck disk.
func TestStopIntakeWithTheQueueFull(t *testing.T) {
	const stream, id = "fullintake", 25
	c, n1, hold, release := startHeldSyncPair(t, assignment(stream, id, 1, "n1", []string{"n2"}, wire.HistoryStart{Epoch: 1, Node: "n1"}))
	c.mustPublish(stream, payload(0))
	hold.armed.Store(true)
	o := n1.h.owners()[0]
	msg := func(i int) *nats.Msg {
		return &nats.Msg{Subject: wire.PublishSubject(stream), Reply: nats.NewInbox(), Data: payload(i)}
	}
	defer release() // before the hosts' stop, which waits for the fsync
	o.onPublish(msg(1))
	<-hold.held
	// The appender writes ahead of the held fsync up to maxWrittenAhead
	// appends, then waits: fill the queue until it stays full.
	for i, tries := 2, 0; ; tries++ {
		if tries > 100 {
			t.Fatalf("the intake queue never stayed full (%d of %d)", len(o.in), cap(o.in))
		}
		for ; len(o.in) < cap(o.in); i++ {
			o.onPublish(msg(i)) // returns while the queue has room
		}
		time.Sleep(20 * time.Millisecond)
		if len(o.in) == cap(o.in) {
			break
		}
	}
	waiting := make(chan struct{})
	go func() {
		o.onPublish(msg(-1))
		close(waiting)
	}()
	time.Sleep(50 * time.Millisecond)
	select {
	case <-waiting:
		t.Fatalf("the publish callback did not wait to queue (queue %d of %d)", len(o.in), cap(o.in))
	default:
	}
	stopped := make(chan struct{})
	go func() {
		o.stopIntake(wire.CodeShuttingDown)
		close(stopped)
	}()
	for what, ch := range map[string]chan struct{}{"the intake's stop": stopped, "the waiting publish callback": waiting} {
		select {
		case <-ch:
		case <-time.After(3 * time.Second):
			t.Errorf("%s waited for the held fsync", what)
		}
	}
	release()
}
