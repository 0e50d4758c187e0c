package raftstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	dragonboat "github.com/lni/dragonboat/v4"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/state"
)

// A proposal whose outcome is unknown (it may be in the log and commit
// later) is answered outcome_unknown, which clients do not repeat on their
// own; only one Dragonboat refused before it reached the log is
// unavailable (the Go client repeats writes answered unavailable, so a
// committed create answered unavailable came back "exists").
func TestProposeErrorCodes(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{dragonboat.ErrTimeout, wire.CodeOutcomeUnknown},
		{dragonboat.ErrCanceled, wire.CodeOutcomeUnknown},
		{dragonboat.ErrAborted, wire.CodeOutcomeUnknown},
		{dragonboat.ErrShardClosed, wire.CodeOutcomeUnknown},
		{dragonboat.ErrShardNotReady, wire.CodeUnavailable},
		{dragonboat.ErrSystemBusy, wire.CodeUnavailable},
		{errors.New("the request was answered unavailable for want of a quorum"), wire.CodeUnavailable},
	} {
		if got := wire.CodeOf(proposeFailed("propose x", tc.err)); got != tc.want {
			t.Errorf("%v: code %q, want %q", tc.err, got, tc.want)
		}
	}
}

// A proposal with less than one tick of the Raft clock left is refused by
// Dragonboat before it reaches the log (ErrTimeoutTooSmall): the request's
// gate must not count it as possibly applied, and the answer is
// unavailable, which clients repeat.
func TestProposalUnderOneTickIsNotInTheLog(t *testing.T) {
	c := newCluster(t)
	s := c.stores[c.leader()]
	ctx, gate := WithProposeGate(context.Background())
	ctx, cancel := context.WithTimeout(ctx, time.Duration(DefaultRTTMillisecond/2)*time.Millisecond)
	defer cancel()
	_, err := s.Propose(ctx, state.NodeSeen("n1", 1, 100))
	if err == nil || !strings.Contains(err.Error(), dragonboat.ErrTimeoutTooSmall.Error()) || wire.CodeOf(err) != wire.CodeUnavailable {
		t.Fatalf("propose with half a tick left: %v (code %q), want unavailable for a timeout too small", err, wire.CodeOf(err))
	}
	if gate.Proposed() {
		t.Fatal("a proposal Dragonboat refused before the log counts as possibly applied")
	}
	if !gate.Abandon() {
		t.Fatal("the request cannot be abandoned though nothing reached the log")
	}
}

// A read-index round Dragonboat drops is run again only while it can
// still be answered: Dragonboat refuses a round under one tick
// (ErrTimeoutTooSmall), so the retries stop once less than two ticks are
// left, and the error returned is the drop, not the refusal of a retry
// that could never have succeeded.
func TestReadIndexRetriesStopTwoTicksBeforeTheBudget(t *testing.T) {
	const tick, budget = 20 * time.Millisecond, 200 * time.Millisecond
	var budgets []time.Duration
	dropAll := func(left time.Duration) error {
		budgets = append(budgets, left)
		if left < tick { // as Dragonboat's ReadIndex answers
			return fmt.Errorf("read index: %w", dragonboat.ErrTimeoutTooSmall)
		}
		return fmt.Errorf("read index: %w", errRoundDropped)
	}
	start := time.Now()
	err := retryRounds(budget, tick, dropAll)
	took := time.Since(start)
	if !errors.Is(err, errRoundDropped) {
		t.Fatalf("every round dropped: got %v, want the drop", err)
	}
	if len(budgets) < 2 {
		t.Fatalf("%d rounds: a dropped round was not run again", len(budgets))
	}
	for i, b := range budgets {
		if b < tick {
			t.Errorf("round %d asked for with %v left, under one tick (%v)", i, b, tick)
		}
	}
	if took < budget-2*tick {
		t.Errorf("gave up after %v with more than two ticks of %v left", took, budget)
	}

	// A round that completes after drops ends the retries, and one that
	// fails otherwise is not run again.
	n := 0
	if err := retryRounds(budget, tick, func(time.Duration) error {
		if n++; n < 3 {
			return errRoundDropped
		}
		return nil
	}); err != nil || n != 3 {
		t.Fatalf("two drops then an answer: %v after %d rounds, want nil after 3", err, n)
	}
	n = 0
	other := errors.New("read index: not completed")
	if err := retryRounds(budget, tick, func(time.Duration) error { n++; return other }); !errors.Is(err, other) || n != 1 {
		t.Fatalf("a round that failed: %v after %d rounds, want it after 1", err, n)
	}
}

// A proposal whose context is already past its deadline is refused by
// Dragonboat before it reaches the log (ErrInvalidDeadline), as one under
// a tick is: the gate must not count it as possibly applied, and it is
// answered unavailable.
func TestProposalPastItsDeadlineIsNotInTheLog(t *testing.T) {
	c := newCluster(t)
	s := c.stores[c.leader()]
	ctx, gate := WithProposeGate(context.Background())
	ctx, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Millisecond))
	defer cancel()
	_, err := s.Propose(ctx, state.NodeSeen("n1", 1, 100))
	if err == nil || wire.CodeOf(err) != wire.CodeUnavailable {
		t.Fatalf("propose past its deadline: %v (code %q), want unavailable", err, wire.CodeOf(err))
	}
	if gate.Proposed() {
		t.Fatalf("a proposal Dragonboat refused before the log (%v) counts as possibly applied", err)
	}
}
