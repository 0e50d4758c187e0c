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
// (wire.MoveReplyWithin, less a second for the reply's way): at the
// default seal timeout the whole move fits, so nothing is cut; with a
// longer one the request's deadline is cut to that bound.
func TestMoveRequestTimeoutWithinTheCallersWait(t *testing.T) {
	for _, tc := range []struct {
		seal      time.Duration
		timeoutMS int64
		whole     bool // the move's whole bound fits
	}{
		{recovery.DefaultSealTimeout, 0, true},
		{recovery.DefaultSealTimeout, 7000, true},
		{recovery.DefaultSealTimeout, wire.MaxMoveTimeoutMS, true},
		{5 * time.Second, 0, false},
	} {
		s := &Server{opt: Options{SealTimeout: tc.seal}}
		if err := s.opt.defaults(); err != nil {
			t.Fatal(err)
		}
		got := s.moveRequestTimeout(tc.timeoutMS)
		caller := wire.MoveReplyWithin(tc.timeoutMS) - time.Second
		whole := requestTimeout + recovery.HandoffBound(time.Duration(tc.timeoutMS)*time.Millisecond) + s.moverGrace()
		if got > caller {
			t.Fatalf("seal timeout %v, timeout_ms %d: the move may take %v, past the callers' wait %v", tc.seal, tc.timeoutMS, got, caller)
		}
		if (got == whole) != tc.whole {
			t.Fatalf("seal timeout %v, timeout_ms %d: bound %v, the whole move %v; want the whole: %v", tc.seal, tc.timeoutMS, got, whole, tc.whole)
		}
	}
}
