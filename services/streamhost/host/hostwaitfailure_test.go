package host

import (
	"context"
	"errors"
	"testing"
)

// TestHostWaitFailure: what a failed host wait leads to. A late host wait
// whose copies grew between its deadline and the look at its cause (a join
// cancels the request even once it has ended) is late, not a failure that
// wakes every copy (review of s28-h1: that race turned the late answers of
// a mass failover back into the storm of per-copy requests).
func TestHostWaitFailure(t *testing.T) {
	for _, c := range []struct {
		name     string
		stopping bool
		err      error
		cause    error
		late     int
		want     int
	}{
		{"stopping", true, context.Canceled, nil, 0, hostWaitStop},
		{"cancelled for joiners", false, context.Canceled, errSetGrew, 0, hostWaitRegrown},
		{"late", false, context.DeadlineExceeded, nil, 0, hostWaitLate},
		{"late, copies joined after the deadline", false, context.DeadlineExceeded, errSetGrew, 0, hostWaitLate},
		{"late the third time in a row", false, context.DeadlineExceeded, nil, hostWaitLateMax - 1, hostWaitWake},
		{"link lost", false, errLinkLost, nil, 0, hostWaitWake},
		{"link lost as copies joined", false, errLinkLost, errSetGrew, 0, hostWaitWake},
		{"no responders", false, errNoServer, nil, 0, hostWaitWake},
		{"other error", false, errors.New("boom"), nil, 0, hostWaitWake},
	} {
		if got := hostWaitFailure(c.stopping, c.err, c.cause, c.late); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}
