package host

import (
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/streamlog"
	"github.com/brook-streams/brook/pkg/wire"
)

// heldFollowerWrites starts n1 as the owner of stream (id) at epoch 1 with
// n2 its follower (W = 2: every confirm needs n2) on a crashable in-memory
// file system (startHeld), confirms records 0 to confirmed-1, then holds
// n2's WAL syncs and publishes two more, one after the other has reached
// n2's held fsync, and waits until n2 has written both. Their outcomes go
// to the channel returned; release ends the hold (the held sync fails).
func heldFollowerWrites(t *testing.T, stream string, id uint64, confirmed int, adjust func(*Config)) (c *miniCluster, n2 *testHost, mem *vfs.MemFS, release func(), done chan published) {
	t.Helper()
	c, n2, mem, hold := startHeld(t, stream, id, confirmed, "n2", adjust)
	release = releaser(t, hold)
	hold.armed.Store(true)
	done = make(chan published, 2)
	c.publishTo(stream, confirmed, done)
	<-hold.held // n2's first batch is written, its fsync held
	c.publishTo(stream, confirmed+1, done)
	// The follower asks for and writes the second batch behind the first.
	c.waitTails("n2", stream, "the second batch written during the first's fsync", func(t streamlog.Tails) bool {
		return t.RecordWritten == uint64(confirmed)+2
	})
	return c, n2, mem, release, done
}

// digestsOf returns the running digest of c's log at a record tail.
func digestsOf(t *testing.T, c *streamlog.Copy) func(at uint64) uint64 {
	return func(at uint64) uint64 {
		t.Helper()
		d, err := c.DigestAt(at)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
}

// startOwnerAlone starts n1 as the owner of stream (id) at epoch 1 with
// followers n2 and n3 (W = 2) that no host plays: a test acks for them.
func startOwnerAlone(t *testing.T, stream string, id uint64) (*miniCluster, *testHost) {
	t.Helper()
	c := newMiniCluster(t)
	c.assign(assignment(stream, id, 1, "n1", []string{"n2", "n3"}))
	n1 := c.start("n1", func(cfg *Config) { cfg.ConfirmTimeout = 20 * time.Second })
	c.waitCopy("n1", stream, "owner at epoch 1", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner && cs.Epoch == 1 })
	return c, n1
}

// releaser returns hold's release, callable more than once; it is also a
// cleanup, so that a failing test does not leave a store stuck in its
// sync (cleanups run last first: this one before the hosts' stops).
func releaser(t *testing.T, hold *syncHold) func() {
	var released sync.Once
	release := func() { released.Do(func() { close(hold.release) }) }
	t.Cleanup(release)
	return release
}

// published is one publish's outcome.
type published struct {
	pc *wire.PublishConfirm
	e  *wire.Error
}

// publishTo publishes payload(i) to stream in a goroutine; its outcome
// goes to out.
func (c *miniCluster) publishTo(stream string, i int, out chan<- published) {
	go func() {
		pc, e := c.publish(stream, payload(i), "", 0)
		out <- published{pc, e}
	}()
}

// confirmedOn2 takes the next outcome from out within wait and fails the
// test unless it is a confirm on 2 copies.
func confirmedOn2(t *testing.T, out <-chan published, wait time.Duration, what string) *wire.PublishConfirm {
	t.Helper()
	select {
	case r := <-out:
		if r.e != nil || r.pc.Copies != 2 {
			t.Fatalf("%s: publish answered %+v, %v; want a confirm on 2 copies", what, r.pc, r.e)
		}
		return r.pc
	case <-time.After(wait):
		t.Fatalf("%s: no confirm within %v", what, wait)
		return nil
	}
}

// TestFollowerAsksWhileItsFsyncRuns: with the follower's fsync held, it
// still asks for and writes the next batch (its request reads from its
// written tail), while the owner counts only its durable tail: nothing is
// confirmed past what the follower holds durably (issue 16: the follower
// pipelines its applies). With Apply serial, the follower would not ask
// again before the held fsync ended; with the ack taken from the read
// position, the watermark would move.
func TestFollowerAsksWhileItsFsyncRuns(t *testing.T) {
	const stream, id, confirmed = "folpipe", 21, 3
	c, n2, _, release, answers := heldFollowerWrites(t, stream, id, confirmed, func(cfg *Config) { cfg.ConfirmTimeout = 20 * time.Second })
	if got := n2.h.store.Get(stream).Tails(); got.Record != confirmed {
		t.Fatalf("follower's durable tail %d with its fsync held, want %d", got.Record, confirmed)
	}
	c.waitTails("n1", stream, "both durable at the owner", func(t streamlog.Tails) bool { return t.Record == confirmed+2 })
	// The owner has both durably and the follower has both written: W = 2
	// is not met until the follower's fsync.
	for range 3 {
		if wm := c.fetch(stream, wire.FetchRequest{Start: "earliest"}).Confirmed; wm != confirmed {
			t.Fatalf("watermark %d with the follower's fsync held, want %d", wm, confirmed)
		}
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case r := <-answers:
		t.Fatalf("publish answered %+v, %v before the follower's fsync", r.pc, r.e)
	default:
	}
	// The held sync fails: the follower's store fails (fail-stop); the
	// records it wrote were never acked.
	release()
	n2.stop()
}

// TestOwnerCountsOnlyDurableTails plays the follower n2 by hand: a request
// reading from past its durable tail is served from there but its ack is
// the durable tail only; a standalone ack (no reply subject) is counted at
// once; a wrong digest at the read position is diverged and counts
// nothing; a read position past the owner's written tail is bad_request.
func TestOwnerCountsOnlyDurableTails(t *testing.T) {
	const stream, id = "durableack", 22
	c, n1 := startOwnerAlone(t, stream, id)

	done := make(chan published, 2)
	c.publishTo(stream, 0, done)
	c.publishTo(stream, 1, done)
	owned := n1.h.store.Get(stream)
	for owned.Tails().Record < 2 {
		time.Sleep(time.Millisecond)
	}
	digest := digestsOf(t, owned)
	subj := wire.ReplicationSubject(stream, 1, "n2")
	ask := func(r frame.ReplRequest) (*frame.Batch, *wire.Error) {
		t.Helper()
		r.Node, r.Epoch, r.StreamID = "n2", 1, id
		resp, err := c.nc.Request(subj, frame.AppendReplRequest(nil, &r), 5*time.Second)
		if err != nil {
			t.Fatalf("request %+v: %v", r, err)
		}
		if e := replyError(resp); e != nil {
			return nil, e
		}
		b, err := frame.DecodeBatch(resp.Data)
		if err != nil {
			t.Fatalf("reply to %+v: %v", r, err)
		}
		return b, nil
	}
	notConfirmed := func(what string) {
		t.Helper()
		select {
		case r := <-done:
			t.Fatalf("publish answered %+v, %v after %s", r.pc, r.e, what)
		case <-time.After(200 * time.Millisecond):
		}
		if cs, _ := find(n1.h.Heartbeat(false), stream); cs.Confirmed != 0 {
			t.Fatalf("owner confirmed %d after %s", cs.Confirmed, what)
		}
	}

	// Durable 0, written 2: served from 2 (nothing there yet), acked at 0.
	b, e := ask(frame.ReplRequest{RecordTail: 0, TailDigest: digest(0), ReadFrom: 2, ReadDigest: digest(2)})
	if e != nil || b.Next != 2 || len(b.Records) != 0 {
		t.Fatalf("request reading from 2: batch %+v, error %v; want nothing from 2", b, e)
	}
	notConfirmed("an ack with durable tail 0 and read position 2")
	// Durable 0, read from 1: the record at 1 is sent, not the one at 0.
	if b, e := ask(frame.ReplRequest{RecordTail: 0, TailDigest: digest(0), ReadFrom: 1, ReadDigest: digest(1)}); e != nil || len(b.Records) != 1 || b.Records[0].Offset != 1 {
		t.Fatalf("request reading from 1: batch %+v, error %v; want the record at 1", b, e)
	}
	// A wrong digest at the read position: diverged, nothing counted,
	// although the durable tail's digest matches.
	if _, e := ask(frame.ReplRequest{RecordTail: 1, TailDigest: digest(1), ReadFrom: 2, ReadDigest: digest(2) ^ 1}); e == nil || e.Code != wire.CodeDiverged {
		t.Fatalf("request with a wrong read digest answered %v, want diverged", e)
	}
	notConfirmed("a request with a wrong read digest")
	// A read position past the owner's written tail: bad_request.
	if _, e := ask(frame.ReplRequest{RecordTail: 1, TailDigest: digest(1), ReadFrom: 3, ReadDigest: 7}); e == nil || e.Code != wire.CodeBadRequest {
		t.Fatalf("request reading past the owner's tail answered %v, want bad_request", e)
	}
	notConfirmed("a request reading past the owner's tail")

	// A standalone ack of durable tail 1: the first record confirms, with
	// no reply to the ack.
	ack := frame.ReplRequest{Node: "n2", Epoch: 1, StreamID: id, RecordTail: 1, TailDigest: digest(1)}
	if err := c.nc.Publish(subj, frame.AppendReplRequest(nil, &ack)); err != nil {
		t.Fatal(err)
	}
	if pc := confirmedOn2(t, done, 10*time.Second, "after the standalone ack of tail 1"); pc.Offset != 0 {
		t.Fatalf("the standalone ack of tail 1 confirmed offset %d, want 0", pc.Offset)
	}
	// An older ack served late does not take the count back.
	if _, e := ask(frame.ReplRequest{RecordTail: 0, TailDigest: digest(0), ReadFrom: 2, ReadDigest: digest(2)}); e != nil {
		t.Fatal(e)
	}
	if cs, _ := find(n1.h.Heartbeat(false), stream); cs.Confirmed != 1 {
		t.Fatalf("watermark %d after an older ack, want 1", cs.Confirmed)
	}
	ack.RecordTail, ack.TailDigest = 2, digest(2)
	if err := c.nc.Publish(subj, frame.AppendReplRequest(nil, &ack)); err != nil {
		t.Fatal(err)
	}
	if pc := confirmedOn2(t, done, 10*time.Second, "after the standalone ack of tail 2"); pc.Offset != 1 {
		t.Fatalf("the standalone ack of tail 2 confirmed offset %d, want 1", pc.Offset)
	}
}

// TestStandaloneAckBeatsTheLongPoll: a follower that wrote a batch asks
// for the next one at once, and that request waits at the owner (its long
// poll, busyWait) while the batch's fsync runs; the batch's ack must not
// wait for the poll to end. Sequential publishes, each needing the
// follower (W = 2), must confirm well within the poll's wait.
func TestStandaloneAckBeatsTheLongPoll(t *testing.T) {
	const stream, id = "parked", 23
	c := startPair(t, stream, id, func(cfg *Config) { cfg.ReplWait = 2 * time.Second })
	var took []time.Duration
	for i := range 9 {
		began := time.Now()
		if pc := c.mustPublish(stream, payload(i)); pc.Copies != 2 {
			t.Fatalf("publish %d: %+v", i, pc)
		}
		took = append(took, time.Since(began))
	}
	slices.Sort(took)
	// The follower's poll after a batch waits busyWait at the owner; a
	// confirm that waited for it would take about that long.
	if med := took[len(took)/2]; med >= busyWait/3 {
		t.Fatalf("median confirm %v with the follower's poll waiting %v: the ack waited for the poll (all: %v)", med, busyWait, took)
	}
}

// TestFollowerCrashWithWrittenRecords: the follower dies with records
// written but not durable (its fsync held; its store is then taken as a
// crash would leave it). It comes back with only its durable records,
// which were all it ever acked: nothing confirmed is lost, it catches up
// from its durable tail, and the publishes that waited for it confirm on
// both copies with the copies' logs equal.
func TestFollowerCrashWithWrittenRecords(t *testing.T) {
	const stream, id, confirmed = "folcrash", 24, 4
	c, n2, mem, release, done := heldFollowerWrites(t, stream, id, confirmed, func(cfg *Config) { cfg.ConfirmTimeout = 30 * time.Second })
	if wm := c.fetch(stream, wire.FetchRequest{Start: "earliest"}).Confirmed; wm != confirmed {
		t.Fatalf("watermark %d with the follower's fsync held, want %d", wm, confirmed)
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	// What the crash left, read from a second clone of the same moment
	// (the host then starts on the first, as after a crash): a started
	// follower catches up from the owner at once, sometimes before a look
	// at its tails.
	inspected := mem.CrashClone(vfs.CrashCloneCfg{})
	release()
	n2.stop()

	st, err := streamlog.Open(streamlog.Options{Dir: c.dataDir("n2"), FS: inspected, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	got := st.Get(stream).Tails()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if got.Record != confirmed || got.RecordWritten != confirmed {
		t.Fatalf("the follower came back at record tail %d (written %d), want %d (what it had synced)", got.Record, got.RecordWritten, confirmed)
	}
	c.start("n2", func(cfg *Config) { cfg.StoreFS = crashed })
	for range 2 {
		confirmedOn2(t, done, 20*time.Second, "after the follower's restart")
	}
	pc := c.mustPublish(stream, []byte("after"))
	end := pc.Offset + 1
	if end != confirmed+3 {
		t.Fatalf("publish after the restart at %d, want %d", pc.Offset, confirmed+2)
	}
	ot := c.waitTails("n1", stream, "the owner's log", func(t streamlog.Tails) bool { return t.Record == end })
	ft := c.waitTails("n2", stream, "the follower caught up", func(t streamlog.Tails) bool { return t.Record == end })
	if ot.RecordDigest != ft.RecordDigest {
		t.Fatalf("logs differ: owner digest %016x, follower %016x", ot.RecordDigest, ft.RecordDigest)
	}
	b := c.fetch(stream, wire.FetchRequest{Start: "earliest"})
	if len(b.Records) != int(end) {
		t.Fatalf("read %d records, want %d", len(b.Records), end)
	}
	for i := range confirmed + 2 {
		if string(b.Records[i].Data) != string(payload(i)) {
			t.Fatalf("record %d is %q, want %q", i, b.Records[i].Data, payload(i))
		}
	}
}
