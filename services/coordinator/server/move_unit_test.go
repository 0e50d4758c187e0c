package server

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/controller"
	"github.com/brook-streams/brook/services/coordinator/internal/testutil"
	"github.com/brook-streams/brook/services/coordinator/liveness"
	"github.com/brook-streams/brook/services/coordinator/recovery"
	"github.com/brook-streams/brook/services/coordinator/state"
)

// TestMoveViewSkipsDrainedNodes: while node.drain moves a node's streams
// away (its drain requested in the state), no move targets that node (its
// own drain's, another drain's, the balancer's), though as an owner it may
// still hand its streams off; node.undrain makes it a target again; a
// failed move backs the stream off the balancer.
func TestMoveViewSkipsDrainedNodes(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	s := &Server{opt: Options{Now: func() time.Time { return now }, TTL: time.Minute}, live: liveness.New()}
	s.opt.Balance.Interval = time.Second
	st := state.New()
	tails := map[string]uint64{"h1": 10, "h2": 10, "h3": 5, "h4": 10}
	for _, n := range []string{"h1", "h2", "h3", "h4"} {
		st.Apply(state.NodeSeen(n, 1, now.UnixMilli()))
		s.live.Heartbeat(wire.Heartbeat{Node: n, Incarnation: 1, Copies: []wire.CopyStatus{{Stream: "s", StreamID: 1, Epoch: 1, RecordTail: tails[n]}}}, now)
	}
	for _, c := range []struct {
		name, owner string
		followers   []string
	}{{"s", "h1", []string{"h2", "h3"}}, {"d", "h2", []string{"h1", "h3"}}} {
		if r := st.Apply(state.StreamCreate(c.name, 3, "", wire.Retention{}, wire.Assignment{Owner: c.owner, Followers: c.followers, Policy: "majority_durable"}, now.UnixMilli())); r.Err() != nil {
			t.Fatal(r.Err())
		}
	}
	// Unmarked, the follower with the furthest tail (h2) is the target.
	if p, err := recovery.PlanMove(st.Streams["s"], "", s.moveView(st, "s")); err != nil || p.Owner != "h2" {
		t.Fatalf("plan %+v %v, want to h2", p, err)
	}
	st.Apply(state.NodeDrainBegin("h2", now.UnixMilli()))
	if p, err := recovery.PlanMove(st.Streams["s"], "", s.moveView(st, "s")); err != nil || p.Owner != "h3" {
		t.Fatalf("plan while h2 is drained %+v %v, want to h3", p, err)
	}
	if _, err := recovery.PlanMove(st.Streams["s"], "h2", s.moveView(st, "s")); wire.CodeOf(err) != wire.CodeBadRequest {
		t.Fatalf("move to the drained h2: %v, want bad_request", err)
	}
	// The drained node's own streams still move off it.
	if p, err := recovery.PlanMove(st.Streams["d"], "", s.moveView(st, "d")); err != nil || p.Owner == "h2" {
		t.Fatalf("plan off the drained owner %+v %v", p, err)
	}
	st.Apply(state.NodeUndrain("h2", now.UnixMilli()))
	if p, err := recovery.PlanMove(st.Streams["s"], "", s.moveView(st, "s")); err != nil || p.Owner != "h2" {
		t.Fatalf("plan after h2's undrain %+v %v, want to h2", p, err)
	}

	if _, ok := s.beginMoving("s", "h2"); !ok {
		t.Fatal("begin")
	}
	if _, ok := s.beginMoving("s", "h3"); ok {
		t.Fatal("a second move of s began")
	}
	s.endMoving("s", true)
	if until, ok := s.moves.backoff["s"]; !ok || !until.After(now) {
		t.Fatalf("no backoff after a failed move: %v", s.moves.backoff)
	}
}

// TestBalancerSkipsDrainRequestedNodes: the balancer's own check
// (balanceUp) keeps a node being drained out of its targets, on its own
// (moveView's check is TestMoveViewSkipsDrainedNodes, the state machine's
// TestNoNewCopyOrOwnershipOnADrainRequestedNode): with h1 owning every
// stream, the balancer moves some to h3 and none to the drain-requested
// h2, and to both once h2 is undrained.
func TestBalancerSkipsDrainRequestedNodes(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	s := &Server{opt: Options{Now: func() time.Time { return now }, TTL: time.Minute}, live: liveness.New()}
	st := state.New()
	for _, n := range []string{"h1", "h2", "h3"} {
		st.Apply(state.NodeSeen(n, 1, now.UnixMilli()))
		s.live.Heartbeat(wire.Heartbeat{Node: n, Incarnation: 1}, now)
	}
	for i := range 6 {
		if r := st.Apply(state.StreamCreate(fmt.Sprintf("s%d", i), 3, "", wire.Retention{}, wire.Assignment{Owner: "h1", Followers: []string{"h2", "h3"}, Policy: "majority_durable"}, now.UnixMilli())); r.Err() != nil {
			t.Fatal(r.Err())
		}
	}
	targets := func() map[string]int {
		q := controller.BalanceQuery(s.balanceUp(now), nil, nil, 4, 0.1)
		to := map[string]int{}
		for _, m := range controller.Balance(q.Run(st).(state.BalanceView), nil, 4, 0.1, 0) {
			to[m.To]++
		}
		return to
	}
	st.Apply(state.NodeDrainBegin("h2", now.UnixMilli()))
	if to := targets(); to["h2"] > 0 || to["h3"] == 0 {
		t.Fatalf("balancer targets %v while h2 is being drained: want h3 only", to)
	}
	st.Apply(state.NodeUndrain("h2", now.UnixMilli()))
	if to := targets(); to["h2"] == 0 || to["h3"] == 0 {
		t.Fatalf("balancer targets %v after h2's undrain: want h2 and h3", to)
	}
}

// notLeader returns the id of a running coordinator that is not the Raft
// leader.
func (c *cluster) notLeader() uint64 {
	leader := c.leader()
	for id := range c.servers {
		if id != leader {
			return id
		}
	}
	c.t.Fatal("no coordinator but the leader runs")
	return 0
}

// answerHandoffs makes h answer every hand-off at once with its tails of
// the stream (a scripted owner whose target is always caught up).
func (h *host) answerHandoffs() {
	h.t.Helper()
	h.mu.Lock()
	nc := h.nc
	h.mu.Unlock()
	if _, err := nc.Subscribe(wire.HandoffSubject(h.node), func(m *nats.Msg) {
		var req wire.HandoffRequest
		if err := json.Unmarshal(m.Data, &req); err != nil {
			return
		}
		h.mu.Lock()
		t := h.tails[req.Stream]
		h.mu.Unlock()
		data, _ := json.Marshal(wire.HandoffReply{Node: h.node, Stream: req.Stream, Epoch: req.Epoch, RecordTail: t[0], CursorTail: t[1]})
		_ = m.Respond(data)
	}); err != nil {
		h.t.Fatal(err)
	}
}

// TestMoveOnFollowerReplicaSealsOnce: a planned move run by a replica that
// is not the Raft leader runs its own recovery worker; the leader's
// control loop must not start a second one for the move's pending
// recovery (it did: every copy was sealed twice, the second seal possibly
// after the commit). Each copy's seals come slowly, so the leader's loop
// (every 50 ms) sees the pending recovery while the mover's worker runs.
func TestMoveOnFollowerReplicaSealsOnce(t *testing.T) {
	c := newCluster(t, 3, nil)
	hosts := map[string]*host{}
	for _, n := range []string{"h1", "h2", "h3"} {
		hosts[n] = c.host(n)
	}
	testutil.Eventually(t, 5*time.Second, "three live hosts", func() bool {
		var ci wire.ClusterInfo
		return c.admin(wire.VerbClusterInfo, "", &ci) == nil && len(ci.Nodes) == 3
	})
	info := c.create("s1", 3)
	for _, h := range hosts {
		h.setTails("s1", 10, 0)
		h.mu.Lock()
		h.sealDelay = 200 * time.Millisecond
		h.mu.Unlock()
	}
	hosts[info.Assignment.Owner].answerHandoffs()
	mover := c.servers[c.notLeader()]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	body, _ := json.Marshal(wire.StreamMove{Stream: "s1"})
	r, err := mover.streamMove(ctx, body)
	if err != nil {
		t.Fatalf("move: %v", err)
	}
	reply := r.(*wire.StreamMoveReply)
	if reply.From != info.Assignment.Owner || reply.To == reply.From || reply.Epoch != info.Assignment.Epoch+1 {
		t.Fatalf("move reply %+v from %+v", reply, info.Assignment)
	}
	time.Sleep(300 * time.Millisecond) // a second worker's seals would arrive by now
	for n, h := range hosts {
		if seals := h.sealsSeen(); len(seals) != 1 {
			t.Fatalf("%s was sealed %d times: %+v", n, len(seals), seals)
		}
	}
}

// TestMoverDeathWaitsGraceOnLeaderClock: a non-leader replica records a
// planned move's pending recovery with its wall clock (skewed ahead of the
// leader's) and dies before its worker commits. The leader leaves the
// recovery to the mover for moverGrace from when it first saw it, on its
// own clock: the mover's skew does not lengthen the wait.
func TestMoverDeathWaitsGraceOnLeaderClock(t *testing.T) {
	for _, tc := range []struct {
		name string
		skew time.Duration
	}{{"no skew", 0}, {"mover 10 min ahead", 10 * time.Minute}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 3, nil)
			for _, n := range []string{"h1", "h2", "h3"} {
				c.host(n).setTails("s1", 10, 0)
			}
			c.liveHosts(3)
			info := c.create("s1", 3)
			moverID := c.notLeader()
			mover := c.servers[moverID]
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			v, err := mover.store.Read(ctx, state.QueryPlacement{Stream: "s1"})
			if err != nil {
				t.Fatal(err)
			}
			ss := v.(*state.State).Streams["s1"]
			prop, err := recovery.PlanMove(ss, "", recovery.MoveView{Up: func(string) bool { return true }})
			if err != nil {
				t.Fatal(err)
			}
			at := time.Now().Add(tc.skew).UnixMilli()
			if _, err := check(mover.store.Propose(ctx, state.RecoveryBegin("s1", ss.Version, prop, state.ReasonMove, "", "", at))); err != nil {
				t.Fatal(err)
			}
			c.kill(moverID) // the mover dies before it seals anything
			began := time.Now()
			grace := mover.moverGrace()
			testutil.Eventually(t, grace+4*time.Second, "the leader's worker commits the dead mover's move", func() bool {
				return c.info("s1").Assignment.Epoch == info.Assignment.Epoch+1
			})
			t.Logf("committed %v after the mover died (grace %v)", time.Since(began).Round(time.Millisecond), grace)
		})
	}
}

// TestDrainOnFollowerReplicaKeepsStreamsOff: node.drain served by a
// coordinator that is not the Raft leader, while the leader's balancer
// runs. The drain used to keep the node it empties in that replica's
// memory only, so the leader's balancer moved streams back onto the node
// as its count fell (then they failed over by recovery once it was
// draining). The drain is in the Raft state now: no stream's ownership
// passes to the node once the drain began, and at the end it owns nothing.
// The node owns more streams than one round of the drain's moves, and
// seals take a while, so the balancer has rounds to act while the drain runs.
// It passes while any one of the checks holds; each is pinned on its own:
// the balancer's (TestBalancerSkipsDrainRequestedNodes), moveView's
// (TestMoveViewSkipsDrainedNodes) and the state machine's
// (TestNoNewCopyOrOwnershipOnADrainRequestedNode).
func TestDrainOnFollowerReplicaKeepsStreamsOff(t *testing.T) {
	c := newCluster(t, 3, func(o *Options) {
		o.Balance.Interval = 50 * time.Millisecond
		o.Balance.Margin = 0.1
		o.Balance.MaxMoves = 4
		o.SealTimeout = 2 * time.Second // a scripted host answers its seals one by one
	})
	names := streamNames(24)
	c.scriptedStreams([]string{"h1", "h2", "h3", "h4"}, names, 3, 30*time.Millisecond)
	// The owner of the most streams, once no move runs.
	var node string
	epochs := map[string]uint64{}
	testutil.Eventually(t, 10*time.Second, "no recovery pending", func() bool {
		owned := map[string]int{}
		for _, name := range names {
			i := c.info(name)
			if i.Recovery != nil {
				return false
			}
			owned[i.Assignment.Owner]++
			epochs[name] = i.Assignment.Epoch
		}
		node = ""
		for n, k := range owned {
			if node == "" || k > owned[node] || k == owned[node] && n < node {
				node = n
			}
		}
		return owned[node] > maxDrainMoves
	})
	drainer := c.servers[c.notLeader()]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	body, _ := json.Marshal(wire.NodeRef{Node: node})
	r, err := drainer.nodeDrainMoves(ctx, body)
	if err != nil {
		t.Fatalf("drain %s: %v", node, err)
	}
	t.Logf("draining %s: moving %v", node, r.(*wire.NodeDrainReply).Moving)
	testutil.Eventually(t, 20*time.Second, node+" draining", func() bool {
		var ci wire.ClusterInfo
		if c.admin(wire.VerbClusterInfo, "", &ci) != nil {
			return false
		}
		for _, n := range ci.Nodes {
			if n.Node == node {
				return n.State == wire.NodeDraining
			}
		}
		return false
	})
	testutil.Eventually(t, 10*time.Second, "no recovery pending after the drain", func() bool {
		for _, name := range names {
			if c.info(name).Recovery != nil {
				return false
			}
		}
		return true
	})
	for _, name := range names {
		i := c.info(name)
		for _, st := range i.Starts {
			if st.Epoch > epochs[name] && st.Node == node {
				t.Fatalf("%s passed to the drained %s at epoch %d (epoch %d when the drain began): %+v", name, node, st.Epoch, epochs[name], i.Starts)
			}
		}
		if i.Assignment.Owner == node {
			t.Fatalf("%s is owned by the drained %s: %+v", name, node, i.Assignment)
		}
	}
}

// TestMoveOwnerGoneAfterBegin: a move is recorded before its hand-off, so
// an owner that is gone by the hand-off (it answers no hand-off and no
// seal, as a host that died right after the begin) leaves a recorded
// move: the mover goes on as a recovery, the followers' seals make R, and
// the furthest copy is promoted at the next epoch, each copy sealed once
// (the leader leaves the move's recovery to the mover).
func TestMoveOwnerGoneAfterBegin(t *testing.T) {
	c := newCluster(t, 3, nil)
	hosts, info := c.streamOnHosts("s1", "h1", "h2", "h3")
	owner := hosts[info.Assignment.Owner]
	owner.setSilent(true) // no hand-off subscription either: no responders
	mover := c.servers[c.notLeader()]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	body, _ := json.Marshal(wire.StreamMove{Stream: "s1"})
	r, err := mover.streamMove(ctx, body)
	t.Logf("move: %+v, %v", r, err)
	after := c.waitInfo("s1", "the move committed", 10*time.Second, func(i wire.StreamInfo) bool {
		return i.Recovery == nil && i.Assignment.Epoch == info.Assignment.Epoch+1
	})
	if after.Assignment.Owner == info.Assignment.Owner {
		t.Fatalf("the silent owner %s was promoted: %+v", info.Assignment.Owner, after.Assignment)
	}
	if err == nil && r.(*wire.StreamMoveReply).To != after.Assignment.Owner {
		t.Fatalf("move reply %+v, stream %+v", r, after.Assignment)
	}
	for n, h := range hosts {
		if h == owner {
			continue
		}
		if seals := h.sealsSeen(); len(seals) != 1 {
			t.Fatalf("%s was sealed %d times: %+v", n, len(seals), seals)
		}
	}
}

// TestStreamMoveOutlastsTheRequestDeadline: stream.move accepts a
// hand-off timeout (timeout_ms) longer than an admin request's usual
// deadline (requestTimeout); a hand-off that takes longer than that
// deadline is not cut by it: the move completes (no recovery is left
// pending with the owner's intake held until the leader's late seal).
func TestStreamMoveOutlastsTheRequestDeadline(t *testing.T) {
	c := newCluster(t, 3, func(o *Options) { o.Balance.Off = true })
	hosts, info := c.streamOnHosts("s1", "h1", "h2", "h3")
	owner := hosts[info.Assignment.Owner]
	// The owner answers a hand-off only past requestTimeout (its target
	// catching up slowly).
	slow := requestTimeout + 2*time.Second
	owner.mu.Lock()
	nc := owner.nc
	owner.mu.Unlock()
	if _, err := nc.Subscribe(wire.HandoffSubject(owner.node), func(m *nats.Msg) {
		var req wire.HandoffRequest
		_ = json.Unmarshal(m.Data, &req)
		if req.Resume {
			_ = m.Respond([]byte(`{}`))
			return
		}
		go func() {
			time.Sleep(slow)
			data, _ := json.Marshal(wire.HandoffReply{Node: owner.node, Stream: req.Stream, Epoch: req.Epoch, RecordTail: 10})
			_ = m.Respond(data)
		}()
	}); err != nil {
		t.Fatal(err)
	}
	var r wire.StreamMoveReply
	if err := c.admin(wire.VerbStreamMove, wire.StreamMove{Stream: "s1", TimeoutMS: 20000}, &r); err != nil {
		t.Fatalf("stream.move with a hand-off slower than the request deadline: %v", err)
	}
	if i := c.info("s1"); i.Recovery != nil || i.Assignment.Owner == owner.node || r.To != i.Assignment.Owner {
		t.Fatalf("after the move (%+v): owner %s, recovery %+v; want moved off %s, nothing pending", r, i.Assignment.Owner, i.Recovery, owner.node)
	}
}
