package host

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/wire"
)

// TestFollowerOfAGoneOwnerBacksOff: the quick retries a follower makes
// when nobody serves its stream are for its role's first answer (a new
// owner promoted a few ms after its followers); a follower whose owner
// answered and then is gone backs off from the first failure, so that a
// killed host's thousands of followers do not flood the bus with
// no-responders requests while the survivors recover. The follower host's
// messages in the 400 ms after its owner's host stops are counted: its
// follower's backoff, its host waits, pulls and beats came to 11-12 here,
// and the ten quick retries to ten more (21-22 without the rule).
func TestFollowerOfAGoneOwnerBacksOff(t *testing.T) {
	const stream = "gone-owner"
	c := newMiniCluster(t)
	c.assign(assignment(stream, 1, 1, "n1", []string{"n2"}))
	n1 := c.start("n1", nil)
	nc, err := nats.Connect(c.url, nats.Name("brook-streamhost:n2"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c.startOn("n2", nc, func(cfg *Config) { cfg.HeartbeatInterval = time.Second })
	c.waitCopy("n2", stream, "following at epoch 1", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleFollower && cs.Epoch == 1 })
	c.mustPublish(stream, payload(0))
	c.waitCopy("n2", stream, "the record replicated", func(cs wire.CopyStatus) bool { return cs.RecordTail == 1 })

	before := nc.Stats().OutMsgs
	began := time.Now()
	n1.stop()
	time.Sleep(400*time.Millisecond - time.Since(began))
	sent := nc.Stats().OutMsgs - before
	if sent > 16 {
		t.Fatalf("the follower's host sent %d messages in the 400 ms after its owner's host stopped; want 16 at most (a backoff from the first failure)", sent)
	}
}
