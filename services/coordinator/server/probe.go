package server

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/controller"
)

// prober asks a stream host whether it is alive (wire.HostProbeSubject)
// before the leader expires it by TTL: the only I/O of that decision,
// behind an interface so that a test can answer for the host. Probe
// returns within wait (controller.ProbeWait), or when ctx ends
// (ProbeAborted); with ProbeAnswered, the answer: the host's liveness beat
// (its Node is node).
type prober interface {
	Probe(ctx context.Context, node string, wait time.Duration) (controller.ProbeOutcome, wire.Heartbeat)
}

// natsProber probes over the coordinator's NATS connection. A dead host
// has no subscription on its probe subject, so nats-server answers "no
// responders" within a round trip; a live one answers with a liveness
// beat; a host cut off without its connection closing (or stalled past
// the wait) does not answer. While the coordinator's own connection is
// down (nats.go then buffers the request, and it times out unsent), or if
// it reconnected while the probe ran, the silence is the coordinator's:
// ProbeAborted.
//
// The first answer wins: were two processes to run under one node name,
// an old one (another incarnation) answering first would expire the new
// one, as its heartbeats would have confused the tracker anyway; node
// names are unique by the deployment's rules (docs/failover.md).
type natsProber struct {
	nc *nats.Conn
}

func (p natsProber) Probe(ctx context.Context, node string, wait time.Duration) (controller.ProbeOutcome, wire.Heartbeat) {
	if !p.nc.IsConnected() {
		return controller.ProbeAborted, wire.Heartbeat{}
	}
	reconnects := p.nc.Stats().Reconnects
	rctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	m, err := p.nc.RequestWithContext(rctx, wire.HostProbeSubject(node), nil)
	switch {
	case err == nil:
		var hb wire.Heartbeat
		if json.Unmarshal(m.Data, &hb) != nil || hb.Node != node {
			// Only the host may answer on its subject; an answer that
			// says nothing of it proves nothing either.
			return controller.ProbeTimedOut, wire.Heartbeat{}
		}
		return controller.ProbeAnswered, hb
	case errors.Is(err, nats.ErrNoResponders):
		return controller.ProbeNoResponders, wire.Heartbeat{}
	case ctx.Err() != nil:
		return controller.ProbeAborted, wire.Heartbeat{}
	case !p.nc.IsConnected() || p.nc.Stats().Reconnects != reconnects:
		return controller.ProbeAborted, wire.Heartbeat{}
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return controller.ProbeTimedOut, wire.Heartbeat{}
	default:
		// This coordinator's own connection failed: its silence, not
		// the host's.
		return controller.ProbeAborted, wire.Heartbeat{}
	}
}

// probeBeat is the liveness beat an answer to a probe counts as in the
// tracker: its identity, connection, flags and times, never copies (an
// answer is no report).
func probeBeat(hb wire.Heartbeat) wire.Heartbeat {
	return wire.Heartbeat{Node: hb.Node, Incarnation: hb.Incarnation, Leaving: hb.Leaving, StoreError: hb.StoreError,
		AtMS: hb.AtMS, Beat: hb.Beat, ConnServer: hb.ConnServer, ConnID: hb.ConnID, Live: true}
}

// probingNodes returns the nodes whose probe runs, for the plan
// (controller.Liveness.Probing): no TTL expiry of theirs is planned
// meanwhile.
func (s *Server) probingNodes() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]bool, len(s.probing))
	for n := range s.probing {
		out[n] = true
	}
	return out
}

// startProbe probes node before its TTL expiry a (planned at now) is
// proposed, in a goroutine of its own so that the control loop goes on
// meanwhile (a stalled host must delay neither another's expiry nor an
// advisory's, whose expiry is certain and never waits for a probe). One
// probe per node at a time; the next round plans no TTL expiry of a node
// being probed, nor the failovers that would follow. The probe's verdict
// (controller.ExpireAfterProbe) proposes the expiry, or withdraws it:
// then the answer is recorded as the host's heartbeat (the tracker's
// rules apply: an answer on the connection a disconnect advisory closed
// does not undo the advisory, a leaving host leaves), and a round judges
// it again once it has been silent for a TTL since. A probe that did not
// get an answer while this coordinator could not hear (deafSince) is not
// judged: aborted, as when leadership ends. The metric counts the final
// decision. Either way the loop is woken, to fail the streams over or to
// plan on the new liveness.
func (s *Server) startProbe(leaderCtx context.Context, a controller.Action, now time.Time) {
	s.mu.Lock()
	if !s.leading || leaderCtx.Err() != nil || s.probing[a.Node] {
		s.mu.Unlock()
		return
	}
	if s.probing == nil {
		s.probing = map[string]bool{}
	}
	s.probing[a.Node] = true
	s.workerWG.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.workerWG.Done()
		defer s.poke()
		defer func() {
			s.mu.Lock()
			delete(s.probing, a.Node)
			s.mu.Unlock()
		}()
		start := s.opt.Now()
		// How long to wait adapts to how late beats arrive now: a floor
		// on a quiet machine, up to --probe-timeout on a loaded one.
		late := s.live.RecentLateness(start)
		wait := controller.ProbeWait(late, s.opt.ProbeTimeout)
		outcome, answer := s.prober.Probe(leaderCtx, a.Node, wait)
		arrived := s.opt.Now()
		took := arrived.Sub(start).Round(time.Millisecond).String()
		if outcome != controller.ProbeAnswered && outcome != controller.ProbeAborted && s.deafSince(start) {
			// A coordinator that could not hear does not judge: its
			// connection down or back only since the probe began, or
			// this process stalled meanwhile, the silence may be its own.
			s.log.Info("controller: liveness probe not judged: this coordinator could not hear while it ran", "node", a.Node,
				"outcome", outcome.String(), "probe_took", took)
			outcome = controller.ProbeAborted
		}
		if outcome == controller.ProbeAborted {
			s.metrics.probed(outcome.String(), false)
			return
		}
		if !controller.ExpireAfterProbe(outcome, a.Incarnation, answer.Incarnation) {
			s.metrics.probed(outcome.String(), false)
			silent := now.Sub(s.live.ViewStream("")[a.Node].LastSeen)
			// The answer is a heartbeat of the host's, on the tracker's
			// rules for beats: one naming the connection a disconnect
			// advisory closed proves nothing now (the advisory's expiry
			// stands), and a leaving host fails over as leaving.
			s.live.Heartbeat(probeBeat(answer), arrived)
			s.log.Info("controller: ttl expiry withdrawn: the host answered the liveness probe", "node", a.Node,
				"incarnation", a.Incarnation, "leaving", answer.Leaving, "silent_at_plan", silent.Round(time.Millisecond).String(),
				"probe_took", took, "probe_wait", wait.String(), "recent_lateness", late.String())
			return
		}
		if seen, ok := s.live.ViewStream("")[a.Node]; ok && heardSincePlan(seen, a, now) {
			s.metrics.probed(outcome.String(), false)
			s.log.Info("controller: expiry withdrawn: the node was heard while its probe ran", "node", a.Node,
				"outcome", outcome.String(), "probe_took", took)
			return
		}
		s.log.Info("controller: liveness probe not answered: expiring the host", "node", a.Node, "outcome", outcome.String(),
			"answered_incarnation", answer.Incarnation, "probe_took", took,
			"probe_wait", wait.String(), "recent_lateness", late.String())
		// Stamped with the time of the decision: the expiry (and the
		// failovers' detection) is as late as the probe made it; counted
		// once execute's guards have had their say.
		s.metrics.probed(outcome.String(), s.execute(leaderCtx, nil, a, s.opt.Now()))
	}()
}

// deafSince reports whether this coordinator could not hear at some time
// since start: its heartbeat connection is down or not noted back yet, or
// a connection of its came back or a stall of this process ended since.
func (s *Server) deafSince(start time.Time) bool {
	if s.nc == nil {
		return false
	}
	since, deaf := s.hearing.view(s.nc)
	return deaf || since.After(start)
}
