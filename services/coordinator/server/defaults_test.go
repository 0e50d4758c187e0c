package server

import (
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/controller"
	"github.com/brook-streams/brook/services/coordinator/recovery"
)

// Options left unset take the packages' defaults, the same ones the
// coordinator's flags default to (config.TestDefaultsAreThePackagesOwn).
func TestOptionsDefaultsAreThePackagesOwn(t *testing.T) {
	var o Options
	if err := o.defaults(); err != nil {
		t.Fatal(err)
	}
	if o.SealTimeout != recovery.DefaultSealTimeout || o.ReplaceAfter != controller.DefaultReplaceAfter {
		t.Fatalf("seal timeout %v (package %v), replace after %v (package %v)",
			o.SealTimeout, recovery.DefaultSealTimeout, o.ReplaceAfter, controller.DefaultReplaceAfter)
	}
}

// A stream.move is answered within what its callers wait
// (wire.MoveReplyWithin, less a second for the reply's way) at the
// default seal timeout, whatever its hand-off timeout.
func TestMoveRequestTimeoutWithinTheCallersWait(t *testing.T) {
	s := &Server{}
	if err := s.opt.defaults(); err != nil {
		t.Fatal(err)
	}
	for _, timeoutMS := range []int64{0, 1, 7000, wire.MaxMoveTimeoutMS} {
		got, caller := s.moveRequestTimeout(timeoutMS), wire.MoveReplyWithin(timeoutMS)-time.Second
		if got > caller {
			t.Fatalf("timeout_ms %d: the move may take %v, past the callers' wait %v", timeoutMS, got, caller)
		}
	}
}
