package raftstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/internal/testutil"
	"github.com/brook-streams/brook/services/coordinator/state"
)

// TestSnapshotDueScalesWithTheState: the cadence is the minimum for a
// small state and grows with the number of streams, so a 10,000-stream
// state is not snapshotted every 4,096 entries.
func TestSnapshotDueScalesWithTheState(t *testing.T) {
	for _, tc := range []struct {
		streams int
		want    uint64
	}{{0, 4096}, {1000, 4096}, {1024, 4096}, {3000, 12000}, {10000, 40000}} {
		if got := snapshotDue(tc.streams, snapshotMinEntries); got != tc.want {
			t.Errorf("snapshotDue(%d) = %d, want %d", tc.streams, got, tc.want)
		}
	}
}

// snapIndexes is every open replica's newest snapshot index.
func (c *cluster) snapIndexes() map[uint64]uint64 {
	c.t.Helper()
	out := map[uint64]uint64{}
	for id, s := range c.stores {
		idx, err := s.SnapshotIndex()
		if err != nil {
			c.t.Fatalf("snapshot index of %d: %v", id, err)
		}
		out[id] = idx
	}
	return out
}

// seen proposes k node.seen commands through s, numbered from first.
func seen(t *testing.T, s *Store, first, k int) {
	t.Helper()
	for i := range k {
		if r := propose(t, s, state.NodeSeen(fmt.Sprintf("n%04d", first+i), 1, 100)); r.Err() != nil {
			t.Fatal(r.Err())
		}
	}
}

// TestStoreTakesSnapshotsOnItsOwn: with Dragonboat's own snapshots off,
// every replica snapshots once the entries applied since its last
// snapshot reach the cadence (here a minimum of 40 entries), counted from
// the first entry: none is missed for coming before the store first
// looked. Fails without the store's snapshots (Dragonboat's fixed 4,096).
func TestStoreTakesSnapshotsOnItsOwn(t *testing.T) {
	c := startCluster(t, nil, 40)
	leader := c.leader()
	seen(t, c.stores[leader], 0, 30)
	time.Sleep(3 * snapshotCheck) // every replica looks at least twice
	for id, idx := range c.snapIndexes() {
		if idx != 0 {
			t.Fatalf("replica %d snapshotted at %d after 30 entries, cadence 40", id, idx)
		}
	}
	seen(t, c.stores[leader], 30, 15)
	// Dragonboat moves the snapshot index before SyncRequestSnapshot
	// returns and the store counts it: wait for both.
	testutil.Eventually(t, 10*time.Second, "a snapshot on every replica", func() bool {
		for id, idx := range c.snapIndexes() {
			if idx == 0 || c.stores[id].Snapshots() == 0 {
				return false
			}
		}
		return true
	})
	for id, s := range c.stores {
		if s.Snapshots() != 1 {
			t.Errorf("replica %d took %d snapshots, want 1", id, s.Snapshots())
		}
	}
}

// TestSnapshotCadenceCountsFromTheSnapshotAcrossARestart: entries applied
// after the newest snapshot and before a restart count toward the next
// snapshot after it (the restart replays them), so the cadence holds
// across restarts: 25 entries after the snapshot, a restart of every
// replica, then 20 more make 45, past the cadence of 40, though fewer than
// 40 were applied since the restart. Counting from the restart, or from
// the store's first look, takes no snapshot here.
func TestSnapshotCadenceCountsFromTheSnapshotAcrossARestart(t *testing.T) {
	c := startCluster(t, nil, 40)
	leader := c.leader()
	seen(t, c.stores[leader], 0, 45)
	var first map[uint64]uint64
	testutil.Eventually(t, 10*time.Second, "a snapshot on every replica", func() bool {
		first = c.snapIndexes()
		for _, idx := range first {
			if idx == 0 {
				return false
			}
		}
		return true
	})
	seen(t, c.stores[c.leader()], 45, 25)
	for id := range c.peers {
		c.close(id)
	}
	for id := range c.peers {
		c.open(id)
	}
	seen(t, c.stores[c.leader()], 70, 20)
	testutil.Eventually(t, 10*time.Second, "a second snapshot on every replica", func() bool {
		for id, idx := range c.snapIndexes() {
			if idx <= first[id] {
				return false
			}
		}
		return true
	})
	st := read(t, c.stores[c.leader()])
	if len(st.Nodes) != 90 {
		t.Fatalf("%d nodes after the restart, want 90", len(st.Nodes))
	}
}

// TestSnapshotCadenceGrowsWithTheStreams: with 20 streams the cadence is
// 80 entries, not the minimum of 40: 45 entries after them take no
// snapshot, and the snapshot comes once 80 were applied.
func TestSnapshotCadenceGrowsWithTheStreams(t *testing.T) {
	c := startCluster(t, nil, 40)
	leader := c.leader()
	s := c.stores[leader]
	for _, n := range []string{"h1", "h2", "h3"} {
		if r := propose(t, s, state.NodeSeen(n, 1, 100)); r.Err() != nil {
			t.Fatal(r.Err())
		}
	}
	// 3 + 20 entries so far; force a snapshot so the count starts at 0
	// with the 20 streams in the state.
	for i := range 20 {
		r := propose(t, s, state.StreamCreate(fmt.Sprintf("s%02d", i), 3, "", wire.Retention{},
			wire.Assignment{Owner: "h1", Followers: []string{"h2", "h3"}, Policy: "majority_durable"}, 100))
		if r.Err() != nil {
			t.Fatal(r.Err())
		}
	}
	c.snapshotAll()
	base := c.snapIndexes()
	seen(t, s, 0, 45)
	time.Sleep(3 * snapshotCheck)
	for id, idx := range c.snapIndexes() {
		if idx != base[id] {
			t.Fatalf("replica %d snapshotted at %d, 45 entries after %d with 20 streams (cadence 80)", id, idx, base[id])
		}
	}
	seen(t, s, 45, 40)
	testutil.Eventually(t, 10*time.Second, "a snapshot on every replica after 85 entries", func() bool {
		for id, idx := range c.snapIndexes() {
			if idx <= base[id] {
				return false
			}
		}
		return true
	})
}

// snapshotAll asks every replica for a snapshot now.
func (c *cluster) snapshotAll() {
	c.t.Helper()
	for id, s := range c.stores {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := s.Snapshot(ctx); err != nil {
			c.t.Fatalf("snapshot on %d: %v", id, err)
		}
		cancel()
	}
}

// TestConfirmQuorum: a read-index round answers in a healthy shard; on a
// replica cut off from the others (both closed, the leader among them) it
// fails within its budget, while the replica may still take the closed
// leader for its leader (for an election timeout).
func TestConfirmQuorum(t *testing.T) {
	c := newCluster(t)
	leader := c.leader()
	f := c.follower(leader)
	if err := f.ConfirmQuorum(time.Second); err != nil {
		t.Fatalf("quorum probe of a healthy shard on a follower: %v", err)
	}
	if err := c.stores[leader].ConfirmQuorum(time.Second); err != nil {
		t.Fatalf("quorum probe of a healthy shard on the leader: %v", err)
	}
	for id, s := range c.stores {
		if s != f {
			c.close(id)
		}
	}
	l, known := f.Leader()
	err := f.ConfirmQuorum(300 * time.Millisecond)
	if err == nil {
		t.Fatal("quorum probe of a replica cut off from the others succeeded")
	}
	t.Logf("cut off: leader %d (known %v) right after the loss; probe: %v", l, known, err)
}
