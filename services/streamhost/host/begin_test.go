package host

import (
	"bytes"
	"log/slog"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/brook-streams/brook/pkg/streamlog"
	"github.com/brook-streams/brook/pkg/wire"
)

// TestNewOwnerServesNothingBeforeItsBeginIsDurable: a promoted copy begins
// its epoch without waiting for the write to be durable
// (streamlog.Copy.BeginEpochAsync) and starts its role at once, but serves
// its followers nothing until the begin is durable. Here the new owner's
// WAL syncs are held from before the promotion: it still takes the role
// and writes a publish, yet its follower gets nothing of the new epoch;
// then it crashes (only what was synced survives: the begin is lost with
// the record) and comes back sealed at the epoch it had begun. It serves
// that epoch again, which is safe only because nothing it wrote there left
// the host: the next publish is confirmed on both copies at the offset the
// lost record had, and both copies end with the same log. Had the record
// reached the follower, the two copies of epoch 2 would differ at that
// offset (docs/failover.md, "The new owner's epoch begins before it is
// durable").
func TestNewOwnerServesNothingBeforeItsBeginIsDurable(t *testing.T) {
	const stream, id, confirmed = "begin", 13, 4
	c, n1, mem, hold := startHeldOwner(t, stream, id, confirmed)
	release := hold.releaser(t)

	// A recovery seals both copies at fence 2 and promotes n1 again (its
	// tail is the furthest, as after a planned move's hand-off).
	for _, n := range []string{"n1", "n2"} {
		if sr, e := c.seal(n, stream, id, 2, 1); e != nil || sr.RecordTail != confirmed {
			t.Fatalf("seal %s: %+v %v", n, sr, e)
		}
	}
	hold.armed.Store(true)
	c.assign(assignment(stream, id, 2, "n1", []string{"n2"},
		wire.HistoryStart{Epoch: 1, Node: "n1"},
		wire.HistoryStart{Epoch: 2, RecordTail: confirmed, Node: "n1"}))
	// The role starts while its begin's sync is held.
	c.waitCopy("n1", stream, "owner at epoch 2 with its begin not yet durable", func(cs wire.CopyStatus) bool {
		return cs.Role == wire.RoleOwner && cs.Epoch == 2
	})
	c.waitCopy("n2", stream, "follower at epoch 2", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleFollower && cs.Epoch == 2 })
	select {
	case <-hold.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the new owner's begin never synced")
	}

	answer := make(chan *wire.Error, 1)
	go func() {
		pc, e := c.publish(stream, payload(confirmed), "", 0)
		if e == nil {
			t.Errorf("record confirmed at %d with the new owner's begin not durable", pc.Offset)
		}
		answer <- e
	}()
	c.waitTails("n1", stream, "the record written at the new owner", func(t streamlog.Tails) bool { return t.RecordWritten == confirmed+1 })
	// The follower asks all this time (its long polls end every few ms
	// when nothing comes); it must get nothing of epoch 2.
	time.Sleep(300 * time.Millisecond)
	if got := copyOf(c, "n2", stream).Tails(); got.RecordWritten != confirmed {
		t.Fatalf("the follower got records of epoch 2 before the new owner's begin was durable: tails %+v", got)
	}

	// n1 crashes: its begin and its record were never synced.
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	release()
	if e := <-answer; e == nil || (e.Code != wire.CodeUnavailable && e.Code != wire.CodeShuttingDown) {
		t.Fatalf("publish whose owner's fsync failed answered %v, want unavailable or shutting_down", e)
	}
	n1.stop()
	c.start("n1", func(cfg *Config) { cfg.StoreFS = crashed })
	c.waitCopy("n1", stream, "the restarted owner serving epoch 2", func(cs wire.CopyStatus) bool {
		return cs.Role == wire.RoleOwner && cs.Epoch == 2 && !cs.Sealed
	})

	pc := c.mustPublish(stream, []byte("after"))
	if pc.Offset != confirmed || pc.Epoch != 2 || pc.Copies != 2 {
		t.Fatalf("publish after the restart: %+v, want offset %d at epoch 2 on 2 copies", pc, confirmed)
	}
	ot := c.waitTails("n1", stream, "the owner's log", func(t streamlog.Tails) bool { return t.Record == confirmed+1 })
	ft := c.waitTails("n2", stream, "the follower caught up", func(t streamlog.Tails) bool { return t.Record == confirmed+1 })
	if ot.RecordDigest != ft.RecordDigest {
		t.Fatalf("the copies of epoch 2 differ: owner digest %016x, follower %016x", ot.RecordDigest, ft.RecordDigest)
	}
	b := c.fetch(stream, wire.FetchRequest{Start: "earliest"})
	if len(b.Records) != confirmed+1 {
		t.Fatalf("read %d records, want %d", len(b.Records), confirmed+1)
	}
	for i, r := range b.Records {
		want := payload(i)
		if i == confirmed {
			want = []byte("after")
		}
		if r.Offset != uint64(i) || !bytes.Equal(r.Data, want) {
			t.Fatalf("record %d: %q at %d, want %q", i, r.Data, r.Offset, want)
		}
	}
}

// heldBegin starts n1 as the owner of stream at epoch 1 (n2 its follower,
// confirmed records on both), seals both copies at fence 2 and promotes n1
// again at epoch 2 with its WAL syncs held from before the promotion; the
// held syncs succeed once released. It returns when n1 owns epoch 2 and
// its begin's sync is held.
func heldBegin(t *testing.T, stream string, id uint64, confirmed int) (*miniCluster, *testHost, *vfs.MemFS, func()) {
	t.Helper()
	c, n1, mem, hold := startHeldOwner(t, stream, id, confirmed)
	release := hold.releaser(t)
	for _, n := range []string{"n1", "n2"} {
		if sr, e := c.seal(n, stream, id, 2, 1); e != nil || sr.RecordTail != uint64(confirmed) {
			t.Fatalf("seal %s: %+v %v", n, sr, e)
		}
	}
	hold.pass.Store(true)
	hold.armed.Store(true)
	c.assign(assignment(stream, id, 2, "n1", []string{"n2"},
		wire.HistoryStart{Epoch: 1, Node: "n1"},
		wire.HistoryStart{Epoch: 2, RecordTail: uint64(confirmed), Node: "n1"}))
	c.waitCopy("n1", stream, "owner at epoch 2 with its begin not yet durable", func(cs wire.CopyStatus) bool {
		return cs.Role == wire.RoleOwner && cs.Epoch == 2
	})
	select {
	case <-hold.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the new owner's begin never synced")
	}
	return c, n1, mem, release
}

// TestSealDuringTheNewOwnersPendingBegin: a seal (a later recovery's, at
// fence 3) that reaches the new owner while its begin's sync is held is a
// synced write after the begin: its reply names epoch 2 among the copy's
// log epochs, and a crash after the reply finds the copy at epoch 2 sealed
// at 3, not back at epoch 1 (docs/failover.md, "The new owner's epoch
// begins before it is durable", "A new seal").
func TestSealDuringTheNewOwnersPendingBegin(t *testing.T) {
	const stream, id, confirmed = "sealbegin", 14, 3
	c, n1, mem, release := heldBegin(t, stream, id, confirmed)

	type reply struct {
		sr *wire.SealReply
		e  *wire.Error
	}
	sealed := make(chan reply, 1)
	go func() {
		sr, e := c.seal("n1", stream, id, 3, 2)
		sealed <- reply{sr, e}
	}()
	// Let the seal reach the store and wait behind the held sync (were
	// it later, it would still come after the begin in the WAL).
	time.Sleep(100 * time.Millisecond)
	release()
	r := <-sealed
	if r.e != nil {
		t.Fatalf("seal at 3 during the pending begin: %v", r.e)
	}
	if n := len(r.sr.LogEpochs); n == 0 || r.sr.LogEpochs[n-1].Epoch != 2 || r.sr.FenceEpoch != 3 || r.sr.RecordTail != confirmed {
		t.Fatalf("seal reply %+v, want fence 3, tail %d, epoch 2 the last log epoch", r.sr, confirmed)
	}

	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	n1.stop()
	c.start("n1", func(cfg *Config) { cfg.StoreFS = crashed })
	c.waitCopy("n1", stream, "the restarted copy sealed at epoch 2", func(cs wire.CopyStatus) bool {
		return cs.Sealed && cs.Epoch == 2 && cs.RecordTail == confirmed
	})
	cp := copyOf(c, "n1", stream)
	if seal, ok := cp.SealInfo(); !ok || seal.FenceEpoch != 3 || cp.Epoch() != 2 {
		t.Fatalf("after the crash: epoch %d, seal %+v (sealed %v), want epoch 2 sealed at 3", cp.Epoch(), seal, ok)
	}
}

// TestStopDuringTheNewOwnersPendingBegin: a graceful stop while the new
// owner's begin is not yet durable waits for the sync (the store's close
// does) and finishes once it ends; the restarted host, its store closed
// cleanly, serves epoch 2 as owner (docs/failover.md, "The new owner's
// epoch begins before it is durable").
func TestStopDuringTheNewOwnersPendingBegin(t *testing.T) {
	const stream, id, confirmed = "stopbegin", 15, 3
	c, n1, mem, release := heldBegin(t, stream, id, confirmed)

	stopped := make(chan struct{})
	go func() {
		n1.stop()
		close(stopped)
	}()
	select {
	case <-stopped:
		t.Fatal("the host stopped with its begin's sync still held")
	case <-time.After(200 * time.Millisecond):
	}
	release()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the host did not stop once the begin's sync ended")
	}

	// Only what was synced survives: the begin must have been (a copy
	// of the store opened aside, before the host's own start, which
	// would begin the epoch again if it had been lost).
	st, err := streamlog.Open(streamlog.Options{Dir: c.dataDir("n1"), FS: mem.CrashClone(vfs.CrashCloneCfg{}), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	cp := st.Get(stream)
	_, sealed := cp.SealInfo()
	epoch, unclean := cp.Epoch(), st.UncleanStart()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if epoch != 2 || sealed || unclean {
		t.Fatalf("the store as the stop left it: epoch %d sealed %v unclean %v, want epoch 2, unsealed, clean", epoch, sealed, unclean)
	}
	n1 = c.start("n1", func(cfg *Config) { cfg.StoreFS = mem.CrashClone(vfs.CrashCloneCfg{}) })
	if n1.h.store.UncleanStart() {
		t.Fatal("the store of a host stopped gracefully started unclean")
	}
	c.waitCopy("n1", stream, "the restarted owner serving epoch 2", func(cs wire.CopyStatus) bool {
		return cs.Role == wire.RoleOwner && cs.Epoch == 2 && !cs.Sealed
	})
	if pc := c.mustPublish(stream, []byte("after")); pc.Offset != confirmed || pc.Epoch != 2 || pc.Copies != 2 {
		t.Fatalf("publish after the restart: %+v, want offset %d at epoch 2 on 2 copies", pc, confirmed)
	}
}
