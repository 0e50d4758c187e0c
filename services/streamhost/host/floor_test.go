package host

import (
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
)

// TestOwnerRefusesPublishesBelowMinCopies: the floor travels with the
// assignment (wire.AssignedStream.MinCopies) and the owner enforces it.
// An owner whose assignment holds one copy under a floor of 2 refuses a
// publish with not_enough_copies and writes nothing; with the floor
// removed the same copy confirms at W=1. A publish waiting for its second
// copy when the floor is raised above the assignment is refused too,
// never confirmed, and never left to time out.
func TestOwnerRefusesPublishesBelowMinCopies(t *testing.T) {
	const stream, id = "floor", 1
	c := newMiniCluster(t)
	one := assignment(stream, id, 1, "n1", []string{})
	one.MinCopies = 2
	c.assign(one)
	c.start("n1", func(cfg *Config) { cfg.ConfirmTimeout = 5 * time.Second })
	c.start("n2", func(cfg *Config) { cfg.ConfirmTimeout = 5 * time.Second })
	c.waitCopy("n1", stream, "owner at epoch 1", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner && cs.Epoch == 1 })

	for i := range 3 {
		if pc, e := c.publish(stream, payload(i), "p", uint64(i)); e == nil || e.Code != wire.CodeNotEnoughCopies {
			t.Fatalf("publish %d on 1 copy under min_copies 2: %+v, %v; want not_enough_copies", i, pc, e)
		}
	}
	if tail := c.hosts["n1"].h.store.Get(stream).Tails().Record; tail != 0 {
		t.Fatalf("refused publishes were written: record tail %d", tail)
	}

	one.MinCopies = 0
	c.assign(one)
	c.hosts["n1"].log.waitFor(t, "the assignment holds min_copies again")
	if pc := c.mustPublish(stream, payload(0)); pc.Offset != 0 || pc.Copies != 1 || pc.W != 1 {
		t.Fatalf("publish without a floor: %+v; want offset 0 on 1 copy, W=1", pc)
	}

	// Two copies, floor 2: confirms need n2 (majority of 2).
	const two, id2 = "floor2", 2
	a := assignment(two, id2, 1, "n1", []string{"n2"})
	a.MinCopies = 2
	c.assign(a)
	c.waitCopy("n1", two, "owner at epoch 1", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner && cs.Epoch == 1 })
	c.waitCopy("n2", two, "follower at epoch 1", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleFollower && cs.Epoch == 1 })
	if pc := c.mustPublish(two, payload(0)); pc.Copies != 2 || pc.W != 2 {
		t.Fatalf("publish on 2 copies at the floor: %+v", pc)
	}
	c.hosts["n2"].stop()
	done := make(chan *wire.Error, 1)
	go func() { _, e := c.publish(two, payload(1), "", 0); done <- e }()
	own := func() *owner {
		r := c.hosts["n1"].h.lookupReplica(two)
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.own
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		own.mu.Lock()
		waiting := own.mu.conf.waiting()
		own.mu.Unlock()
		if waiting == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the publish never waited for its second copy")
		}
		time.Sleep(5 * time.Millisecond)
	}
	a.MinCopies = 3
	began := time.Now()
	c.assign(a)
	select {
	case e := <-done:
		if e == nil || e.Code != wire.CodeNotEnoughCopies {
			t.Fatalf("waiting publish after the floor rose above the assignment: %v; want not_enough_copies (nil: confirmed)", e)
		}
		if took := time.Since(began); took > 3*time.Second {
			t.Fatalf("the refusal took %v: it waited for the confirm timeout", took)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("the waiting publish got no answer")
	}
}
