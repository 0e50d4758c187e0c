package server

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/internal/testutil"
)

// liveHosts waits until the cluster knows n live hosts.
func (c *cluster) liveHosts(n int) {
	c.t.Helper()
	testutil.Eventually(c.t, 5*time.Second, "live hosts", func() bool {
		var ci wire.ClusterInfo
		if c.admin(wire.VerbClusterInfo, "", &ci) != nil {
			return false
		}
		live := 0
		for _, node := range ci.Nodes {
			if node.State == wire.NodeLive {
				live++
			}
		}
		return live == n
	})
}

// TestAcceptLossLowersAStaleCopyToItsCut: the copy an operator's accept-loss
// promotes had not applied its role change to epoch 2 (it publishes epoch 1)
// and publishes a raw tail past epoch 2's start, holding the epoch-1 owner's
// unconfirmed suffix. The start is recorded at the cut its host makes (the
// epoch-2 start), not at the raw tail, which would claim records the new
// owner's host is about to cut away. The same copy publishing epoch 2 is on
// the current history and keeps its tail: the heartbeat's epoch is what
// decides.
func TestAcceptLossLowersAStaleCopyToItsCut(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pin   bool
		epoch uint64
		start wire.HistoryStart
	}{
		{"stale copy", true, 1, wire.HistoryStart{Epoch: 3, RecordTail: 10, CursorTail: 3, Node: "h3"}},
		{"current copy", false, 2, wire.HistoryStart{Epoch: 3, RecordTail: 12, CursorTail: 6, Node: "h3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 1, func(o *Options) { o.NATSSystemURL = ""; o.TTL = 500 * time.Millisecond })
			h1, h2, h3 := c.host("h1"), c.host("h2"), c.host("h3")
			c.liveHosts(3)
			if o := c.create("s1", 3).Assignment.Owner; o != "h1" {
				t.Fatalf("owner %s, want h1", o)
			}
			h2.setTails("s1", 10, 3)
			h3.setTails("s1", 8, 5)
			if tc.pin {
				h3.pinEpoch("s1", 1)
			}
			h1.kill()
			info := c.waitInfo("s1", "first failover", 5*time.Second, func(i wire.StreamInfo) bool { return i.Assignment.Epoch == 2 })
			if info.Assignment.Owner != "h2" || len(info.Starts) != 1 || info.Starts[0].RecordTail != 10 {
				t.Fatalf("first failover: %+v", info)
			}
			// h3's raw tail passes the start.
			h3.setTails("s1", 12, 6)
			h3.setSilent(true)
			testutil.Eventually(t, 3*time.Second, "h3 publishes 12", func() bool {
				for _, ct := range c.info("s1").CopyTails {
					if ct.Node == "h3" && ct.Published && ct.Epoch == tc.epoch && ct.RecordTail == 12 {
						return true
					}
				}
				return false
			})
			h2.kill()
			c.waitInfo("s1", "a recovery that waits", 5*time.Second, func(i wire.StreamInfo) bool {
				return i.Recovery != nil && i.Recovery.Wait != nil
			})

			var ok wire.OK
			if e := c.admin(wire.VerbRecoveryAcceptLoss, wire.RecoveryAcceptLoss{Stream: "s1"}, &ok); e != nil || !ok.OK {
				t.Fatalf("accept-loss: %+v %v", ok, e)
			}
			info = wire.StreamInfo{}
			if e := c.admin(wire.VerbStreamInfo, wire.StreamRef{Stream: "s1"}, &info); e != nil {
				t.Fatalf("stream.info: %v", e)
			}
			if info.Assignment.Owner != "h3" || info.Assignment.Epoch != 3 {
				t.Fatalf("after accept-loss: %+v", info.Assignment)
			}
			if len(info.Starts) != 2 || info.Starts[1] != tc.start {
				t.Fatalf("starts %+v, want the new one at %+v", info.Starts, tc.start)
			}
			if info.AcceptedLoss != nil {
				t.Fatalf("accepted loss %+v: the new owner is at or past the prefix", info.AcceptedLoss)
			}
		})
	}
}

// TestWithdrawnRecoveryWithOwnerBackIsReleased: a recovery seals the
// followers and waits (one of the two needed answers); the owner comes back
// and an operator withdraws the recovery. The owner is live, but its
// followers stay sealed past its epoch, so it could never confirm again:
// the controller records a "sealed" recovery, which takes the seals over
// and commits the next epoch, releasing them.
func TestWithdrawnRecoveryWithOwnerBackIsReleased(t *testing.T) {
	c := newCluster(t, 1, func(o *Options) { o.NATSSystemURL = ""; o.TTL = 500 * time.Millisecond })
	h1, h2, h3 := c.host("h1"), c.host("h2"), c.host("h3")
	c.liveHosts(3)
	if o := c.create("s1", 3).Assignment.Owner; o != "h1" {
		t.Fatalf("owner %s, want h1", o)
	}
	h1.setTails("s1", 12, 0)
	h2.setTails("s1", 10, 0)
	h3.setTails("s1", 10, 0)
	h1.setSilent(true)
	h2.setSilent(true)
	h1.kill()
	info := c.waitInfo("s1", "a recovery waiting for answers", 5*time.Second, func(i wire.StreamInfo) bool {
		return i.Recovery != nil && i.Recovery.Wait != nil && len(h2.sealsSeen()) > 0 && len(h3.sealsSeen()) > 0
	})
	first := info.Recovery.Transition
	h1.start(2)
	c.liveHosts(3)
	var ok wire.OK
	if e := c.admin(wire.VerbRecoveryWithdraw, wire.RecoveryWithdraw{Stream: "s1"}, &ok); e != nil {
		t.Fatalf("withdraw: %v", e)
	}
	info = c.waitInfo("s1", "a sealed recovery for the live owner", 3*time.Second, func(i wire.StreamInfo) bool {
		return i.Recovery != nil && i.Recovery.Transition > first
	})
	if info.Recovery.Reason != "sealed" || info.Recovery.Old.Epoch != 1 || info.Recovery.Old.Owner != "h1" {
		t.Fatalf("new recovery %+v", info.Recovery)
	}
	second := info.Recovery.Transition
	h1.setSilent(false)
	h2.setSilent(false)
	info = c.waitInfo("s1", "the sealed recovery's commit", 5*time.Second, func(i wire.StreamInfo) bool {
		return i.Recovery == nil && i.Assignment.Epoch == 2
	})
	if info.Status != wire.StatusServing || len(info.Starts) != 1 || info.Starts[0].Epoch != 2 || info.Starts[0].RecordTail < 10 {
		t.Fatalf("after the sealed recovery: %+v", info)
	}
	// Every copy was sealed at fence 2 by the new transition, which took
	// the old seals over; the epoch-2 assignment releases them. A copy
	// whose answer missed the committing round is re-added at once.
	for _, h := range []*host{h1, h2, h3} {
		if !slices.ContainsFunc(h.sealsSeen(), func(r wire.SealRequest) bool { return r.FenceEpoch == 2 && r.Transition == second }) {
			t.Fatalf("%s got no seal at fence 2 of transition %d: %+v", h.node, second, h.sealsSeen())
		}
	}
	c.waitInfo("s1", "all three copies at epoch 2", 3*time.Second, func(i wire.StreamInfo) bool {
		return i.Assignment.Epoch == 2 && len(i.Assignment.Copies()) == 3
	})
}

// TestStraySealSubscriberOnAGoneNode: the owner's host dies, but something
// still subscribes to its seal subject and never answers (a debugging
// "nats sub brook.host.h1.seal"). With a 5 s seal timeout the failover
// still completes in about the detection time: once R copies answered, the
// round does not wait for a copy on a node the state counts as expired.
func TestStraySealSubscriberOnAGoneNode(t *testing.T) {
	c := newCluster(t, 1, func(o *Options) { o.TTL = 5 * time.Second; o.SealTimeout = 5 * time.Second })
	h1, h2, h3 := c.host("h1"), c.host("h2"), c.host("h3")
	c.liveHosts(3)
	if o := c.create("s1", 3).Assignment.Owner; o != "h1" {
		t.Fatalf("owner %s, want h1", o)
	}
	h2.setTails("s1", 10, 0)
	h3.setTails("s1", 12, 0)
	stray, err := nats.Connect(c.nats.URL, nats.Name("debugging"))
	if err != nil {
		t.Fatal(err)
	}
	defer stray.Close()
	for _, subj := range []string{wire.SealSubject("h1"), wire.SealBatchSubject("h1")} {
		if _, err := stray.Subscribe(subj, func(*nats.Msg) {}); err != nil {
			t.Fatal(err)
		}
	}
	if err := stray.Flush(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	h1.kill()
	// The disconnect advisory expires h1 within its grace; the failover
	// must not wait out the 5 s seal timeout on the stray subscriber.
	info := c.waitInfo("s1", "the failover commit", 4*time.Second, func(i wire.StreamInfo) bool {
		return i.Assignment.Epoch == 2 && i.Recovery == nil
	})
	if took := time.Since(killed); took > 3*time.Second {
		t.Fatalf("failover took %v", took)
	}
	if info.Assignment.Owner != "h3" || len(info.Assignment.Followers) != 1 || info.Assignment.Followers[0] != "h2" {
		t.Fatalf("after failover: %+v", info.Assignment)
	}
}

// TestShutdownWithoutQuorumIsBounded: when every coordinator stops at once
// the last one has no quorum, and requests in flight wait for one (admin
// and pulls from hosts). Close still returns promptly, and those requests
// get an error reply instead of none.
func TestShutdownWithoutQuorumIsBounded(t *testing.T) {
	c := newCluster(t, 3, func(o *Options) { o.NATSSystemURL = "" })
	var last uint64
	for id := range c.servers {
		last = id
	}
	for id := range c.peers {
		if id != last {
			c.kill(id)
		}
	}
	type reply struct {
		m   *nats.Msg
		err error
	}
	replies := make(chan reply, 2)
	for _, subj := range []string{wire.AssignPull, wire.AdminSubject(wire.VerbStreamList)} {
		body := []byte(`{"node":"h1"}`)
		if subj != wire.AssignPull {
			body = nil
		}
		go func() {
			m, err := c.client.Request(subj, body, 10*time.Second)
			replies <- reply{m, err}
		}()
	}
	s := c.servers[last]
	testutil.Eventually(t, 5*time.Second, "two requests waiting for a quorum", func() bool { return s.inflight.Load() == 2 })

	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.Close(ctx)
	delete(c.servers, last)
	if took := time.Since(began); took > 2*time.Second {
		t.Fatalf("Close took %v without a quorum; want about the request grace", took)
	}
	for range 2 {
		select {
		case r := <-replies:
			if r.err != nil {
				t.Fatalf("request in flight got no reply: %v", r.err)
			}
			var er wire.ErrorReply
			if err := json.Unmarshal(r.m.Data, &er); err != nil || er.Error == nil || er.Error.Code != wire.CodeUnavailable {
				t.Fatalf("reply %q, want an unavailable error", r.m.Data)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("request in flight got no reply")
		}
	}
}

// TestShutdownLeavesAStuckRaftCloseBehind: a Raft NodeHost close that
// blocks does not hold the shutdown past its limit.
func TestShutdownLeavesAStuckRaftCloseBehind(t *testing.T) {
	c := newCluster(t, 1, func(o *Options) { o.NATSSystemURL = "" })
	s := c.servers[1]
	release := make(chan struct{})
	closed := make(chan struct{})
	realClose := s.closeStore
	s.closeStore = func() {
		<-release
		realClose()
		close(closed)
	}
	s.limits.store = 200 * time.Millisecond
	began := time.Now()
	s.Close(context.Background())
	delete(c.servers, 1)
	took := time.Since(began)
	close(release)
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the Raft store was never closed")
	}
	if took > 1500*time.Millisecond {
		t.Fatalf("Close took %v with the Raft close stuck; want about its 200ms limit", took)
	}
}
