package server

import (
	"testing"

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
