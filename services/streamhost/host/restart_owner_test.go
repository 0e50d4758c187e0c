package host

import (
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/brook-streams/brook/pkg/streamlog"
	"github.com/brook-streams/brook/pkg/wire"
)

// TestRestartedOwnerSealsItsEpoch: E=3, W=2. The owner replicates a record
// it has written but not synced; n2 makes it durable; the owner crashes
// before its fsync and comes back, fast, to the same assignment with a
// shorter log. Were it to serve epoch 1 again, it would write another
// record at that offset and confirm it with n3, and the two followers
// would differ at one offset of one epoch, both at the same tail: a
// recovery ranking them by tail could promote n2 and lose the confirmed
// record (a reviewer's counterexample). The restarted owner must instead
// seal its copy at epoch 2, confirm nothing, and let recovery take over.
func TestRestartedOwnerSealsItsEpoch(t *testing.T) {
	const stream, id, confirmed = "overlap", 11, 5
	c := newMiniCluster(t)
	mem := vfs.NewCrashableMem()
	syncedDir(t, mem, c.dataDir("n1"))
	hold := newSyncHold()
	c.assign(assignment(stream, id, 1, "n1", []string{"n2", "n3"}, wire.HistoryStart{Epoch: 1, Node: "n1"}))
	n1 := c.start("n1", func(cfg *Config) { cfg.StoreFS = errorfs.Wrap(mem, hold) })
	c.start("n2", nil)
	c.waitCopy("n1", stream, "owner", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner && cs.Epoch == 1 })
	c.waitCopy("n2", stream, "follower", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleFollower && cs.Epoch == 1 })
	for i := range confirmed {
		if pc := c.mustPublish(stream, payload(i)); pc.Offset != uint64(i) {
			t.Fatalf("publish %d: %+v", i, pc)
		}
	}
	hold.armed.Store(true)
	go func() { _, _ = c.publish(stream, payload(confirmed), "", 0) }()
	<-hold.held
	c.waitTails("n2", stream, "n2 holds the unsynced record", func(t streamlog.Tails) bool { return t.Record == confirmed+1 })
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	close(hold.release)
	n1.stop()

	// The fast restart: same assignment, same epoch, shorter log.
	c.start("n1", func(cfg *Config) { cfg.StoreFS = crashed })
	cs := c.waitCopy("n1", stream, "the restarted owner's copy sealed, without a role", func(cs wire.CopyStatus) bool {
		return cs.Sealed && cs.Role == wire.RoleNone
	})
	if cs.RecordTail != confirmed {
		t.Fatalf("restarted owner at record tail %d, want the %d it had synced", cs.RecordTail, confirmed)
	}
	if seal, ok := copyOf(c, "n1", stream).SealInfo(); !ok || seal.FenceEpoch != 2 {
		t.Fatalf("restarted owner's seal %+v (sealed %v), want fence 2", seal, ok)
	}
	c.start("n3", nil)
	// Nothing is written or confirmed at epoch 1 any more.
	resp, err := c.nc.Request(wire.PublishSubject(stream), []byte("B"), 500*time.Millisecond)
	if err == nil && replyError(resp) == nil {
		t.Fatalf("the restarted owner confirmed %s at the epoch it lost records of", resp.Data)
	}
	time.Sleep(100 * time.Millisecond)
	if tl := copyOf(c, "n3", stream); tl != nil && tl.Tails().Record > confirmed {
		t.Fatalf("n3 received records past %d at epoch 1: tails %+v", confirmed, tl.Tails())
	}

	// The recovery's seal at the same fence, a later transition, takes the
	// seal over, and the furthest copy (n2, with the unconfirmed record)
	// is promoted; the old owner follows it and all three agree.
	if _, e := c.seal("n1", stream, id, 2, 1); e != nil {
		t.Fatalf("recovery's seal of the restarted owner: %v", e)
	}
	s2, e := c.seal("n2", stream, id, 2, 1)
	if e != nil || s2.RecordTail != confirmed+1 {
		t.Fatalf("seal n2: %+v %v", s2, e)
	}
	c.assign(assignment(stream, id, 2, "n2", []string{"n1", "n3"},
		wire.HistoryStart{Epoch: 1, Node: "n1"},
		wire.HistoryStart{Epoch: 2, RecordTail: s2.RecordTail, CursorTail: s2.CursorTail, Node: "n2"}))
	c.waitCopy("n2", stream, "n2 owner at epoch 2", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner && cs.Epoch == 2 })
	pc := c.mustPublish(stream, []byte("after"))
	if pc.Offset != confirmed+1 || pc.Epoch != 2 {
		t.Fatalf("publish after the recovery: %+v", pc)
	}
	end := uint64(confirmed + 2)
	want := c.waitTails("n2", stream, "n2's log", func(t streamlog.Tails) bool { return t.Record == end })
	for _, n := range []string{"n1", "n3"} {
		if got := c.waitTails(n, stream, n+" caught up", func(t streamlog.Tails) bool { return t.Record == end }); got.RecordDigest != want.RecordDigest {
			t.Fatalf("%s's log differs from the owner's: digest %016x, want %016x", n, got.RecordDigest, want.RecordDigest)
		}
	}
}

// copyOf is node's copy of stream, nil if it holds none.
func copyOf(c *miniCluster, node, stream string) *streamlog.Copy {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hosts[node].h.store.Get(stream)
}
