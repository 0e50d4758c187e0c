package host

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/nettest"
	"github.com/brook-streams/brook/pkg/streamlog"
	"github.com/brook-streams/brook/pkg/wire"
)

// TestStuckAckPublishHoldsNoGroupCommit: a follower's standalone ack is
// stuck in its publish on a saturated connection (the host's connection
// stalls while a batch's fsync runs); an owner's append of an unrelated
// stream on the same host still becomes durable. Nothing on the store's
// committer goroutine waits for NATS (review r4, finding 1: with the ack
// sent from the committer, no write of the host became durable any more).
func TestStuckAckPublishHoldsNoGroupCommit(t *testing.T) {
	const stream, id, other, otherID = "ackstall", 41, "ackstall-other", 42
	c := newMiniCluster(t)
	c.assign(assignment(stream, id, 1, "n1", []string{"n2"}), assignment(other, otherID, 1, "n2", nil))
	c.start("n1", nil)
	p := nettest.NewStallProxy(t, c.url)
	nc, err := nats.Connect(p.URL(), nats.Name("brook-streamhost:n2"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	hold := newSyncHold()
	hold.pass.Store(true)
	n2 := c.startOn("n2", nc, func(cfg *Config) { cfg.StoreFS = errorfs.Wrap(vfs.Default, hold) })
	c.waitCopy("n2", stream, "follower at epoch 1", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleFollower && cs.Epoch == 1 })
	c.waitCopy("n2", other, "owner at epoch 1", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner && cs.Epoch == 1 })
	c.mustPublish(stream, payload(0))
	c.waitTails("n2", stream, "the first record durable", func(t streamlog.Tails) bool { return t.Record == 1 })

	// The next batch is written at n2, its fsync held.
	release := releaser(t, hold)
	hold.armed.Store(true)
	out := make(chan published, 2)
	c.publishTo(stream, 1, out)
	<-hold.held
	c.waitTails("n2", stream, "the second record written", func(t streamlog.Tails) bool { return t.RecordWritten == 2 })
	if got := n2.h.store.Get(stream).Tails().Record; got != 1 {
		t.Fatalf("durable tail %d with the fsync held, want 1", got)
	}

	// n2's connection stalls; its ack of the batch will wait for it.
	p.Pause()
	t.Cleanup(p.Resume) // before the hosts stop
	nettest.BlockWrites(t, nc)
	release()

	// An owner's append on the same host becomes durable all the same
	// (its confirm, published on the stalled connection, waits).
	c.publishTo(other, 0, out)
	c.waitTails("n2", other, "an unrelated owner's append durable while an ack publish is stuck", func(t streamlog.Tails) bool { return t.Record == 1 })
}
