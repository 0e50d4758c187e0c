package raftstore

import (
	"errors"
	"testing"

	dragonboat "github.com/lni/dragonboat/v4"

	"github.com/brook-streams/brook/pkg/wire"
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
