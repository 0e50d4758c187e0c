package recovery

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/state"
)

// movePending is a planned move of "s" from n1 (followers n2, n3) to target.
func movePending(target string) wire.PendingRecovery {
	pr := pending("majority_durable", "n1", "n2", "n3")
	pr.Reason = state.ReasonMove
	pr.Proposal = wire.Assignment{Stream: "s", StreamID: 9, Epoch: 5, Owner: target, Followers: []string{"n1"}, Policy: "majority_durable"}
	for _, f := range []string{"n2", "n3"} {
		if f != target {
			pr.Proposal.Followers = append(pr.Proposal.Followers, f)
		}
	}
	return pr
}

// TestDecidePlannedMove: a planned move promotes its target when the
// target's sealed tails are among the furthest, whatever the tie-breaks
// would say; a target behind the furthest copy on either tail is not
// promoted (the furthest is, as in any recovery), nor one that began a
// graceful leave or a drain after the move began (leaving: the first copy
// not leaving is), and without the move reason the target gets nothing
// special.
func TestDecidePlannedMove(t *testing.T) {
	for _, c := range []struct {
		name    string
		target  string
		reason  string
		tails   map[string][2]uint64
		want    string
		leaving []string
	}{
		{"target at the tail, beats lower ids", "n3", state.ReasonMove, map[string][2]uint64{"n1": {10, 2}, "n2": {10, 2}, "n3": {10, 2}}, "n3", nil},
		{"target at the tail, owner not lowest", "n2", state.ReasonMove, map[string][2]uint64{"n1": {10, 2}, "n2": {10, 2}, "n3": {7, 2}}, "n2", nil},
		{"target behind on records", "n3", state.ReasonMove, map[string][2]uint64{"n1": {10, 2}, "n2": {10, 2}, "n3": {9, 2}}, "n1", nil},
		{"target behind on cursor events", "n3", state.ReasonMove, map[string][2]uint64{"n1": {10, 3}, "n2": {10, 2}, "n3": {10, 2}}, "n1", nil},
		{"not a move", "n3", "expired", map[string][2]uint64{"n1": {10, 2}, "n2": {10, 2}, "n3": {10, 2}}, "n1", nil},
		{"target leaving", "n3", state.ReasonMove, map[string][2]uint64{"n1": {10, 2}, "n2": {10, 2}, "n3": {10, 2}}, "n1", []string{"n3"}},
		{"target and owner leaving", "n3", state.ReasonMove, map[string][2]uint64{"n1": {10, 2}, "n2": {10, 2}, "n3": {10, 2}}, "n2", []string{"n1", "n3"}},
		{"owner leaving (a drain)", "n3", state.ReasonMove, map[string][2]uint64{"n1": {10, 2}, "n2": {10, 2}, "n3": {10, 2}}, "n3", []string{"n1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			pr := movePending(c.target)
			pr.Reason = c.reason
			var answers []Answer
			for _, n := range []string{"n1", "n2", "n3"} {
				answers = append(answers, ans(pr, n, c.tails[n][0], c.tails[n][1]))
			}
			leaving := map[string]bool{}
			for _, n := range c.leaving {
				leaving[n] = true
			}
			d := Decide(pr, nil, answers, leaving, now)
			if d.Kind != Promote || d.Assignment.Owner != c.want {
				t.Fatalf("decision %s owner %s (%s), want %s", d.Kind, d.Assignment.Owner, d.Reason, c.want)
			}
			if d.Assignment.Epoch != 5 || len(d.Assignment.Copies()) != 3 || !slices.Contains(d.Assignment.Followers, "n1") && c.want != "n1" {
				t.Fatalf("assignment %+v: want epoch 5, three copies, the old owner following", d.Assignment)
			}
		})
	}
}

// TestPlanMove: the checks and codes of a planned move and the choice of
// the best follower.
func TestPlanMove(t *testing.T) {
	st := &state.Stream{Name: "s", ID: 9, Copies: 3,
		Assignment: wire.Assignment{Stream: "s", StreamID: 9, Epoch: 4, Owner: "n1", Followers: []string{"n2", "n3"}, Policy: "majority_durable"}}
	up := map[string]bool{"n1": true, "n2": true, "n3": true}
	view := MoveView{Up: func(n string) bool { return up[n] }, Tails: map[string]uint64{"n2": 10, "n3": 10}, Owned: map[string]int{"n2": 5, "n3": 1}}

	p, err := PlanMove(st, "n2", view)
	if err != nil || p.Owner != "n2" || !slices.Equal(p.Followers, []string{"n1", "n3"}) || p.Epoch != 5 || p.Policy != "majority_durable" {
		t.Fatalf("named: %+v, %v", p, err)
	}
	if p, err = PlanMove(st, "", view); err != nil || p.Owner != "n3" {
		t.Fatalf("best of equal tails: %+v, %v; want n3, which owns fewer", p, err)
	}
	view.Tails["n2"] = 11
	if p, err = PlanMove(st, "", view); err != nil || p.Owner != "n2" {
		t.Fatalf("best: %+v, %v; want n2, the furthest", p, err)
	}

	pending := *st
	pending.Recovery = &wire.PendingRecovery{Transition: 3, Reason: "expired"}
	up4 := map[string]bool{"n1": true, "n2": true}
	for _, c := range []struct {
		name   string
		st     *state.Stream
		target string
		up     map[string]bool
		code   string
	}{
		{"no stream", nil, "n2", up, wire.CodeNotFound},
		{"recovery pending", &pending, "n2", up, wire.CodeConflict},
		{"owner down", st, "n2", map[string]bool{"n2": true, "n3": true}, wire.CodeConflict},
		{"the owner itself", st, "n1", up, wire.CodeBadRequest},
		{"not a follower", st, "n4", up, wire.CodeBadRequest},
		{"follower down", st, "n3", up4, wire.CodeBadRequest},
		{"no follower up", st, "", map[string]bool{"n1": true}, wire.CodeUnavailable},
	} {
		v := view
		v.Up = func(n string) bool { return c.up[n] }
		if p, err := PlanMove(c.st, c.target, v); wire.CodeOf(err) != c.code {
			t.Errorf("%s: %+v, %v; want %s", c.name, p, err, c.code)
		}
	}
}

type fakeHandoff struct {
	err     error
	resumed []string
	asked   []wire.HandoffRequest
	// st is the move's state, to see whether the move was recorded
	// before the hand-off.
	st          *fakeMoveState
	beganByThen bool
	// cancel, if set, is called during the hand-off (the move's caller
	// giving up: a request's deadline, leadership lost, shutdown).
	cancel func()
	// resumeCtxErr is the resume's context's error when it was sent.
	resumeCtxErr error
}

func (f *fakeHandoff) Handoff(ctx context.Context, node string, req wire.HandoffRequest) (*wire.HandoffReply, error) {
	f.asked = append(f.asked, req)
	if req.Resume {
		f.resumed = append(f.resumed, node)
		f.resumeCtxErr = ctx.Err()
		return &wire.HandoffReply{}, nil
	}
	f.beganByThen = f.st != nil && f.st.began
	if f.cancel != nil {
		f.cancel()
		return nil, ctx.Err()
	}
	if f.err != nil {
		return nil, f.err
	}
	return &wire.HandoffReply{Node: node, Stream: req.Stream, Epoch: req.Epoch, RecordTail: 10}, nil
}

type fakeMoveState struct {
	beginErr  error
	promoted  string
	began     bool
	handoff   time.Duration
	recovered bool
	// recoverErr fails the recovery; recoverCtxErr is its context's
	// error when it was called.
	recoverErr    error
	recoverCtxErr error
}

func (f *fakeMoveState) Begin(_ context.Context, _ string, _ uint64, _ wire.Assignment, handoff time.Duration) (uint64, error) {
	if f.beginErr != nil {
		return 0, f.beginErr
	}
	f.began, f.handoff = true, handoff
	return 1, nil
}

func (f *fakeMoveState) Recover(ctx context.Context, stream string, _ uint64) (wire.Assignment, uint64, error) {
	f.recovered, f.recoverCtxErr = true, ctx.Err()
	if f.recoverErr != nil {
		return wire.Assignment{}, 0, f.recoverErr
	}
	return wire.Assignment{Stream: stream, Epoch: 5, Owner: f.promoted}, 9, nil
}

// TestMoverRecordsBeforeHandoff: the move is recorded (with the hand-off's
// bound) before the owner is asked to hand off, so the Raft write is not in
// the write gap; a begin that is refused asks the owner nothing; a
// hand-off that fails after the begin goes on as a recovery (whose seal
// ends the owner's hold), answering the hand-off's code unless the
// recovery promoted the target anyway; a recovery that promoted another
// copy is reported aborted; a move that lands answers its result. No
// resume is sent when the recovery commits: its seal ends the owner's hold.
func TestMoverRecordsBeforeHandoff(t *testing.T) {
	old := wire.Assignment{Stream: "s", StreamID: 9, Epoch: 4, Owner: "n1", Followers: []string{"n2"}}
	prop := wire.Assignment{Stream: "s", StreamID: 9, Epoch: 5, Owner: "n2", Followers: []string{"n1"}}
	for _, c := range []struct {
		name      string
		h         *fakeHandoff
		st        *fakeMoveState
		code      string
		asked     bool
		recovered bool
	}{
		{"hand-off timed out", &fakeHandoff{err: wire.Errorf(wire.CodeTimeout, "slow")}, &fakeMoveState{promoted: "n1"}, wire.CodeTimeout, true, true},
		{"no answer", &fakeHandoff{err: context.DeadlineExceeded}, &fakeMoveState{promoted: "n1"}, wire.CodeTimeout, true, true},
		{"hand-off failed, target promoted anyway", &fakeHandoff{err: context.DeadlineExceeded}, &fakeMoveState{promoted: "n2"}, "", true, true},
		{"begin refused", &fakeHandoff{}, &fakeMoveState{beginErr: wire.Errorf(wire.CodeConflict, "moved on")}, wire.CodeConflict, false, false},
		{"another copy promoted", &fakeHandoff{}, &fakeMoveState{promoted: "n1"}, wire.CodeConflict, true, true},
		{"moved", &fakeHandoff{}, &fakeMoveState{promoted: "n2"}, "", true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.h.st = c.st
			m := &Mover{Handoffer: c.h, State: c.st, Timeout: 100 * time.Millisecond, ID: "m7"}
			res, err := m.Run(context.Background(), old, 3, prop)
			if codeOr(err, "") != c.code {
				t.Fatalf("error %v, want code %q", err, c.code)
			}
			if (err != nil && c.code != wire.CodeTimeout || c.code == wire.CodeTimeout) && c.code != "" && !errors.Is(err, ErrMoveAborted) {
				t.Fatalf("error %v is not ErrMoveAborted", err)
			}
			if len(c.h.resumed) > 0 || (len(c.h.asked) > 0) != c.asked || c.st.recovered != c.recovered {
				t.Fatalf("resumed %v asked %v recovered %v, want no resume, asked %v recovered %v", c.h.resumed, c.h.asked, c.st.recovered, c.asked, c.recovered)
			}
			if c.asked && (!c.h.beganByThen || c.st.handoff != 1100*time.Millisecond) {
				t.Fatalf("hand-off asked before the move was recorded (%v) or bound %v, want 1.1s", c.h.beganByThen, c.st.handoff)
			}
			if c.code == "" && (res.Assignment.Owner != "n2" || res.Version != 9) {
				t.Fatalf("result %+v", res)
			}
			for _, h := range c.h.asked {
				if h.Target != "n2" || h.Epoch != 4 || h.TimeoutMS != 100 || h.HoldMS != 200 || h.MoveID != "m7" {
					t.Fatalf("hand-off request %+v", h)
				}
			}
		})
	}
}

// TestMoverCutByCallerStillEndsTheHold: a move whose caller gives up
// during the hand-off (stream.move's request deadline, the balancer's
// leadership lost, a drain's shutdown), after the begin, still runs its
// recovery, on a context of its own (the caller's has ended), so the
// recovery's seal ends the owner's hold; and a recovery that does not
// commit sends the owner a resume, also on a live context, so the owner
// is not left holding its intake until its hold passes.
func TestMoverCutByCallerStillEndsTheHold(t *testing.T) {
	old := wire.Assignment{Stream: "s", StreamID: 9, Epoch: 4, Owner: "n1", Followers: []string{"n2"}}
	prop := wire.Assignment{Stream: "s", StreamID: 9, Epoch: 5, Owner: "n2", Followers: []string{"n1"}}
	for _, c := range []struct {
		name       string
		recoverErr error
		resumed    bool
	}{
		{"recovery commits", nil, false},
		{"recovery fails", errors.New("no quorum"), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			st := &fakeMoveState{promoted: "n1", recoverErr: c.recoverErr}
			h := &fakeHandoff{st: st, cancel: cancel}
			m := &Mover{Handoffer: h, State: st, Timeout: 100 * time.Millisecond, ID: "m7"}
			_, err := m.Run(ctx, old, 3, prop)
			if err == nil {
				t.Fatal("a move cut during its hand-off answered success")
			}
			if !st.recovered || st.recoverCtxErr != nil {
				t.Fatalf("recovered %v with context error %v: the recovery must run on a live context", st.recovered, st.recoverCtxErr)
			}
			if (len(h.resumed) > 0) != c.resumed || h.resumeCtxErr != nil {
				t.Fatalf("resumed %v (context error %v), want resumed %v on a live context", h.resumed, h.resumeCtxErr, c.resumed)
			}
			if c.resumed && (h.asked[len(h.asked)-1].MoveID != "m7" || h.resumed[0] != "n1") {
				t.Fatalf("resume %+v, want the move's id to the owner n1", h.asked[len(h.asked)-1])
			}
		})
	}
}
