package host

import (
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/streamlog"
	"github.com/brook-streams/brook/pkg/wire"
)

// An idle follower must follow its owner's retention head (it keeps
// "what its owner keeps"): it learns the owner's head within about an
// idle wait, as it did when each copy long polled on its own.
func TestIdleFollowerFollowsTheOwnersRetention(t *testing.T) {
	const stream, id = "ret", 7
	c := newMiniCluster(t)
	as := assignment(stream, id, 1, "n1", []string{"n2", "n3"})
	as.Retention = wire.Retention{MaxAgeMS: 1000}
	c.assign(as)
	for _, n := range []string{"n1", "n2", "n3"} {
		c.start(n, func(cfg *Config) {
			cfg.ReplWait = 50 * time.Millisecond
			cfg.ReplIdleWait = 1 * time.Second
			cfg.RetentionInterval = 20 * time.Millisecond
		})
	}
	c.waitCopy("n1", stream, "owner", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner })
	for i := range 5 {
		c.mustPublish(stream, payload(i))
	}
	c.waitTails("n1", stream, "owner trimmed by age", func(tl streamlog.Tails) bool { return tl.Head == 5 })
	t.Logf("owner head 5 at %v", time.Now().Format(time.StampMilli))
	// A follower that asks at least once per idle wait learns head 5 and trims.
	for _, n := range []string{"n2", "n3"} {
		c.waitTails(n, stream, "follower trimmed to the owner's head", func(tl streamlog.Tails) bool { return tl.Head == 5 })
	}
}
