package client

import (
	"testing"

	"github.com/brook-streams/brook/pkg/wire"
)

// TestAdminRetriesOverloaded: a coordinator answers overloaded before it
// runs the request (--max-inflight), so reads and writes alike may retry
// it; a conflict, which says the write was judged, is not retried.
func TestAdminRetriesOverloaded(t *testing.T) {
	over := wire.Errorf(wire.CodeOverloaded, "coordinator 1 serves 1024 requests at once; retry")
	if !readRetryable(over) || !writeRetryable(over) {
		t.Fatalf("overloaded: read retried %v, write retried %v; want both", readRetryable(over), writeRetryable(over))
	}
	if conflict := wire.Errorf(wire.CodeConflict, "lost"); writeRetryable(conflict) {
		t.Fatal("a conflict is retried")
	}
}
