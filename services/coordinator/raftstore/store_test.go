package raftstore

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/internal/testutil"
	"github.com/brook-streams/brook/services/coordinator/state"
)

type cluster struct {
	t      testing.TB
	peers  map[uint64]string
	dirs   map[uint64]string
	stores map[uint64]*Store
	// tls are the replicas' Raft TLS files (none: plain TCP).
	tls map[uint64]*TLSFiles
	// snapMin is Config.SnapshotMinEntries (0: the default).
	snapMin uint64
}

func newCluster(t testing.TB) *cluster { return newTLSCluster(t, nil) }

// newTLSCluster starts three replicas, replica id's Raft transport with
// tls(id) (nil: plain TCP).
func newTLSCluster(t testing.TB, tls func(id uint64) *TLSFiles) *cluster {
	return startCluster(t, tls, 0)
}

// startCluster starts three replicas with Raft TLS files tls(id) (nil:
// plain TCP) and snapMin as Config.SnapshotMinEntries.
func startCluster(t testing.TB, tls func(id uint64) *TLSFiles, snapMin uint64) *cluster {
	addrs := testutil.FreeAddrs(t, 3)
	c := &cluster{t: t, peers: map[uint64]string{}, dirs: map[uint64]string{}, stores: map[uint64]*Store{},
		tls: map[uint64]*TLSFiles{}, snapMin: snapMin}
	for i, a := range addrs {
		id := uint64(i + 1)
		c.peers[id] = a
		c.dirs[id] = t.TempDir()
		if tls != nil {
			c.tls[id] = tls(id)
		}
	}
	for id := range c.peers {
		c.open(id)
	}
	t.Cleanup(func() {
		for _, s := range c.stores {
			s.Close()
		}
	})
	return c
}

func (c *cluster) open(id uint64) {
	c.t.Helper()
	s, err := Open(Config{ReplicaID: id, RaftAddr: c.peers[id], Peers: c.peers, DataDir: c.dirs[id],
		TLS: c.tls[id], SnapshotMinEntries: c.snapMin})
	if err != nil {
		c.t.Fatalf("open %d: %v", id, err)
	}
	c.stores[id] = s
}

func (c *cluster) close(id uint64) {
	c.stores[id].Close()
	delete(c.stores, id)
}

// leader waits until the open replicas agree on a leader among them.
func (c *cluster) leader() uint64 {
	c.t.Helper()
	var leader uint64
	testutil.Eventually(c.t, 10*time.Second, "a leader", func() bool {
		leader = 0
		for _, s := range c.stores {
			id, ok := s.Leader()
			if !ok || c.stores[id] == nil || (leader != 0 && id != leader) {
				return false
			}
			leader = id
		}
		return leader != 0
	})
	return leader
}

func (c *cluster) follower(not uint64) *Store {
	for id, s := range c.stores {
		if id != not {
			return s
		}
	}
	c.t.Fatal("no follower")
	return nil
}

func propose(t testing.TB, s *Store, cmd state.Command) state.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := s.Propose(ctx, cmd)
	if err != nil {
		t.Fatalf("propose %s: %v", cmd.Op, err)
	}
	return r
}

func read(t testing.TB, s *Store) *state.State {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := s.State(ctx)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return st
}

func TestReplicatedStateSurvivesLeaderLossAndFullRestart(t *testing.T) {
	c := newCluster(t)
	leader := c.leader()
	f := c.follower(leader)

	// Writes through a follower are forwarded to the leader.
	for _, n := range []string{"h1", "h2", "h3"} {
		if r := propose(t, f, state.NodeSeen(n, 1, 100)); r.Err() != nil {
			t.Fatal(r.Err())
		}
	}
	r := propose(t, f, state.StreamCreate("s1", 3, "", wire.Retention{},
		wire.Assignment{Owner: "h1", Followers: []string{"h2", "h3"}, Policy: "majority_durable"}, 100))
	if r.Err() != nil || r.StreamID != 1 {
		t.Fatalf("create: %+v", r)
	}
	readV := r.StreamVersion

	// A guarded write that read an older version is refused as a result,
	// and the replicas keep working.
	if r := propose(t, c.stores[leader], state.NodeExpire("h1", 1, "ttl", 200)); r.Err() != nil {
		t.Fatal(r.Err())
	}
	ok := propose(t, f, state.RecoveryBegin("s1", readV, wire.Assignment{Owner: "h2"}, "expired", "", "", 300))
	if ok.Err() != nil {
		t.Fatal(ok.Err())
	}
	stale := propose(t, f, state.RecoveryBegin("s1", readV, wire.Assignment{Owner: "h3"}, "expired", "", "", 300))
	if stale.Code != wire.CodeConflict {
		t.Fatalf("stale guarded write: %+v, want conflict", stale)
	}

	// A snapshot on every replica exercises SaveSnapshot; the restart
	// below then recovers from it.
	for id, s := range c.stores {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := s.Snapshot(ctx); err != nil {
			t.Fatalf("snapshot on %d: %v", id, err)
		}
		cancel()
	}

	// Kill the leader: another leads and takes writes.
	c.close(leader)
	newLeader := c.leader()
	if newLeader == leader {
		t.Fatalf("leader %d still leads after it was closed", leader)
	}
	if r := propose(t, c.stores[newLeader], state.NodeSeen("h4", 1, 400)); r.Err() != nil {
		t.Fatal(r.Err())
	}
	want := read(t, c.stores[newLeader])
	if want.Streams["s1"].Recovery == nil || want.Nodes["h4"] == nil {
		t.Fatalf("state after leader loss: %+v", want)
	}
	// The leader has applied what it committed: its local node list has
	// every node, sorted.
	if nodes, err := c.stores[newLeader].LocalNodes(); err != nil || !slices.Equal(nodes, []string{"h1", "h2", "h3", "h4"}) {
		t.Fatalf("local nodes %v (%v), want h1..h4", nodes, err)
	}

	// Full restart of all three: the state comes back as it was.
	for id := range c.stores {
		c.close(id)
	}
	for id := range c.peers {
		c.open(id)
	}
	c.leader()
	for id, s := range c.stores {
		got := read(t, s)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("replica %d after restart:\n got %+v\nwant %+v", id, got, want)
		}
	}
	// Reading the recovery view returns copies, not the live state.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := c.stores[1].RecoveryView(ctx, "s1")
	if err != nil || v.Recovery == nil || v.Version != want.Streams["s1"].Version {
		t.Fatalf("recovery view %+v %v", v, err)
	}
	v.Recovery.Old.Owner = "mutated"
	if again, _ := c.stores[1].RecoveryView(ctx, "s1"); again.Recovery.Old.Owner != "h1" {
		t.Fatal("a read returned a reference into the state")
	}
}
