package host

import (
	"bytes"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/brook-streams/brook/pkg/streamlog"
	"github.com/brook-streams/brook/pkg/wire"
)

// syncHold holds the store's WAL syncs once armed: the first one to come
// closes held, and each waits for release and then fails, so that nothing
// written after arming becomes durable; with pass set (before arming) they
// succeed after the release instead.
type syncHold struct {
	armed   atomic.Bool
	pass    atomic.Bool
	once    sync.Once
	held    chan struct{}
	release chan struct{}
}

func newSyncHold() *syncHold {
	return &syncHold{held: make(chan struct{}), release: make(chan struct{})}
}

func (h *syncHold) MaybeError(op errorfs.Op) error {
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
	if h.pass.Load() {
		return nil
	}
	return errorfs.ErrInjected
}

func (h *syncHold) String() string { return "hold WAL syncs" }

// releaser returns a release of the held syncs that may be called more
// than once, and registers it as t's cleanup: a failure before the test
// releases them must not leave the store stuck in its sync, nor its close,
// which waits for it (cleanups run last first: this one before the
// hosts' stop).
func (h *syncHold) releaser(t *testing.T) func() {
	var once sync.Once
	release := func() { once.Do(func() { close(h.release) }) }
	t.Cleanup(release)
	return release
}

// waitTails waits until node's copy of stream has tails pred accepts.
func (c *miniCluster) waitTails(node, stream, what string, pred func(streamlog.Tails) bool) streamlog.Tails {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.mu.Lock()
		th := c.hosts[node]
		c.mu.Unlock()
		var t streamlog.Tails
		if cp := th.h.store.Get(stream); cp != nil {
			if t = cp.Tails(); pred(t) {
				return t
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out waiting for %s's copy of %s: %s (tails %+v)", node, stream, what, t)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestOwnerCrashBeforeItsFsync: the owner replicates a record while its
// own fsync runs, the follower makes it durable, and the owner dies before
// its own fsync completes (the WAL sync is held, and the owner's store is
// then taken as it would be found after a crash: only what was synced).
// The record was never confirmed (the owner's copy is one of the W). The
// owner comes back with a shorter log than the follower; the failover
// either promotes the follower, which keeps the record, or promotes the
// old owner, which cuts it from the follower; in both nothing confirmed is
// lost, the copies end with the same log, and the old owner serves again
// (as the new owner's follower, or as the owner) with publishes confirmed
// on both copies.
func TestOwnerCrashBeforeItsFsync(t *testing.T) {
	for _, promoteFollower := range []bool{true, false} {
		name := "promote the follower: the record is kept"
		if !promoteFollower {
			name = "promote the old owner: the record is cut"
		}
		t.Run(name, func(t *testing.T) {
			const stream, id, confirmed = "overlap", 11, 5
			c, n1, mem, hold := startHeldOwner(t, stream, id, confirmed)

			// The owner's next fsync is held: the follower gets the
			// record anyway and makes it durable.
			hold.armed.Store(true)
			answer := make(chan *wire.Error, 1)
			go func() {
				pc, e := c.publish(stream, payload(confirmed), "", 0)
				if e == nil {
					t.Errorf("record confirmed at %d without the owner's fsync", pc.Offset)
				}
				answer <- e
			}()
			<-hold.held
			c.waitTails("n2", stream, "the record durable at the follower", func(t streamlog.Tails) bool { return t.Record == confirmed+1 })
			if got := n1.h.store.Get(stream).Tails(); got.Record != confirmed || got.RecordWritten != confirmed+1 {
				t.Fatalf("owner's tails %+v with its fsync held: want durable %d, written %d", got, confirmed, confirmed+1)
			}
			select {
			case e := <-answer:
				t.Fatalf("publish answered %v before the owner's fsync", e)
			case <-time.After(100 * time.Millisecond):
			}
			if wm := c.fetch(stream, wire.FetchRequest{Start: "earliest"}).Confirmed; wm != confirmed {
				t.Fatalf("watermark %d with the owner's fsync held, want %d", wm, confirmed)
			}

			// The owner dies now: what it would find on restart is what
			// was synced. The process in this test lives on with a failed
			// store (the held sync fails), answers the publish
			// unavailable, and is stopped.
			crashed := mem.CrashClone(vfs.CrashCloneCfg{})
			close(hold.release)
			// Unavailable, or shutting_down if the host's stop (on the
			// store's failure) fails it first: retryable, not confirmed.
			if e := <-answer; e == nil || (e.Code != wire.CodeUnavailable && e.Code != wire.CodeShuttingDown) {
				t.Fatalf("publish whose owner's fsync failed answered %v, want unavailable or shutting_down", e)
			}
			n1.stop()

			follower, owner := "n1", "n2"
			if !promoteFollower {
				follower, owner = "n2", "n1"
			}
			// The old owner restarts with the log it had synced: shorter
			// than the follower's.
			c.start("n1", func(cfg *Config) { cfg.StoreFS = crashed })
			if got := c.waitTails("n1", stream, "the old owner back", func(streamlog.Tails) bool { return true }); got.Record != confirmed {
				t.Fatalf("the old owner came back at record tail %d, want the %d it had synced", got.Record, confirmed)
			}
			// It does not serve the epoch it lost records of again: it
			// seals its copy at the next one for recovery to take over
			// (fenceEarlierOwner; TestRestartedOwnerSealsItsEpoch).
			c.waitCopy("n1", stream, "the old owner sealed", func(cs wire.CopyStatus) bool { return cs.Sealed && cs.Role == wire.RoleNone })
			// The recovery seals R = E-W+1 = 1 copy and promotes the
			// furthest sealed one; here the one this case names.
			sr, e := c.seal(owner, stream, id, 2, 1)
			if e != nil {
				t.Fatalf("seal %s: %v", owner, e)
			}
			wantTail := uint64(confirmed + 1)
			if owner == "n1" {
				wantTail = confirmed // the old owner lost its unsynced record
			}
			if sr.RecordTail != wantTail {
				t.Fatalf("sealed %s at record tail %d, want %d", owner, sr.RecordTail, wantTail)
			}
			c.assign(assignment(stream, id, 2, owner, []string{follower},
				wire.HistoryStart{Epoch: 1, Node: "n1"},
				wire.HistoryStart{Epoch: 2, RecordTail: sr.RecordTail, CursorTail: sr.CursorTail, Node: owner}))
			c.waitCopy(owner, stream, "owner at epoch 2", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner && cs.Epoch == 2 })
			c.waitCopy(follower, stream, "follower at epoch 2", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleFollower && cs.Epoch == 2 })

			pc := c.mustPublish(stream, []byte("after"))
			if pc.Offset != wantTail || pc.Epoch != 2 || pc.Copies != 2 {
				t.Fatalf("publish after the failover: %+v, want offset %d at epoch 2 on 2 copies", pc, wantTail)
			}
			end := wantTail + 1
			ot := c.waitTails(owner, stream, "the new owner's log", func(t streamlog.Tails) bool { return t.Record == end })
			ft := c.waitTails(follower, stream, "the follower caught up", func(t streamlog.Tails) bool { return t.Record == end })
			if ot.RecordDigest != ft.RecordDigest {
				t.Fatalf("logs differ after the failover: owner digest %016x, follower %016x", ot.RecordDigest, ft.RecordDigest)
			}

			b := c.fetch(stream, wire.FetchRequest{Start: "earliest"})
			want := [][]byte{}
			for i := range confirmed {
				want = append(want, payload(i))
			}
			if promoteFollower {
				want = append(want, payload(confirmed)) // kept: never confirmed, now confirmed at epoch 2
			}
			want = append(want, []byte("after"))
			if len(b.Records) != len(want) {
				t.Fatalf("read %d records after the failover, want %d", len(b.Records), len(want))
			}
			for i, r := range b.Records {
				if r.Offset != uint64(i) || !bytes.Equal(r.Data, want[i]) {
					t.Fatalf("record %d: %q at %d, want %q", i, r.Data, r.Offset, want[i])
				}
			}
		})
	}
}

// TestOwnerWritesWhileItsFsyncRuns: the owner writes the next batch while
// the previous one's group commit is in flight (issue 16: its group commits
// are pipelined), and its followers get both before the owner's fsync
// ends; neither is confirmed before the owner's own copy is durable.
func TestOwnerWritesWhileItsFsyncRuns(t *testing.T) {
	const stream, id, confirmed = "pipelined", 12, 3
	c, n1, _, hold := startHeldOwner(t, stream, id, confirmed)
	release := hold.releaser(t)

	hold.armed.Store(true)
	answers := make(chan *wire.Error, 2)
	publish := func(i int) {
		pc, e := c.publish(stream, payload(i), "", 0)
		if e == nil {
			t.Errorf("record confirmed at %d without the owner's fsync", pc.Offset)
		}
		answers <- e
	}
	go publish(confirmed)
	<-hold.held // the first batch's group commit is in flight, its fsync held
	go publish(confirmed + 1)
	// The second is written behind the first while the fsync is held, and
	// the follower gets and holds both.
	c.waitTails("n1", stream, "the second batch written during the first's fsync", func(t streamlog.Tails) bool { return t.RecordWritten == confirmed+2 })
	c.waitTails("n2", stream, "both durable at the follower", func(t streamlog.Tails) bool { return t.Record == confirmed+2 })
	if got := n1.h.store.Get(stream).Tails(); got.Record != confirmed {
		t.Fatalf("owner's durable tail %d with its fsync held, want %d", got.Record, confirmed)
	}
	if wm := c.fetch(stream, wire.FetchRequest{Start: "earliest"}).Confirmed; wm != confirmed {
		t.Fatalf("watermark %d with the owner's fsync held, want %d", wm, confirmed)
	}
	select {
	case e := <-answers:
		t.Fatalf("publish answered %v before the owner's fsync", e)
	case <-time.After(100 * time.Millisecond):
	}
	// The held sync fails: the store fails (fail-stop) and neither
	// publish is confirmed.
	release()
	for range 2 {
		if e := <-answers; e == nil || (e.Code != wire.CodeUnavailable && e.Code != wire.CodeShuttingDown) {
			t.Fatalf("publish whose owner's fsync failed answered %v, want unavailable or shutting_down", e)
		}
	}
	n1.stop()
}

// startHeldOwner starts n1 as the owner of stream (id) at epoch 1 with n2
// its follower, n1's store on a crashable in-memory file system whose WAL
// syncs hold can hold once armed, and confirms the records 0 to confirmed-1
// on both copies.
func startHeldOwner(t *testing.T, stream string, id uint64, confirmed int) (*miniCluster, *testHost, *vfs.MemFS, *syncHold) {
	t.Helper()
	return startHeld(t, stream, id, confirmed, "n1", nil)
}

// startHeld starts n1 as the owner of stream (id) at epoch 1 with n2 its
// follower (W = 2), both configured by adjust (if not nil), the store of
// node held (n1 or n2) on a crashable in-memory file system whose WAL
// syncs hold can hold once armed, and confirms the records 0 to
// confirmed-1 on both copies. It returns held's host.
func startHeld(t *testing.T, stream string, id uint64, confirmed int, held string, adjust func(*Config)) (*miniCluster, *testHost, *vfs.MemFS, *syncHold) {
	t.Helper()
	c := newMiniCluster(t)
	mem := vfs.NewCrashableMem()
	syncedDir(t, mem, c.dataDir(held))
	hold := newSyncHold()
	c.assign(assignment(stream, id, 1, "n1", []string{"n2"}, wire.HistoryStart{Epoch: 1, Node: "n1"}))
	hosts := map[string]*testHost{}
	for _, n := range []string{"n1", "n2"} {
		hosts[n] = c.start(n, func(cfg *Config) {
			if adjust != nil {
				adjust(cfg)
			}
			if n == held {
				cfg.StoreFS = errorfs.Wrap(mem, hold)
			}
		})
	}
	c.waitCopy("n1", stream, "owner at epoch 1", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner && cs.Epoch == 1 })
	c.waitCopy("n2", stream, "follower at epoch 1", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleFollower && cs.Epoch == 1 })
	for i := range confirmed {
		if pc := c.mustPublish(stream, payload(i)); pc.Offset != uint64(i) || pc.Copies != 2 {
			t.Fatalf("publish %d: %+v", i, pc)
		}
	}
	return c, hosts[held], mem, hold
}

// syncedDir creates dir on fs with every directory on its path synced, so
// that a crash clone of fs keeps what the store syncs inside it.
func syncedDir(t *testing.T, fs vfs.FS, dir string) {
	t.Helper()
	if err := fs.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for p := dir; ; p = fs.PathDir(p) {
		d, err := fs.OpenDir(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Sync(); err != nil {
			t.Fatal(err)
		}
		_ = d.Close()
		if fs.PathDir(p) == p {
			return
		}
	}
}
