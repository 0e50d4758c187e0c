package server

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/brook-streams/brook/pkg/telemetry/tracecontext"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/recovery"
	"github.com/brook-streams/brook/services/coordinator/state"
)

// HeaderError is set on error replies (its value is the code).
const HeaderError = "Brook-Error"

// recoveryState is recovery.State over the Raft store.
type recoveryState struct{ s *Server }

var _ recovery.State = recoveryState{}

// Read reads the pending recovery, starts, leaving nodes and the stream's
// version from one linearizable read of the state machine.
func (r recoveryState) Read(ctx context.Context, stream string) (*wire.PendingRecovery, []wire.HistoryStart, map[string]bool, uint64, error) {
	v, err := r.s.store.RecoveryView(ctx, stream)
	if err != nil {
		return nil, nil, nil, 0, fmt.Errorf("read recovery of %s: %w", stream, err)
	}
	return v.Recovery, v.Starts, v.Leaving, v.Version, nil
}

// traceIDOf returns the trace id of a W3C traceparent, or "".
func traceIDOf(traceParent string) string {
	sc := trace.SpanContextFromContext(tracecontext.WithTraceParent(context.Background(), traceParent))
	if !sc.TraceID().IsValid() {
		return ""
	}
	return sc.TraceID().String()
}

// Commit is the worker's one guarded proposal. A refusal because the stream
// moved on (conflict, or the stream or recovery is gone) wraps
// recovery.ErrConflict so the worker re-reads.
func (r recoveryState) Commit(ctx context.Context, stream string, transition, version uint64, a wire.Assignment, start wire.HistoryStart, traceParent string) error {
	s := r.s
	traceID := traceIDOf(traceParent)
	res, err := s.store.Propose(ctx, state.RecoveryCommit(stream, transition, version, a, start, traceID, traceParent, s.opt.Now().UnixMilli()))
	if err != nil {
		return fmt.Errorf("commit recovery %d of %s: %w", transition, stream, err)
	}
	switch res.Code {
	case "":
	case wire.CodeConflict, wire.CodeNotFound:
		return fmt.Errorf("commit recovery %d of %s: %s: %w", transition, stream, res.Message, recovery.ErrConflict)
	default:
		return fmt.Errorf("commit recovery %d of %s: %w", transition, stream, res.Err())
	}
	s.log.Warn("recovery committed", "stream", stream, "transition", transition, "owner", a.Owner,
		"followers", a.Followers, "epoch", a.Epoch, "start_record_tail", start.RecordTail,
		"start_cursor_tail", start.CursorTail, "trace_id", traceID, "version", res.Version)
	// The old copies (sealed or not) and any new member must look again,
	// at once: the stream is not served until the new owner applies this.
	// The notice carries the committed assignment, read from this replica
	// (the commit returned once applied here), so the new owner takes its
	// role without waiting for its pull.
	n := wire.AssignNotice{Version: res.Version, Recovery: true,
		Assigned: s.localAssigned(stream, func(st *state.Stream) bool { return st.Assignment.Epoch == a.Epoch })}
	s.notifyAllOf(n, a.Copies())
	s.poke()
	return nil
}

// RecordWait stores the worker's wait; it changes nothing else.
func (r recoveryState) RecordWait(ctx context.Context, stream string, transition uint64, w wire.RecoveryWait) error {
	res, err := r.s.store.Propose(ctx, state.RecoveryWait(stream, transition, w, r.s.opt.Now().UnixMilli()))
	if err != nil {
		return fmt.Errorf("record wait of %s: %w", stream, err)
	}
	if res.Err() != nil {
		return fmt.Errorf("record wait of %s: %w", stream, res.Err())
	}
	return nil
}

// decodeReply reads a JSON reply into v, or returns the *wire.Error of an
// error reply.
func decodeReply(m *nats.Msg, v any) error {
	if e := wire.DecodeErrorReply(m.Header.Get(HeaderError), m.Data); e != nil {
		return e
	}
	if err := json.Unmarshal(m.Data, v); err != nil {
		return fmt.Errorf("decode reply: %w", err)
	}
	return nil
}

// localAssigned is stream's committed assignment as this replica holds it,
// for a notice to carry, if it is the one just committed (is says so: a
// replica answers from its own applied state, which a later change may
// have moved on); nil otherwise.
func (s *Server) localAssigned(stream string, is func(*state.Stream) bool) *wire.AssignedStream {
	v, err := s.store.LocalStream(stream)
	if err != nil || v.Stream == nil || !is(v.Stream) {
		return nil
	}
	as := state.AssignedOf(v.Stream)
	return &as
}
