package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/brook-streams/brook/pkg/policy"
	"github.com/brook-streams/brook/pkg/telemetry/tracecontext"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/controller"
	"github.com/brook-streams/brook/services/coordinator/liveness"
	"github.com/brook-streams/brook/services/coordinator/raftstore"
	"github.com/brook-streams/brook/services/coordinator/recovery"
	"github.com/brook-streams/brook/services/coordinator/state"
)

// requestTimeout bounds one admin request or pull, Raft round trips included.
const requestTimeout = 5 * time.Second

// DefaultMaxInflight is the default of Options.MaxInflight: the requests a
// replica serves at once. Each holds a goroutine (two while it waits) for
// up to requestTimeout; a create holds one for its Raft write and its wait
// for the owner (ownerServeWait), so at about 4 s a create this admits far
// more than any client's creates in flight need.
const DefaultMaxInflight = 1024

// ownerServeWait bounds how long stream.create waits for the new owner to
// serve the stream on the data plane before it answers (StatusPlacing if it
// does not in time).
const ownerServeWait = 2 * time.Second

// ownerProbeTimeout bounds one probe of the new owner. The pause between
// probes starts at ownerProbePause and doubles up to ownerProbePauseMax
// (probePause): a new owner serves after the notice reached its host and
// the copy was created and promoted there, hundreds of milliseconds at
// 64 creates in flight on a loaded machine, and a probe every 5 ms made
// about a hundred no-responders round trips per create through the NATS
// servers and the coordinator's connection, which its heartbeats share
// (issue 17).
const (
	ownerProbeTimeout  = 250 * time.Millisecond
	ownerProbePause    = 5 * time.Millisecond
	ownerProbePauseMax = 40 * time.Millisecond
)

// probePause is the pause after the n-th probe (from 0) of a new owner.
func probePause(n int) time.Duration {
	if n >= 4 {
		return ownerProbePauseMax
	}
	return min(ownerProbePause<<n, ownerProbePauseMax)
}

// quorumWait is how long a request runs before this replica asks whether
// the coordinators have a quorum: one not done by then is answered at once
// as unavailable, well within a second rather than after requestTimeout,
// if this replica knows no Raft leader or a read-index round of its own
// (Store.ConfirmQuorum) gets no answer within quorumProbe. The second
// check is what answers a cut-off replica in time: it keeps taking the
// dead or cut-off leader for the leader until its election timeout, 1.5
// to 3 s (raftstore's electionRTT). A request that is answered in time is
// never delayed, and one a quorum confirms is left to run.
const quorumWait = 500 * time.Millisecond

// quorumProbe bounds the read-index round of the quorum check: a healthy
// leader answers it in one heartbeat round trip, sent at once rather
// than on the Raft clock's tick. Under load a
// leader held up longer than this makes the requests that waited
// quorumWait answer unavailable too, and clients retry them; an election
// waits 1.5 s.
const quorumProbe = 300 * time.Millisecond

// quorumPoll is how often a request past quorumWait asks again while this
// replica knows no leader or was itself held up during a probe;
// quorumRecheck is the pause after a quorum confirmed.
const (
	quorumPoll    = 25 * time.Millisecond
	quorumRecheck = 250 * time.Millisecond
)

type handler func(ctx context.Context, body []byte) (any, error)

// result is what a request's handler returned.
type result struct {
	out any
	err error
}

// reqKind is what the quorum check (serve) makes of a request.
type reqKind int

const (
	// kindRead has no effect: without a quorum it is answered unavailable.
	kindRead reqKind = iota
	// kindWrite may propose: without a quorum it is answered unavailable
	// with a warning that the change may have been applied.
	kindWrite
	// kindLocal answers from this replica's own state without a quorum
	// (cluster.info); the handler bounds its own wait.
	kindLocal
)

// reqOrigin is who sends a request, for admission: each origin has its
// own MaxInflight slots, so that clients' requests, however many, never
// refuse the hosts' own (issue 17: in a 10,000-stream failover the
// clients' stream.info retries held every slot, and the surviving hosts'
// assignment pulls were refused for about 30 s).
type reqOrigin int

const (
	// fromClient is an admin request (brook.admin.<verb>).
	fromClient reqOrigin = iota
	// fromHost is a stream host's assignment pull or leave.
	fromHost
	origins
)

func (o reqOrigin) String() string {
	if o == fromHost {
		return "host"
	}
	return "client"
}

// kindOf is the kind of an admin verb: one that changes the state is a
// write, since when it cannot be answered for want of a quorum its
// proposal may still be applied.
func kindOf(verb string) reqKind {
	switch verb {
	case wire.VerbClusterInfo:
		return kindLocal
	case wire.VerbStreamInfo, wire.VerbStreamList:
		return kindRead
	}
	return kindWrite
}

func (s *Server) verb(name string) handler {
	switch name {
	case wire.VerbStreamCreate:
		return s.streamCreate
	case wire.VerbStreamDelete:
		return s.streamDelete
	case wire.VerbStreamUpdate:
		return s.streamUpdate
	case wire.VerbStreamInfo:
		return s.streamInfo
	case wire.VerbStreamList:
		return s.streamList
	case wire.VerbClusterInfo:
		return s.clusterInfo
	case wire.VerbStreamMove:
		return s.streamMove
	case wire.VerbNodeDrain:
		return s.nodeDrainMoves
	case wire.VerbNodeUndrain:
		return s.nodeUndrain
	case wire.VerbNodeLeave:
		return s.nodeLeave
	case wire.VerbRecoveryWithdraw:
		return s.recoveryWithdraw
	case wire.VerbRecoveryAcceptLoss:
		return s.recoveryAcceptLoss
	case wire.VerbAttentionClear:
		return s.attentionClear
	}
	return nil
}

// onAdmin answers brook.admin.<verb> on its own goroutine, so a slow Raft
// round trip does not hold up other requests.
func (s *Server) onAdmin(m *nats.Msg) {
	verb := strings.TrimPrefix(m.Subject, wire.AdminPrefix)
	s.serve(m, "admin "+verb, kindOf(verb), fromClient, func(ctx context.Context) (any, error) {
		h := s.verb(verb)
		if h == nil {
			return nil, wire.Errorf(wire.CodeBadRequest, "unknown admin verb %q", verb)
		}
		return h(ctx, m.Data)
	})
}

// onPull answers an assignment pull, one page of the node's snapshot or of
// its changes since a version (wire.AssignmentPull), from a linearizable
// read.
func (s *Server) onPull(m *nats.Msg) {
	s.serve(m, "assignment pull", kindRead, fromHost, func(ctx context.Context) (any, error) {
		var req wire.AssignmentPull
		if err := decodeStrict(m.Data, &req); err != nil {
			return nil, err
		}
		if err := wire.ValidName("node", req.Node); err != nil {
			return nil, err
		}
		if req.After != "" {
			if err := wire.ValidName("after", req.After); err != nil {
				return nil, err
			}
		}
		var q state.Query = state.QueryAssignmentPage{Node: req.Node, After: req.After, Limit: req.Limit}
		if req.Since > 0 {
			if req.After != "" {
				return nil, wire.Errorf(wire.CodeBadRequest, "a pull names since or after, not both")
			}
			q = state.QueryAssignmentDelta{Node: req.Node, Since: req.Since, Limit: req.Limit}
		}
		v, err := s.store.Read(ctx, q)
		if err != nil {
			return nil, err
		}
		return v.(wire.AssignmentSnapshot), nil
	})
}

// serve runs f for a request and replies with its result or an error reply
// (JSON wire.ErrorReply, header Brook-Error = code). A panic in f is a bug:
// it is logged with its stack and answered as internal, and the process
// keeps serving. A request not done after quorumWait while the shard has
// no quorum is answered unavailable at once (see noQuorum), unless kind is
// kindLocal; for a kindWrite, f may propose, so that answer warns the
// change may have been applied. A request takes a slot of its origin's
// (from): clients' admin requests and hosts' own requests are admitted
// apart, each up to MaxInflight at once.
func (s *Server) serve(m *nats.Msg, what string, kind reqKind, from reqOrigin, f func(ctx context.Context) (any, error)) {
	if m.Reply == "" {
		return // not a request: nobody to answer, so do nothing
	}
	// closed is set under mu, so no handler is added once shutdown waits.
	// Taking a slot never blocks: a NATS callback that waited would hold
	// up every later request of the subscription.
	slots := &s.slots[from]
	if n := slots.Add(1); int(n) > s.opt.MaxInflight {
		slots.Add(-1)
		s.log.Debug("request refused: too many in flight", "what", what, "from", from.String(), "limit", s.opt.MaxInflight)
		s.reply(m, nil, wire.Errorf(wire.CodeOverloaded, "coordinator %d serves %d %s requests at once; retry", s.opt.ReplicaID, s.opt.MaxInflight, from))
		return
	}
	s.inflight.Add(1)
	release := func() {
		s.inflight.Add(-1)
		slots.Add(-1)
	}
	s.mu.Lock()
	closing := s.closed.Load()
	if !closing {
		s.handlers.Add(1)
	}
	s.mu.Unlock()
	if closing {
		release()
		s.reply(m, nil, wire.Errorf(wire.CodeShuttingDown, "coordinator %d is stopping", s.opt.ReplicaID))
		return
	}
	go func() {
		defer s.handlers.Done()
		defer release()
		// Derived from reqCtx, so shutdown can end a request that waits
		// for a quorum.
		ctx, cancel := context.WithTimeout(s.reqCtx, requestTimeout)
		defer cancel()
		// Once a proposal may have been sent, only its result answers
		// the request: it may have committed (see noQuorum).
		ctx, gate := raftstore.WithProposeGate(ctx)
		res := make(chan result, 1)
		go func() {
			out, err := func() (out any, err error) {
				defer func() {
					if p := recover(); p != nil {
						s.log.Error("handler panicked", "what", what, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
						out, err = nil, wire.Errorf(wire.CodeInternal, "internal error in %s; see the coordinator's log", what)
					}
				}()
				return f(ctx)
			}()
			res <- result{out, err}
		}()
		var r result
		var lost <-chan string // nil for kindLocal: never ready
		if kind != kindLocal {
			lost = s.noQuorum(ctx, res, gate)
		}
		select {
		case r = <-res:
		case why := <-lost:
			// The handler may have finished, or proposed, since the
			// check: then its result answers.
			finished := false
			select {
			case r = <-res:
				finished = true
			default:
			}
			if finished {
				break
			}
			if !gate.Abandon() {
				r = <-res
				break
			}
			r.err = s.noQuorumError(kind == kindWrite, why)
			s.log.Warn("request answered unavailable: the coordinators have no quorum", "what", what, "why", why)
			s.reply(m, nil, r.err)
			cancel()
			<-res // the handler ends with its context
			return
		}
		out, err := r.out, r.err
		if err != nil {
			lvl := s.log.Debug
			if wire.CodeOf(err) == wire.CodeInternal {
				lvl = s.log.Error
			}
			lvl("request failed", "what", what, "code", wire.CodeOf(err), "err", err)
		}
		s.reply(m, out, err)
	}()
}

// noQuorum returns a channel that receives why this replica takes the
// coordinators to have no quorum, once the request has run quorumWait and
// this replica knows no Raft leader or a read-index round gets no answer
// within quorumProbe, checked until done has a value or ctx ends, but not
// while a proposal of the request may be in the log (gate): it may commit
// even while a probe fails (a leader held up past quorumProbe), so then
// only its own result or timeout answers the request, never "no quorum":
// a client repeats a write answered unavailable. A probe
// that failed while this process was itself held up (it took well past
// its budget) is not judged: it proves nothing about the others. A
// request answered sooner never gets here.
func (s *Server) noQuorum(ctx context.Context, done <-chan result, gate *raftstore.ProposeGate) <-chan string {
	c := make(chan string, 1)
	go func() {
		t := time.NewTimer(quorumWait)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if len(done) > 0 {
				return
			}
			if gate.Proposed() {
				t.Reset(quorumPoll)
				continue
			}
			why, wait := s.quorumCheck()
			if why != "" && len(done) == 0 && !gate.Proposed() && ctx.Err() == nil {
				c <- why
				return
			}
			t.Reset(wait)
		}
	}()
	return c
}

// quorumCheck is one look of noQuorum: why the coordinators have no
// quorum ("" if they have one or this look cannot tell), and when to look
// again.
func (s *Server) quorumCheck() (string, time.Duration) {
	if _, ok := s.store.Leader(); !ok {
		return "knows no raft leader", quorumPoll
	}
	began := time.Now()
	confirm := s.store.ConfirmQuorum
	if s.opt.confirmQuorum != nil {
		confirm = s.opt.confirmQuorum
	}
	err := confirm(quorumProbe)
	if err == nil {
		return "", quorumRecheck
	}
	if took := time.Since(began); took > quorumProbe+quorumProbe/2 {
		s.log.Debug("quorum probe not judged: this process was held up", "took", took.String(), "err", err)
		return "", quorumPoll
	}
	return fmt.Sprintf("got no answer from the raft leader and a majority within %v", quorumProbe), quorumPoll
}

// noQuorumError is the answer to a request the shard cannot answer for
// want of a quorum; why says how this replica knows.
func (s *Server) noQuorumError(write bool, why string) error {
	msg := fmt.Sprintf("the coordinators have no quorum: coordinator %d %s (a majority of the %d coordinators is down or cut off)",
		s.opt.ReplicaID, why, max(len(s.opt.Peers), 1))
	if write {
		msg += "; the change may or may not have been applied: read the state once they have a quorum again"
	}
	return wire.Errorf(wire.CodeUnavailable, "%s", msg)
}

func (s *Server) reply(m *nats.Msg, out any, err error) {
	resp := nats.NewMsg(m.Reply)
	if err != nil {
		we := wire.AsError(err)
		resp.Header.Set(HeaderError, we.Code)
		resp.Data, _ = json.Marshal(wire.ErrorReply{Error: we})
	} else {
		data, merr := json.Marshal(out)
		if merr != nil {
			we := wire.Errorf(wire.CodeInternal, "encode reply: %v", merr)
			resp.Header.Set(HeaderError, we.Code)
			data, _ = json.Marshal(wire.ErrorReply{Error: we})
		}
		resp.Data = data
	}
	if err := s.nc.PublishMsg(resp); err != nil {
		s.log.Warn("reply not sent", "subject", m.Subject, "err", err)
	}
}

// decodeStrict decodes one JSON value into v, refusing unknown fields and
// trailing data. An empty body leaves v zero (fine for verbs without
// arguments; verbs with arguments then fail their validation).
func decodeStrict(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return wire.Errorf(wire.CodeBadRequest, "decode request: %v", err)
	}
	if err := dec.Decode(&json.RawMessage{}); !errors.Is(err, io.EOF) {
		return wire.Errorf(wire.CodeBadRequest, "decode request: trailing data after the JSON value")
	}
	return nil
}

// check turns a state machine refusal into an error.
func check(r state.Result, err error) (state.Result, error) {
	if err != nil {
		return r, err
	}
	return r, r.Err()
}

func (s *Server) streamCreate(ctx context.Context, body []byte) (any, error) {
	var req wire.StreamCreate
	if err := decodeStrict(body, &req); err != nil {
		return nil, err
	}
	if err := wire.ValidName("stream", req.Stream); err != nil {
		return nil, err
	}
	if req.Copies < 1 || req.Copies > state.MaxCopies {
		return nil, wire.Errorf(wire.CodeBadRequest, "copies %d: want 1..%d", req.Copies, state.MaxCopies)
	}
	// Stored in canonical form; empty means the cluster default.
	named, err := policy.Normalize(req.Policy)
	if err != nil {
		return nil, wire.Errorf(wire.CodeBadRequest, "%v", err)
	}
	if req.Retention.MaxAgeMS < 0 {
		return nil, wire.Errorf(wire.CodeBadRequest, "retention max_age_ms %d is negative", req.Retention.MaxAgeMS)
	}
	if req.MinCopies < 0 || req.MinCopies > req.Copies {
		return nil, wire.Errorf(wire.CodeBadRequest, "min_copies %d: want 1..%d (the stream's copies), or 0 for no floor", req.MinCopies, req.Copies)
	}
	// The nodes and their load, not a copy of every stream: a create's
	// cost does not grow with the cluster.
	began := time.Now()
	v, err := s.store.Read(ctx, state.QueryPlacement{Stream: req.Stream})
	if err != nil {
		return nil, err
	}
	read := time.Since(began)
	st := v.(*state.State)
	if st.Streams[req.Stream] != nil {
		return nil, wire.Errorf(wire.CodeExists, "stream %s exists", req.Stream)
	}
	if n := st.StreamCount(); n >= s.opt.MaxStreams {
		return nil, wire.Errorf(wire.CodeStreamLimit, "the cluster holds %d streams, its maximum (--max-streams %d)", n, s.opt.MaxStreams)
	}
	now := s.opt.Now()
	// Placement needs each node's liveness, not the copies it reported:
	// ViewStream copies none of the other streams'.
	owner, followers, err := controller.PlaceWithin(st, s.live.ViewStream(req.Stream), now, s.opt.TTL, req.Stream, req.Copies, s.opt.MaxCopiesPerHost)
	if err != nil {
		return nil, err
	}
	stamp := named
	if stamp == "" {
		stamp = s.opt.DefaultPolicy
	}
	a := wire.Assignment{Owner: owner, Followers: followers, Policy: stamp}
	proposed := time.Now()
	r, err := check(s.store.Propose(ctx, state.StreamCreate(req.Stream, req.Copies, named, req.Retention, a, now.UnixMilli()).
		WithMinCopies(req.MinCopies).WithLimits(s.opt.MaxStreams, s.opt.MaxCopiesPerHost)))
	if err != nil {
		return nil, err
	}
	s.log.Info("stream created", "stream", req.Stream, "stream_id", r.StreamID, "owner", owner,
		"followers", followers, "policy", stamp, "min_copies", req.MinCopies, "version", r.Version,
		"read_ms", read.Milliseconds(), "propose_ms", time.Since(proposed).Milliseconds())
	// The notice carries the committed assignment (read from this
	// replica, which applied the commit before Propose returned): each
	// host applies it at once, without waiting for a pull of the change.
	n := wire.AssignNotice{Version: r.Version,
		Assigned: s.localAssigned(req.Stream, func(st *state.Stream) bool { return st.ID == r.StreamID })}
	s.notifyOf(a.Copies(), n)
	// Answer once the owner serves, so that a publish sent the moment the
	// create answers reaches it rather than no responders. No lock is held
	// across the wait.
	serving := time.Now()
	served, probes := s.ownerServes(ctx, req.Stream, r.StreamID)
	s.log.Debug("stream create: owner serves", "stream", req.Stream, "served", served, "probes", probes,
		"wait_ms", time.Since(serving).Milliseconds(), "total_ms", time.Since(began).Milliseconds())
	// This replica applied the create before Propose returned, so its own
	// state, read without a quorum round, holds it or a later change of
	// the stream: a linearizable read here cost a read-index round (about
	// 50 ms per create at 64 in flight on a loaded machine; issue 17).
	sv, err := s.store.LocalStream(req.Stream)
	if err != nil {
		return nil, wire.Errorf(wire.CodeOutcomeUnknown, "the create committed, but reading it back failed: %v", err)
	}
	info, err := s.infoOf(req.Stream, sv)
	if err != nil {
		return nil, err
	}
	if !served && info.StreamID == r.StreamID && info.Status == wire.StatusServing {
		s.log.Warn("stream created but its owner does not serve it yet", "stream", req.Stream,
			"stream_id", r.StreamID, "owner", owner, "waited", ownerServeWait.String())
		info.Status = wire.StatusPlacing
	}
	return info, nil
}

// ownerServes reports whether stream id's owner answers on the data plane
// within ownerServeWait (or ctx): it asks for the latest record with a fetch
// that does not wait, naming the stream id, until a reply that is not an
// error comes back. No responders (the owner has not subscribed yet), a
// refusal (an older stream's owner, or a copy not yet owner) and a timeout
// are all asked again after a pause (probePause). It also returns how many
// probes it sent.
func (s *Server) ownerServes(ctx context.Context, stream string, id uint64) (bool, int) {
	ctx, cancel := context.WithTimeout(ctx, ownerServeWait)
	defer cancel()
	body, _ := json.Marshal(wire.FetchRequest{Start: "latest", MaxRecords: 1})
	for n := 0; ; n++ {
		m := nats.NewMsg(wire.FetchSubject(stream))
		m.Header.Set(wire.HeaderStreamID, strconv.FormatUint(id, 10))
		m.Data = body
		actx, acancel := context.WithTimeout(ctx, ownerProbeTimeout)
		resp, err := s.nc.RequestMsgWithContext(actx, m)
		acancel()
		if err == nil && resp.Header.Get(HeaderError) == "" {
			return true, n + 1
		}
		select {
		case <-ctx.Done():
			return false, n + 1
		case <-time.After(probePause(n)):
		}
	}
}

// infoAfter reads the stream's info after a write.
func (s *Server) infoAfter(ctx context.Context, stream string) (any, error) {
	v, err := s.store.Read(ctx, state.QueryStream{Stream: stream})
	if err != nil {
		return nil, err
	}
	info, err := s.infoOf(stream, v.(state.StreamView))
	if err != nil {
		return nil, err
	}
	return info, nil
}

// infoOf is stream's info from sv (read from the state) and this replica's
// liveness view, or not_found when sv holds no such stream.
func (s *Server) infoOf(stream string, sv state.StreamView) (wire.StreamInfo, error) {
	if sv.Stream == nil {
		return wire.StreamInfo{}, wire.Errorf(wire.CodeNotFound, "stream %s does not exist", stream)
	}
	return s.info(sv.Stream, sv.Status, s.live.ViewStream(stream), s.opt.Now()), nil
}

func (s *Server) streamDelete(ctx context.Context, body []byte) (any, error) {
	var req wire.StreamRef
	if err := decodeStrict(body, &req); err != nil {
		return nil, err
	}
	if err := wire.ValidName("stream", req.Stream); err != nil {
		return nil, err
	}
	r, err := check(s.store.Propose(ctx, state.StreamDelete(req.Stream, s.opt.Now().UnixMilli())))
	if err != nil {
		return nil, err
	}
	s.log.Info("stream deleted", "stream", req.Stream, "version", r.Version)
	s.notifyAll(r.Version, nil)
	return wire.OK{OK: true, Version: r.Version}, nil
}

// streamUpdate is stream.update: the state machine decides, from the state
// it applies the change to, whether a new policy is stamped at once (W' <=
// W) or goes through a recovery (reason "policy"), whose trace this
// request starts. The reply is the stream's info after the change.
func (s *Server) streamUpdate(ctx context.Context, body []byte) (any, error) {
	var req wire.StreamUpdate
	if err := decodeStrict(body, &req); err != nil {
		return nil, err
	}
	if err := wire.ValidName("stream", req.Stream); err != nil {
		return nil, err
	}
	if req.Policy != "" {
		if _, err := policy.Normalize(req.Policy); err != nil {
			return nil, wire.Errorf(wire.CodeBadRequest, "%v", err)
		}
	}
	if req.Retention != nil && req.Retention.MaxAgeMS < 0 {
		return nil, wire.Errorf(wire.CodeBadRequest, "retention max_age_ms %d is negative", req.Retention.MaxAgeMS)
	}
	if req.Policy == "" && req.Retention == nil && req.MinCopies == nil {
		return nil, wire.Errorf(wire.CodeBadRequest, "stream.update of %s names nothing to change (policy, retention, min_copies)", req.Stream)
	}
	now := s.opt.Now()
	// A policy that goes through a recovery continues this trace (the
	// recovery's workers take its traceparent), as a failover's does.
	ctx, span := s.tracer.Start(ctx, "stream.update", trace.WithNewRoot(), trace.WithAttributes(
		attribute.String("stream", req.Stream), attribute.String("policy", req.Policy)))
	traceID := span.SpanContext().TraceID().String()
	r, err := check(s.store.Propose(ctx, state.StreamUpdate(req.Stream, req, traceID, tracecontext.TraceParent(ctx), now.UnixMilli())))
	span.SetAttributes(attribute.Bool("recovery", r.Transition != 0))
	span.End()
	if err != nil {
		return nil, err
	}
	if r.Transition != 0 {
		s.metrics.failoverStarted(state.ReasonPolicy)
		s.log.Warn("stream updated: the new policy needs more copies to confirm; recovery recorded", "stream", req.Stream,
			"policy", req.Policy, "transition", r.Transition, "trace_id", traceID, "version", r.Version)
		s.poke()
	} else {
		s.log.Info("stream updated", "stream", req.Stream, "policy", req.Policy, "retention", req.Retention,
			"min_copies", req.MinCopies, "changed", r.Changed, "version", r.Version)
	}
	if r.Changed {
		s.notifyAll(r.Version, nil)
	}
	return s.infoAfter(ctx, req.Stream)
}

func (s *Server) streamInfo(ctx context.Context, body []byte) (any, error) {
	var req wire.StreamRef
	if err := decodeStrict(body, &req); err != nil {
		return nil, err
	}
	if err := wire.ValidName("stream", req.Stream); err != nil {
		return nil, err
	}
	return s.infoAfter(ctx, req.Stream)
}

func (s *Server) streamList(ctx context.Context, body []byte) (any, error) {
	var req wire.StreamListRequest
	if err := decodeStrict(body, &req); err != nil {
		return nil, err
	}
	if req.Limit < 0 {
		return nil, wire.Errorf(wire.CodeBadRequest, "limit %d: want 0 (every stream) or more", req.Limit)
	}
	var page state.StreamChangePage
	if req.Since > 0 {
		// Attention lists the changes after the version it holds: at
		// 10,000 streams a full listing was 2.6% of the whole machine in
		// the coordinators during a failover, and 2.2% more decoding it.
		v, err := s.store.Read(ctx, state.QueryStreamChanges{Since: req.Since, Limit: req.Limit})
		if err != nil {
			return nil, err
		}
		page = v.(state.StreamChangePage)
	} else {
		v, err := s.store.Read(ctx, state.QueryStreamPage{After: req.Cursor, Limit: req.Limit})
		if err != nil {
			return nil, err
		}
		page.StreamPage = v.(state.StreamPage)
	}
	// The page's streams' copies only: attention pages through the whole
	// list during a failover, and a copy of every copy per page was 3% of
	// the leader's CPU then.
	view := s.live.ViewStreams(func(yield func(string) bool) {
		for _, sv := range page.Streams {
			if !yield(sv.Stream.Name) {
				return
			}
		}
	})
	now := s.opt.Now()
	out := wire.StreamList{Streams: make([]wire.StreamInfo, 0, len(page.Streams)), Next: page.Next, Version: page.Version,
		Since: page.Since, NextSince: page.NextSince, Deleted: page.Deleted}
	for _, sv := range page.Streams {
		out.Streams = append(out.Streams, s.info(sv.Stream, sv.Status, view, now))
	}
	return out, nil
}

// info renders one stream: its assignment with W and R from package policy,
// status, starts, pending recovery, and each copy's tails from the latest
// heartbeats (the assignment's copies first, then other nodes that report a
// copy of this stream, such as a sealed copy left out).
func (s *Server) info(str *state.Stream, status string, view map[string]liveness.Seen, now time.Time) wire.StreamInfo {
	a := state.CloneAssignment(str.Assignment)
	e := len(a.Copies())
	out := wire.StreamInfo{
		Stream:       str.Name,
		StreamID:     str.ID,
		Copies:       str.Copies,
		Policy:       a.Policy,
		W:            policy.StampW(a.Policy, e),
		R:            policy.StampR(a.Policy, e),
		MinCopies:    str.MinCopies,
		Retention:    str.Retention,
		Assignment:   a,
		Status:       status,
		Starts:       append([]wire.HistoryStart{}, str.Starts...),
		Recovery:     state.ClonePending(str.Recovery),
		CopyTails:    []wire.CopyTails{},
		LastTraceID:  str.LastTraceID,
		AcceptedLoss: str.AcceptedLoss,
		// The same rule the coordinator's metrics count by.
		UnderReplicated: str.UnderReplicated(),
		Version:         str.Version,
	}
	nodes := a.Copies()
	var others []string
	for id, seen := range view {
		if c, ok := seen.Copies[str.Name]; ok && c.StreamID == str.ID && !slices.Contains(nodes, id) {
			others = append(others, id)
		}
	}
	slices.Sort(others)
	for _, n := range append(nodes, others...) {
		out.CopyTails = append(out.CopyTails, copyTails(view, n, str, now))
	}
	return out
}

func copyTails(view map[string]liveness.Seen, node string, str *state.Stream, now time.Time) wire.CopyTails {
	ct := wire.CopyTails{Node: node, AgeMS: -1}
	seen, ok := view[node]
	if !ok {
		return ct
	}
	ct.AgeMS = now.Sub(seen.LastSeen).Milliseconds()
	if c, ok := seen.Copies[str.Name]; ok && c.StreamID == str.ID {
		ct.Role, ct.Epoch, ct.RecordTail, ct.CursorTail, ct.Sealed = c.Role, c.Epoch, c.RecordTail, c.CursorTail, c.Sealed
		ct.Published = true
	}
	return ct
}

func (s *Server) clusterInfo(ctx context.Context, body []byte) (any, error) {
	if err := decodeStrict(body, &wire.Empty{}); err != nil {
		return nil, err
	}
	// Without a quorum, still show what this replica knows: that is when
	// an operator needs cluster.info most. With no leader known it does
	// not wait for a read that cannot be answered.
	var st *state.State
	err := errors.New("the raft shard has no leader")
	leader, ok := s.store.Leader()
	if ok {
		// The nodes and their load counts, not a copy of every stream.
		// A read not done by quorumWait is given more time only if a
		// quorum confirms: a replica cut off from the others still takes
		// the lost leader for its leader for an election timeout.
		var v any
		rctx, cancel := context.WithTimeout(ctx, quorumWait)
		v, err = s.store.Read(rctx, state.QueryPlacement{})
		cancel()
		if err != nil && ctx.Err() == nil && s.store.ConfirmQuorum(quorumProbe) == nil {
			v, err = s.store.Read(ctx, state.QueryPlacement{})
		}
		if err == nil {
			st = v.(*state.State)
		}
	}
	if err != nil {
		local, lerr := s.store.LocalState()
		if lerr != nil {
			return nil, err
		}
		st = local
		leader = 0 // none that answers
	}
	out := wire.ClusterInfo{
		Coordinators: s.store.Peers(),
		Leader:       leader,
		Nodes:        []wire.NodeInfo{},
		Version:      st.Version,
		AnsweredBy:   s.opt.ReplicaID,
		Local:        err != nil,
	}
	_, copies := st.Load()
	// The nodes' liveness without their copies (no stream is named "").
	view := s.live.ViewStream("")
	for _, id := range st.SortedNodes() {
		n := st.Nodes[id]
		ni := wire.NodeInfo{Node: id, Incarnation: n.Incarnation, State: n.State, LastSeenMS: -1, Copies: copies[id],
			DrainRequested: st.DrainRequested(id)}
		if seen, ok := view[id]; ok {
			ni.LastSeenMS = seen.LastSeen.UnixMilli()
		}
		out.Nodes = append(out.Nodes, ni)
	}
	return out, nil
}

// nodeLeave is the admin verb node.leave, for operators: the node is the
// body's.
func (s *Server) nodeLeave(ctx context.Context, body []byte) (any, error) {
	var req wire.NodeRef
	if err := decodeStrict(body, &req); err != nil {
		return nil, err
	}
	if err := wire.ValidName("node", req.Node); err != nil {
		return nil, err
	}
	return s.leave(ctx, req.Node)
}

// onHostLeave answers brook.host.<node>.leave, a stream host telling the
// coordinators it is shutting down: like node.leave, but the node is the
// subject's, which with credentials only host <node> may publish on. A
// body naming another node is refused; an empty body or one without a
// node is the subject's node.
func (s *Server) onHostLeave(m *nats.Msg) {
	s.serve(m, "host leave", kindWrite, fromHost, func(ctx context.Context) (any, error) {
		node, ok := wire.HostLeaveNode(m.Subject)
		if !ok {
			return nil, wire.Errorf(wire.CodeBadRequest, "subject %q is not a host's leave subject", m.Subject)
		}
		if err := wire.ValidName("node", node); err != nil {
			return nil, err
		}
		var req wire.NodeRef
		if err := decodeStrict(m.Data, &req); err != nil {
			return nil, err
		}
		if req.Node != "" && req.Node != node {
			s.log.Warn("host leave names another node than its subject; refused", "subject_node", node, "body_node", req.Node)
			return nil, wire.Errorf(wire.CodeBadRequest, "leave on node %s's subject names node %s", node, req.Node)
		}
		return s.leave(ctx, node)
	})
}

// leave marks node left, so the leader fails its streams over at once.
func (s *Server) leave(ctx context.Context, node string) (any, error) {
	r, err := check(s.store.Propose(ctx, state.NodeLeave(node, 0, s.opt.Now().UnixMilli())))
	if err != nil {
		return nil, err
	}
	if r.Changed {
		s.log.Warn("node left: failing its streams over", "node", node, "version", r.Version)
	}
	s.poke()
	return wire.OK{OK: true, Version: r.Version}, nil
}

func (s *Server) recoveryWithdraw(ctx context.Context, body []byte) (any, error) {
	var req wire.RecoveryWithdraw
	if err := decodeStrict(body, &req); err != nil {
		return nil, err
	}
	if err := wire.ValidName("stream", req.Stream); err != nil {
		return nil, err
	}
	r, err := check(s.store.Propose(ctx, state.RecoveryWithdraw(req.Stream, s.opt.Now().UnixMilli())))
	if err != nil {
		return nil, err
	}
	s.log.Warn("recovery withdrawn by operator; the controller records a new one", "stream", req.Stream, "version", r.Version)
	s.poke()
	return wire.OK{OK: true, Version: r.Version}, nil
}

// recoveryAcceptLoss moves a stream whose owner is lost to the named (or
// best) live copy without sealing, using the copies' last heartbeat tails.
func (s *Server) recoveryAcceptLoss(ctx context.Context, body []byte) (any, error) {
	var req wire.RecoveryAcceptLoss
	if err := decodeStrict(body, &req); err != nil {
		return nil, err
	}
	if err := validStreamAndNode(req.Stream, req.Node); err != nil {
		return nil, err
	}
	st, err := s.store.State(ctx)
	if err != nil {
		return nil, err
	}
	str := st.Streams[req.Stream]
	if str == nil {
		return nil, wire.Errorf(wire.CodeNotFound, "stream %s does not exist", req.Stream)
	}
	old, proposal := str.Assignment, str.Assignment
	if str.Recovery != nil {
		old, proposal = str.Recovery.Old, str.Recovery.Proposal
	} else if st.NodeState(old.Owner) == wire.NodeLive {
		return nil, wire.Errorf(wire.CodeConflict, "stream %s is served by its owner %s; there is no loss to accept", req.Stream, old.Owner)
	} else {
		proposal.Epoch = old.Epoch + 1
		proposal.Policy = s.params.Stamp(str)
	}
	if req.Node != "" && !old.Includes(req.Node) {
		return nil, wire.Errorf(wire.CodeBadRequest, "node %s holds no copy of %s at epoch %d (copies %v)", req.Node, req.Stream, old.Epoch, old.Copies())
	}
	now := s.opt.Now()
	view := s.live.ViewStream(req.Stream)
	var copies []recovery.CopyTails
	for _, n := range old.Copies() {
		ct := recovery.CopyTails{Node: n}
		seen, heard := view[n]
		ns := st.NodeState(n)
		ct.Live = heard && seen.Serving(now, s.opt.TTL) && (ns == wire.NodeLive || ns == wire.NodeDraining)
		if c, ok := seen.Copies[req.Stream]; heard && ok && c.StreamID == str.ID {
			// The epoch goes with the tails: AcceptLoss lowers a copy that
			// missed a role change to the cut its host will make.
			ct.Published, ct.Epoch, ct.RecordTail, ct.CursorTail = true, c.Epoch, c.RecordTail, c.CursorTail
		}
		copies = append(copies, ct)
	}
	a, start, below, err := recovery.AcceptLoss(old, proposal, str.Starts, copies, req.Node)
	if err != nil {
		return nil, wire.Errorf(wire.CodeUnavailable, "%v", err)
	}
	ctx, span := s.tracer.Start(ctx, "recovery.accept-loss", trace.WithNewRoot(), trace.WithAttributes(
		attribute.String("stream", req.Stream), attribute.String("owner", a.Owner),
		attribute.Int64("epoch", int64(a.Epoch)), attribute.Bool("below_prefix", below)))
	defer span.End()
	traceID := span.SpanContext().TraceID().String()
	var loss *wire.AcceptedLoss
	if below {
		latest := state.LatestStart(str.Starts)
		loss = &wire.AcceptedLoss{Stream: req.Stream, Epoch: a.Epoch, Node: a.Owner, StartTail: latest.RecordTail, AtMS: now.UnixMilli()}
		if start != nil {
			// The owner's tail as AcceptLoss judged it: lowered to its
			// host's cut, not the raw tail it published.
			loss.RecordTail = start.RecordTail
		}
	}
	r, err := check(s.store.Propose(ctx, state.RecoveryAccept(req.Stream, str.Version, a, start, loss, traceID, tracecontext.TraceParent(ctx), now.UnixMilli())))
	if err != nil {
		return nil, err
	}
	if below {
		s.log.Warn("owner loss accepted below the confirmed prefix: confirmed records may be lost",
			"stream", req.Stream, "owner", a.Owner, "epoch", a.Epoch, "record_tail", loss.RecordTail,
			"start_tail", loss.StartTail, "trace_id", traceID, "version", r.Version)
	} else {
		s.log.Warn("owner loss accepted", "stream", req.Stream, "owner", a.Owner, "epoch", a.Epoch,
			"start_recorded", start != nil, "trace_id", traceID, "version", r.Version)
	}
	s.notifyAll(r.Version, nil)
	return wire.OK{OK: true, Version: r.Version}, nil
}

func (s *Server) attentionClear(ctx context.Context, body []byte) (any, error) {
	var req wire.AttentionClear
	if err := decodeStrict(body, &req); err != nil {
		return nil, err
	}
	if err := wire.ValidName("stream", req.Stream); err != nil {
		return nil, err
	}
	r, err := check(s.store.Propose(ctx, state.AttentionClear(req.Stream, s.opt.Now().UnixMilli())))
	if err != nil {
		return nil, err
	}
	s.log.Info("accepted-loss warning cleared", "stream", req.Stream, "version", r.Version)
	return wire.OK{OK: true, Version: r.Version}, nil
}
