package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/controller"
	"github.com/brook-streams/brook/services/coordinator/recovery"
	"github.com/brook-streams/brook/services/coordinator/state"
)

// Planned moves: stream.move, node.drain and node.undrain, and the
// balancer's moves (recovery/move.go describes the steps). A move runs on
// the replica that decided it; while it runs, that replica's control loop
// starts no recovery worker of its own for the stream (s.moving), since
// the move runs the worker itself; nor does the leader for a move another
// replica recorded, until moverGrace passed (then the mover is taken to
// have died or given up). Were two workers to run anyway, both seal at the
// same fence and transition and only one guarded commit succeeds.

// moverGrace is how long after this leader first saw a planned move's
// pending recovery (past the move's hand-off bound, HandoffMS) it leaves
// it to the replica that recorded it, which runs the recovery worker
// itself (a second worker sealed every copy
// twice, and its seals could reach the new owner after the commit); past
// it (that replica died or gave up), the leader's worker finishes it.
func (s *Server) moverGrace() time.Duration { return 2*s.opt.SealTimeout + time.Second }

// seenMove is when this leader first saw a planned move's pending
// recovery (its transition), on its own clock.
type seenMove struct {
	transition uint64
	at         time.Time
}

// moverRuns reports whether pr is a planned move's recovery that its
// mover (another replica, or this one: see isMoving) is still running.
// The grace is timed from when this leader first saw the transition, on
// its own (monotonic) clock: pr.Since is the mover's wall clock, and a
// mover's clock ahead of the leader's would lengthen the wait by the skew.
func (s *Server) moverRuns(pr *wire.PendingRecovery, now time.Time) bool {
	if pr.Reason != state.ReasonMove {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	seen, ok := s.movesSeen[pr.Stream]
	if !ok || seen.transition != pr.Transition {
		seen = seenMove{transition: pr.Transition, at: now}
		s.movesSeen[pr.Stream] = seen
	}
	// A move is recorded before its hand-off: the mover's worker starts
	// only once the hand-off ended, within HandoffMS.
	return now.Sub(seen.at) < s.moverGrace()+time.Duration(pr.HandoffMS)*time.Millisecond
}

// forgetMovesSeen drops what moverRuns keeps of the streams no longer in
// pending (every pending recovery, sorted), or of all when pending is nil.
func (s *Server) forgetMovesSeen(pending []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name := range s.movesSeen {
		if _, found := slices.BinarySearch(pending, name); !found {
			delete(s.movesSeen, name)
		}
	}
}

// maxDrainMoves bounds the moves of one node.drain in flight at once.
const maxDrainMoves = 4

// moveBackoff is how long the balancer leaves a stream alone after a move
// of it failed (three full rounds: a target that cannot catch up would
// otherwise hold the owner's intake again on every balancing round).
const moveBackoff = 3 * fullPlanEvery

// maxBalanceLag is how far (records) a follower's heartbeat record tail
// may be behind its owner's for the balancer to pick it as a target. The
// two heartbeats are taken at different times, so a follower under load
// is always a little behind; one much further behind would likely time
// the hand-off out.
const maxBalanceLag = 4096

// moves is what the server keeps about planned moves (under Server.mu).
type moves struct {
	// running holds the streams this replica's planned moves run, each
	// with its target ("" until planned).
	running map[string]string
	// draining holds the nodes this replica's node.drain calls are
	// moving streams away from (the Raft state's DrainRequested keeps
	// every coordinator's moves off them).
	draining map[string]bool
	// backoff holds, per stream, until when the balancer leaves it alone
	// after a failed move.
	backoff map[string]time.Time
	// seq numbers this replica's moves (the hand-off's move id).
	seq uint64
}

// streamMove is the admin verb stream.move.
func (s *Server) streamMove(_ context.Context, body []byte) (any, error) {
	var req wire.StreamMove
	if err := decodeStrict(body, &req); err != nil {
		return nil, err
	}
	if err := validStreamAndNode(req.Stream, req.Node); err != nil {
		return nil, err
	}
	if req.TimeoutMS < 0 || req.TimeoutMS > wire.MaxMoveTimeoutMS {
		return nil, wire.Errorf(wire.CodeBadRequest, "timeout_ms %d is not within 0 and %d", req.TimeoutMS, wire.MaxMoveTimeoutMS)
	}
	// Not the request's usual deadline (requestTimeout), which timeout_ms
	// may exceed: one that covers the whole move. Still under reqCtx, so
	// shutdown cuts it (the move's recovery then finishes on its own
	// bounded context, recovery.Mover.Finish).
	timeout := time.Duration(req.TimeoutMS) * time.Millisecond
	ctx, cancel := context.WithTimeout(s.reqCtx, s.moveRequestTimeout(req.TimeoutMS))
	defer cancel()
	// The stream, every node and the load counts: not a copy of every
	// stream.
	v, err := s.store.Read(ctx, state.QueryPlacement{Stream: req.Stream})
	if err != nil {
		return nil, err
	}
	return s.move(ctx, v.(*state.State), req.Stream, req.Node, timeout, "admin")
}

// moveRequestTimeout bounds a stream.move whose hand-off timeout is
// timeoutMS (0: the default): the read and the begin (requestTimeout), the
// hand-off (its timeout and a second for the answer) and the recovery
// after it (moverGrace, as recovery.Mover.Finish, which runs on past this
// deadline). With the default seal timeout that is within what callers
// wait (wire.MoveReplyWithin, less a second for the reply's way); a longer
// seal timeout makes a slow move's answer later by twice the difference.
func (s *Server) moveRequestTimeout(timeoutMS int64) time.Duration {
	return requestTimeout + recovery.HandoffBound(time.Duration(timeoutMS)*time.Millisecond) + s.moverGrace()
}

// validStreamAndNode checks a request's stream name and its node name,
// which may be absent.
func validStreamAndNode(stream, node string) error {
	if err := wire.ValidName("stream", stream); err != nil {
		return err
	}
	if node != "" {
		return wire.ValidName("node", node)
	}
	return nil
}

// moveView is recovery.MoveView from the state and this replica's
// liveness view. The owner need only be reachable (a node being drained
// hands its streams off); a target must be up, so no move targets a node
// whose drain is requested (state.DrainRequested), whichever coordinator
// runs the move or the drain.
func (s *Server) moveView(st *state.State, stream string) recovery.MoveView {
	live, now := s.live.ViewStream(stream), s.opt.Now()
	owned, _ := st.Load()
	owner := ""
	if ss := st.Streams[stream]; ss != nil {
		owner = ss.Assignment.Owner
	}
	tails := map[string]uint64{}
	for id, seen := range live { // the stream's copies only
		if c, ok := seen.Copies[stream]; ok {
			tails[id] = c.RecordTail
		}
	}
	return recovery.MoveView{
		Up: func(n string) bool {
			if n == owner {
				return controller.Reachable(st, live, n, now, s.opt.TTL)
			}
			return controller.Up(st, live, n, now, s.opt.TTL)
		},
		Tails: tails,
		Owned: owned,
	}
}

// move plans and runs one planned move of stream (read from st) to target
// ("" for the best follower); why names who asked (admin, drain, balance).
func (s *Server) move(ctx context.Context, st *state.State, stream, target string, timeout time.Duration, why string) (*wire.StreamMoveReply, error) {
	ss := st.Streams[stream]
	if ss == nil {
		return nil, wire.Errorf(wire.CodeNotFound, "stream %s does not exist", stream)
	}
	proposal, err := recovery.PlanMove(ss, target, s.moveView(st, stream))
	if err != nil {
		return nil, err
	}
	id, ok := s.beginMoving(stream, proposal.Owner)
	if !ok {
		return nil, wire.Errorf(wire.CodeConflict, "stream %s is being moved already", stream)
	}
	failed := true
	defer func() { s.endMoving(stream, failed) }()
	s.metrics.moveStarted(why)
	s.log.Info("planned move", "stream", stream, "from", ss.Assignment.Owner, "to", proposal.Owner, "epoch", ss.Assignment.Epoch, "why", why)
	m := &recovery.Mover{
		Handoffer: natsHandoffer{nc: s.nc},
		State:     moveState{s: s},
		Timeout:   timeout,
		// Within the leader's grace, so the mover's worker has ended
		// before the leader's may start (moverRuns).
		Finish: s.moverGrace(),
		ID:     id,
		Logger: s.log.With("component", "move"),
	}
	res, err := m.Run(ctx, ss.Assignment, ss.Version, proposal)
	if err != nil {
		s.metrics.moveEnded(why, false)
		s.log.Warn("planned move did not complete", "stream", stream, "to", proposal.Owner, "why", why, "err", err)
		return nil, err
	}
	s.metrics.moveEnded(why, true)
	failed = false
	return &wire.StreamMoveReply{Stream: stream, From: ss.Assignment.Owner, To: res.Assignment.Owner, Epoch: res.Assignment.Epoch,
		HeldMS: res.Held.Milliseconds(), TookMS: res.Took.Milliseconds(), Version: res.Version}, nil
}

// beginMoving marks stream as moved to target by this replica and returns
// the move's id; false if it is moved already.
func (s *Server) beginMoving(stream, target string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.moves.running == nil {
		s.moves.running = map[string]string{}
	}
	if _, ok := s.moves.running[stream]; ok {
		return "", false
	}
	s.moves.running[stream] = target
	s.moves.seq++
	return fmt.Sprintf("c%d-%d-%d", s.opt.ReplicaID, s.opt.Now().UnixMilli(), s.moves.seq), true
}

// endMoving unmarks stream; after a failed move the balancer leaves it
// alone for moveBackoff.
func (s *Server) endMoving(stream string, failed bool) {
	s.mu.Lock()
	delete(s.moves.running, stream)
	if failed {
		if s.moves.backoff == nil {
			s.moves.backoff = map[string]time.Time{}
		}
		s.moves.backoff[stream] = s.opt.Now().Add(moveBackoff)
	}
	s.mu.Unlock()
	s.poke() // a recovery the move left behind gets the loop's worker
}

// isMoving reports whether this replica runs a planned move of stream
// (under s.mu).
func (s *Server) isMoving(stream string) bool {
	_, ok := s.moves.running[stream]
	return ok
}

// drainMoveTimeout bounds one planned move of a node.drain (hand-off,
// begin, seals and commit); a move still running then is left to its
// recovery.
const drainMoveTimeout = 30 * time.Second

// startDrain marks node as drained by this replica; false if a node.drain
// of it runs here already.
func (s *Server) startDrain(node string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.moves.draining == nil {
		s.moves.draining = map[string]bool{}
	}
	if s.moves.draining[node] {
		return false
	}
	s.moves.draining[node] = true
	return true
}

// endDrain unmarks node.
func (s *Server) endDrain(node string) {
	s.mu.Lock()
	delete(s.moves.draining, node)
	s.mu.Unlock()
}

// nodeDrainMoves is the admin verb node.drain. It records the drain in the
// Raft state (state.NodeDrainBegin: from then on no copy and no ownership
// moves to the node, on any coordinator) and replies with the streams the
// node owns (moving, or staying with why), which this replica then tries
// to move, every one with a follower, to other hosts by planned moves in
// the background (at most maxDrainMoves at once, each
// within drainMoveTimeout), so the reply does not wait for many moves.
// Each move plans from a fresh read; node.undrain, a restart, or the node
// expiring or leaving stops the moves not yet begun (finishDrain). Once
// they are done the node is marked draining (unless the drain stopped):
// it takes no copies and no ownership until node.undrain (or its
// restart), and whatever it still owns fails over by recovery when a
// follower may take it, else stays there (controller.Plan). cluster.info shows the drain: drain_requested while the moves
// run, then state draining. A node.drain of a node already being drained
// here replies with what it still owns and starts nothing; one served by
// another replica (or after this one died) starts the moves again.
func (s *Server) nodeDrainMoves(ctx context.Context, body []byte) (any, error) {
	var req wire.NodeRef
	if err := decodeStrict(body, &req); err != nil {
		return nil, err
	}
	if err := wire.ValidName("node", req.Node); err != nil {
		return nil, err
	}
	r, err := check(s.store.Propose(ctx, state.NodeDrainBegin(req.Node, s.opt.Now().UnixMilli())))
	if err != nil {
		return nil, err
	}
	st, err := s.store.State(ctx)
	if err != nil {
		return nil, err
	}
	out := &wire.NodeDrainReply{OK: true, Version: max(r.Version, st.Version), Moving: []string{}, Staying: []wire.DrainStayer{}}
	if !st.DrainRequested(req.Node) {
		// Not live (draining already, or expired or left: its streams
		// fail over anyway), or undrained or restarted since the begin:
		// nothing to move, nothing to mark.
		return out, nil
	}
	// The drain tries every stream the node owns with a follower, each
	// planned from a fresh read (finishDrain): one with no follower up or
	// a recovery pending now may be movable by its turn. The reply says
	// how each stands now.
	var try []string
	up := s.balanceUp(s.opt.Now())
	for _, name := range st.SortedStreams() {
		if st.Streams[name].Assignment.Owner != req.Node {
			continue
		}
		why := drainStays(st, name, up)
		if why != wire.DrainStayOneCopy {
			try = append(try, name)
		}
		if why != "" {
			out.Staying = append(out.Staying, wire.DrainStayer{Stream: name, Reason: why})
			continue
		}
		out.Moving = append(out.Moving, name)
	}
	if len(out.Staying) > 0 {
		s.log.Warn("node drain: streams no planned move can take stay on the node", "node", req.Node, "staying", out.Staying)
	}
	if !s.startDrain(req.Node) {
		return out, nil // this replica's drain of the node goes on
	}
	if r.Changed {
		s.log.Warn("node drain requested: moving its streams", "node", req.Node, "streams", len(out.Moving), "version", r.Version)
	}
	s.handlers.Add(1) // a handler is in flight: shutdown waits for this too
	go func() {
		defer s.handlers.Done()
		defer s.endDrain(req.Node)
		s.finishDrain(s.reqCtx, req.Node, st.Nodes[req.Node].Incarnation, try)
	}()
	return out, nil
}

// drainStays says why no planned move can take stream (owned by a node
// being drained, read from st) from its owner now (a wire.DrainStay*
// reason), or "" when one can: it has one copy, a recovery of it is
// pending, or none of its followers is up (by up, a move target's rule).
func drainStays(st *state.State, stream string, up func(*state.State, string) bool) string {
	ss := st.Streams[stream]
	if len(ss.Assignment.Copies()) < 2 {
		return wire.DrainStayOneCopy
	}
	if ss.Recovery != nil {
		return wire.DrainStayRecovering
	}
	for _, f := range ss.Assignment.Followers {
		if up(st, f) {
			return ""
		}
	}
	return wire.DrainStayNoLiveFollower
}

// finishDrain moves names (streams node, at incarnation inc, owned with
// a follower when its drain began, whether the reply said moving or
// staying) elsewhere, then marks node draining if its drain is still
// requested. Each move plans from a state read just before it (not
// the one read at the drain's start: another drain, a move or a failover
// may have come since), and none starts once the read shows the drain no
// longer requested of that incarnation (node.undrain, a restart, the node
// expired or left): the drain stops there.
func (s *Server) finishDrain(ctx context.Context, node string, inc uint64, names []string) {
	var mu sync.Mutex
	var moved, failed []string
	var stopped atomic.Bool
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxDrainMoves)
	for _, name := range names {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil || stopped.Load() {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			mctx, cancel := context.WithTimeout(ctx, drainMoveTimeout)
			defer cancel()
			st, err := s.drainRead(mctx, node, inc, name)
			switch {
			case errors.Is(err, errDrainEnded):
				stopped.Store(true)
				return
			case errors.Is(err, errNotOwned):
				return // no longer the node's: nothing to move
			case err == nil:
				_, err = s.move(mctx, st, name, "", 0, "drain")
			}
			mu.Lock()
			if err != nil {
				failed = append(failed, name)
			} else {
				moved = append(moved, name)
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		s.log.Warn("node drain stopped with the coordinator; node.drain again to finish it", "node", node, "moved", len(moved))
		return
	}
	if stopped.Load() {
		s.log.Info("node drain stopped: no longer requested (undrained, restarted, expired or left)", "node", node, "moved", len(moved))
		return
	}
	pctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	r, err := check(s.store.Propose(pctx, state.NodeDrainRequested(node, s.opt.Now().UnixMilli())))
	if err != nil {
		s.log.Warn("node drain: not marked draining; node.drain again to finish it", "node", node, "err", err)
		return
	}
	slices.Sort(failed)
	if r.Changed {
		// A stream not moved fails over by recovery if a follower may
		// take it, else stays on the draining node (controller.Plan).
		s.log.Warn("node draining", "node", node, "moved", len(moved), "not_moved", failed, "version", r.Version)
	} else {
		s.log.Info("node drain ended without marking it draining (undrained or restarted meanwhile)", "node", node, "moved", len(moved))
	}
	s.poke()
}

// errDrainEnded is drainRead's answer once node's drain is no longer
// requested of its incarnation; errNotOwned once node no longer owns the
// stream.
var (
	errDrainEnded = errors.New("drain no longer requested")
	errNotOwned   = errors.New("stream no longer owned by the drained node")
)

// drainRead reads the state for a drain's move of stream (a placement
// read: the stream, every node, the load counts): errDrainEnded if node's
// drain (of incarnation inc) is no longer requested, errNotOwned if node
// no longer owns stream.
func (s *Server) drainRead(ctx context.Context, node string, inc uint64, stream string) (*state.State, error) {
	v, err := s.store.Read(ctx, state.QueryPlacement{Stream: stream})
	if err != nil {
		return nil, err
	}
	st := v.(*state.State)
	if n := st.Nodes[node]; n == nil || n.Incarnation != inc || !st.DrainRequested(node) {
		return nil, errDrainEnded
	}
	if ss := st.Streams[stream]; ss == nil || ss.Assignment.Owner != node {
		return nil, errNotOwned
	}
	return st, nil
}

// nodeUndrain is the admin verb node.undrain.
func (s *Server) nodeUndrain(ctx context.Context, body []byte) (any, error) {
	var req wire.NodeRef
	if err := decodeStrict(body, &req); err != nil {
		return nil, err
	}
	if err := wire.ValidName("node", req.Node); err != nil {
		return nil, err
	}
	r, err := check(s.store.Propose(ctx, state.NodeUndrain(req.Node, s.opt.Now().UnixMilli())))
	if err != nil {
		return nil, err
	}
	if r.Changed {
		s.log.Info("node undrained: it may take copies and ownership again", "node", req.Node, "version", r.Version)
	}
	s.poke()
	return wire.OK{OK: true, Version: r.Version}, nil
}

// moveState is recovery.MoveState over the Raft store.
type moveState struct{ s *Server }

// Begin records the move's pending recovery, with its hand-off's bound.
func (m moveState) Begin(ctx context.Context, stream string, version uint64, proposal wire.Assignment, handoff time.Duration) (uint64, error) {
	s := m.s
	c := state.RecoveryBegin(stream, version, proposal, state.ReasonMove, "", "", s.opt.Now().UnixMilli()).WithHandoff(handoff)
	r, err := check(s.store.Propose(ctx, c))
	if err != nil {
		return 0, err
	}
	s.metrics.failoverStarted(state.ReasonMove)
	return r.Transition, nil
}

// Recover runs the recovery worker to the commit and reads the stream's
// assignment after it. The worker's first read is this replica's own
// (movedRecoveryState): Begin's proposal returned once this replica
// applied it, so no quorum round is needed to see it.
func (m moveState) Recover(ctx context.Context, stream string, transition uint64) (wire.Assignment, uint64, error) {
	s := m.s
	w := s.newWorker()
	w.State = &movedRecoveryState{recoveryState: recoveryState{s: s}, transition: transition}
	if err := w.Run(ctx, stream); err != nil {
		return wire.Assignment{}, 0, err
	}
	v, err := s.store.Read(ctx, state.QueryStream{Stream: stream})
	if err != nil {
		return wire.Assignment{}, 0, err
	}
	sv := v.(state.StreamView)
	if sv.Stream == nil {
		return wire.Assignment{}, 0, wire.Errorf(wire.CodeNotFound, "stream %s was deleted", stream)
	}
	return sv.Stream.Assignment, sv.Stream.Version, nil
}

// movedRecoveryState is the recovery worker's state for a planned move
// this replica just recorded (transition): the first read is local, and
// taken only when it shows that transition (otherwise, and for every later
// read, a linearizable read as for any recovery). It saves a quorum round
// between the hand-off and the seals, the move's write gap; the worker's
// commit is guarded on the version and transition whatever it read.
type movedRecoveryState struct {
	recoveryState
	transition uint64
	read       bool
}

// Read implements recovery.State.
func (m *movedRecoveryState) Read(ctx context.Context, stream string) (*wire.PendingRecovery, []wire.HistoryStart, map[string]bool, uint64, error) {
	if !m.read {
		m.read = true
		if v, err := m.s.store.LocalRecoveryView(stream); err == nil && v.Recovery != nil && v.Recovery.Transition == m.transition {
			return v.Recovery, v.Starts, v.Leaving, v.Version, nil
		}
	}
	return m.recoveryState.Read(ctx, stream)
}

// newWorker is a recovery worker over this server's NATS and Raft store.
func (s *Server) newWorker() *recovery.Worker {
	return &recovery.Worker{
		Sealer:      s.seals,
		State:       recoveryState{s: s},
		SealTimeout: s.opt.SealTimeout,
		Logger:      s.log.With("component", "recovery"),
		Tracer:      s.tracer,
		Now:         s.opt.Now,
		Gone:        s.nodeGone,
		Incarnation: s.live.Incarnation,
		LastHeard:   s.live.LastHeard,
		Waits:       s.waits,
		Committed:   s.metrics.failoverCommitted,
	}
}

// natsHandoffer is recovery.Handoffer over NATS request-reply.
type natsHandoffer struct{ nc *nats.Conn }

// Handoff sends req to node's hand-off subject; an error reply comes back
// as a *wire.Error.
func (z natsHandoffer) Handoff(ctx context.Context, node string, req wire.HandoffRequest) (*wire.HandoffReply, error) {
	data, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode hand-off: %w", err)
	}
	resp, err := z.nc.RequestWithContext(ctx, wire.HandoffSubject(node), data)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return nil, wire.Errorf(wire.CodeUnavailable, "node %s does not answer hand-offs", node)
		}
		return nil, fmt.Errorf("hand-off %s of %s: %w", node, req.Stream, err)
	}
	var reply wire.HandoffReply
	if err := decodeReply(resp, &reply); err != nil {
		return nil, err
	}
	return &reply, nil
}

// balanceUp is the balancer's test of a node that may own at now, from
// every host's liveness: controller.Up, so not a node being drained
// (TestBalancerSkipsDrainRequestedNodes).
func (s *Server) balanceUp(now time.Time) func(*state.State, string) bool {
	live := s.live.ViewStream("") // every host's liveness, no copies
	return func(st *state.State, n string) bool {
		return controller.Up(st, live, n, now, s.opt.TTL)
	}
}

// balance runs the owner balancer at most once per Balance.Interval, on
// the leader: a state.QueryBalance read (its cost is in proportion to the
// nodes and the streams it may move, not to all streams) and
// controller.Balance's moves once the cluster has settled (no failover
// pending nor a change of the hosts that may own for Balance.Settle:
// controller.Settling), within Balance.MaxMoves moves in flight
// (operators' included) and Balance.MaxMovesPerHost from one owner,
// each in its own goroutine under the leader's
// context, so losing leadership aborts them (a move already sealed is
// finished by the next leader's recovery worker).
func (s *Server) balance(leaderCtx context.Context) {
	p := s.opt.Balance
	now := s.opt.Now()
	s.mu.Lock()
	due := !p.Off && now.Sub(s.balancedAt) >= p.Interval
	if due {
		s.balancedAt = now
	}
	moving := maps.Clone(s.moves.running)
	maps.DeleteFunc(s.moves.backoff, func(_ string, until time.Time) bool { return !now.Before(until) })
	skip := make(map[string]bool, len(s.moves.backoff))
	for name := range s.moves.backoff {
		skip[name] = true
	}
	s.mu.Unlock()
	budget := p.MaxMoves - len(moving)
	if !due {
		return
	}
	rctx, cancel := context.WithTimeout(leaderCtx, 2*time.Second)
	r, err := s.store.Read(rctx, controller.BalanceQuery(s.balanceUp(now), moving, skip, budget, p.Margin))
	cancel()
	if err != nil {
		return // the control loop logs failing reads
	}
	v := r.(state.BalanceView)
	s.mu.Lock()
	settled := s.settling.Settled(v, now, p.Settle)
	s.mu.Unlock()
	// Read and noted even with no budget left, so a failover that begins
	// and ends while moves are in flight still starts the quiet period.
	if !settled || budget <= 0 {
		return
	}
	// A follower's record tail against its owner's, as their heartbeats
	// last told, for the candidates Balance looks at only.
	lags := func(stream, n string) bool {
		seen := s.live.ViewStream(stream)
		var own, cp *wire.CopyStatus
		for id, sn := range seen {
			if c, ok := sn.Copies[stream]; ok {
				switch {
				case c.Role == wire.RoleOwner:
					own = &c
				case id == n:
					cp = &c
				}
			}
		}
		return own != nil && cp != nil && cp.RecordTail+maxBalanceLag < own.RecordTail
	}
	for _, m := range controller.Balance(v, lags, budget, p.Margin, p.MaxMovesPerHost) {
		s.workerWG.Add(1)
		go func() {
			defer s.workerWG.Done()
			ctx, cancel := context.WithTimeout(leaderCtx, requestTimeout)
			defer cancel()
			pv, err := s.store.Read(ctx, state.QueryPlacement{Stream: m.Stream})
			if err != nil {
				return
			}
			if _, err := s.move(ctx, pv.(*state.State), m.Stream, m.To, 0, "balance"); err == nil {
				s.log.Info("balancer moved a stream", "stream", m.Stream, "from", m.From, "to", m.To)
			}
		}()
	}
}
