package raftstore

import (
	"context"
	"errors"
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
